#include "deploy/loader/weights.h"

#include <ATen/ATen.h>
#include <ATen/core/class_type.h>
#include <ATen/core/function.h>
#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deploy/loader/failure.h"
#include "deploy/loader/file_io.h"
#include "deploy/loader/manifest.h"
#include "deploy/loader/tensor_io.h"
#include "deploy/loader/text.h"
#include "deploy/loader/verify.h"

namespace my_ops::loader {
namespace {

constexpr FileRole kWeightsRole{"weights file", kIntegrity, kIntegrity};
constexpr FileRole kWeightsManifestRole{"weights manifest", kIntegrity, kIntegrity};
// How torch names the custom class registered as class_<T>("Class") in TORCH_LIBRARY(ns).
constexpr char kCustomClassPrefix[] = "__torch__.torch.classes.";

c10::ScalarType scalar_type(const std::string& name) {
  for (c10::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                            at::kShort, at::kChar, at::kByte, at::kBool}) {
    if (name == c10::toString(t)) return t;
  }
  // parse_weights_manifest admits only the dtypes above.
  fail(kIntegrity, "unknown dtype " + single_quoted(name));
}

std::string describe(const std::string& dtype, c10::IntArrayRef shape) {
  return dtype + " " + c10::str(shape);
}

// One pass over the weights file, through its descriptor, hashing every byte.
class BlobReader {
 public:
  BlobReader(int fd, const std::string& path) : fd_(fd), path_(path) {
    crypto_hash_sha256_init(&hash_);
  }

  // Reads bytes [position, offset) into the hash only, then `n` bytes into `dst`.
  void read_to(uint64_t offset, void* dst, uint64_t n) {
    skip_to(offset);
    read(dst, n);
  }

  // Hashes the rest of the file; fails unless it ends at `size`.
  std::string finish(uint64_t size) {
    skip_to(size);
    char extra;
    if (read_at(fd_, position_, &extra, 1)) {
      fail(kIntegrity, "weights file " + path_ + " grew while it was read");
    }
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&hash_, digest);
    return to_hex(digest, sizeof(digest));
  }

 private:
  void skip_to(uint64_t offset) {
    // An empty tensor may sit where the previous one ended, or share its offset.
    if (offset <= position_) return;
    std::vector<unsigned char> buf(std::min<uint64_t>(offset - position_, uint64_t{1} << 20));
    while (position_ < offset) {
      read(buf.data(), std::min<uint64_t>(buf.size(), offset - position_));
    }
  }

  void read(void* dst, uint64_t n) {
    auto* p = static_cast<unsigned char*>(dst);
    for (uint64_t done = 0; done < n;) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 26));
      if (!read_at(fd_, position_, p + done, chunk)) {
        fail(kIntegrity, "cannot read weights file " + path_ + " at byte " +
                             std::to_string(position_) + ": it is shorter than its manifest says");
      }
      crypto_hash_sha256_update(&hash_, p + done, chunk);
      position_ += chunk;
      done += chunk;
    }
  }

  int fd_;
  const std::string& path_;
  uint64_t position_ = 0;
  crypto_hash_sha256_state hash_;
};

at::Tensor read_tensor(BlobReader& reader, const WeightsTensor& t) {
  at::Tensor out = at::empty(t.shape, at::TensorOptions().dtype(scalar_type(t.dtype)));
  reader.read_to(t.offset, out.data_ptr(), t.nbytes);
  return out;
}

std::string class_name(const c10::IValue& object) {
  const auto type = object.toObject()->type();
  std::string name = type->name() ? type->name()->qualifiedName() : "";
  if (name.rfind(kCustomClassPrefix, 0) != 0) return name;
  name = name.substr(sizeof(kCustomClassPrefix) - 1);
  const size_t dot = name.find('.');
  return dot == std::string::npos ? name : name.substr(0, dot) + "::" + name.substr(dot + 1);
}

c10::IValue call_method(const c10::IValue& object, const char* method,
                        std::vector<c10::IValue> args) {
  torch::jit::Function& fn = object.toObject()->type()->getMethod(method);
  args.insert(args.begin(), object);
  return fn(std::move(args));
}

}  // namespace

LoadedWeights read_weights(const WeightsCheck& check, const std::string& package_sha256) {
  LoadedWeights out;
  out.source = check.weights;
  out.manifest_path =
      check.manifest.empty() ? dir_name(check.weights) + "/weights.json" : check.manifest;
  const std::string& path = out.manifest_path;
  const std::optional<std::string> text =
      read_small(path, kWeightsManifestRole, kMaxWeightsManifestBytes);
  if (!text) fail(kIntegrity, "weights manifest not found: " + path);
  // The signature covers the manifest's exact bytes, so it is checked before any are parsed.
  if (!check.public_key.empty()) check_signature(*text, "weights manifest", path, check.public_key);
  try {
    out.manifest = parse_weights_manifest(*text);
  } catch (const ManifestError& e) {
    fail(kIntegrity, "weights manifest " + path + " is malformed: " + e.what());
  }
  const WeightsManifest& m = out.manifest;
  if (m.package.sha256 != package_sha256) {
    fail(kIntegrity, "weights manifest " + path + " is for another package: sha256 " +
                         m.package.sha256 + ", the loaded package's is " + package_sha256);
  }

  UniqueFd fd = open_regular_file(check.weights, kWeightsRole);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != m.blob_size) {
    fail(kIntegrity, "weights file " + check.weights + " does not match weights manifest " + path +
                         ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
                         std::to_string(m.blob_size));
  }
  // In file order, so that the one pass reads each tensor where it lies.
  struct Slot {
    const WeightsTensor* tensor;
    at::Tensor* out;
  };
  std::vector<Slot> slots;
  for (const auto& c : m.constants) slots.push_back({&c.tensor, &out.constants[c.name]});
  out.object_tensors.resize(m.objects.size());
  for (size_t i = 0; i < m.objects.size(); ++i) {
    out.object_tensors[i].resize(m.objects[i].tensors.size());
    for (size_t j = 0; j < m.objects[i].tensors.size(); ++j) {
      slots.push_back({&m.objects[i].tensors[j].tensor, &out.object_tensors[i][j]});
    }
  }
  std::sort(slots.begin(), slots.end(),
            [](const Slot& a, const Slot& b) { return a.tensor->offset < b.tensor->offset; });
  BlobReader reader(fd.get(), check.weights);
  try {
    for (const Slot& s : slots) *s.out = read_tensor(reader, *s.tensor);
  } catch (const c10::Error& e) {
    fail(kOther, "cannot hold the tensors of weights file " + check.weights + ": " + error_text(e));
  }
  const std::string sha256 = reader.finish(m.blob_size);
  if (sha256 != m.blob.sha256) {
    fail(kIntegrity, "weights file " + check.weights + " does not match weights manifest " + path +
                         ": sha256 " + sha256 + ", manifest has " + m.blob.sha256);
  }
  return out;
}

StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            LoadedWeights&& weights) {
  const std::string& file = weights.source;
  auto refuse = [&](const std::string& why) {
    fail(kIntegrity, "weights file " + file + " does not fit the package: " + why);
  };
  const WeightsManifest& m = weights.manifest;

  // Constants: the same names, dtypes and shapes as the model's own, or the copy below would put
  // bytes where the model's code does not expect them.
  const auto current = model.get_runner()->extract_constants_map(/*use_inactive=*/false);
  for (const auto& [name, tensor] : current) {
    if (!weights.constants.count(name)) refuse("it lacks the package's constant " + name);
  }
  for (const auto& c : m.constants) {
    auto it = current.find(c.name);
    if (it == current.end()) refuse("the package has no constant " + c.name);
    const at::Tensor& have = it->second;
    const std::string want = describe(c.tensor.dtype, c.tensor.shape);
    if (c10::toString(have.scalar_type()) != c.tensor.dtype ||
        !have.sizes().equals(c.tensor.shape)) {
      refuse("constant " + c.name + " is " + want + " in the weights file, " +
             describe(c10::toString(have.scalar_type()), have.sizes()) + " in the package");
    }
    if (!have.is_contiguous()) {
      refuse("the package's constant " + c.name + " is not contiguous, and weights files are");
    }
  }

  // Custom objects: every one the package holds, each tensor of its state carried.
  StagedWeights staged;
  staged.source = file;
  staged.sha256 = m.blob.sha256;
  auto objects = model.get_custom_objs();
  for (const auto& [name, object] : objects) {
    const bool listed = std::any_of(m.objects.begin(), m.objects.end(),
                                    [&](const WeightsObject& o) { return o.name == name; });
    if (!listed) refuse("it lacks the package's custom object " + name);
  }
  for (size_t i = 0; i < m.objects.size(); ++i) {
    const WeightsObject& o = m.objects[i];
    auto it = objects.find(o.name);
    if (it == objects.end()) refuse("the package has no custom object " + o.name);
    const c10::IValue& object = it->second;
    if (!object.isObject() || class_name(object) != o.class_name) {
      refuse("custom object " + o.name + " is a " + o.class_name +
             " in the weights file, not in "
             "the package");
    }
    c10::IValue state;
    try {
      state = call_method(object, "__getstate__", {});
    } catch (const std::exception& e) {
      refuse("custom object " + o.name + " has no state to replace: " + error_text(e));
    }
    if (!state.isTuple()) refuse("custom object " + o.name + "'s state is not a tuple");
    std::vector<c10::IValue> items = state.toTupleRef().elements().vec();
    std::vector<bool> carried(items.size(), false);
    for (size_t j = 0; j < o.tensors.size(); ++j) {
      const WeightsStateTensor& t = o.tensors[j];
      const std::string where =
          "custom object " + o.name + " state item " + std::to_string(t.index);
      if (t.index >= items.size() || !items[t.index].isTensor()) {
        refuse(where + " is not a tensor in the package");
      }
      const at::Tensor have = items[t.index].toTensor();
      if (c10::toString(have.scalar_type()) != t.tensor.dtype ||
          !have.sizes().equals(t.tensor.shape)) {
        refuse(where + " is " + describe(t.tensor.dtype, t.tensor.shape) +
               " in the weights file, " +
               describe(c10::toString(have.scalar_type()), have.sizes()) + " in the package");
      }
      items[t.index] = weights.object_tensors[i][j].to(have.device());
      carried[t.index] = true;
    }
    for (size_t k = 0; k < items.size(); ++k) {
      if (!carried[k] && items[k].isTensor()) {
        refuse("custom object " + o.name + " state item " + std::to_string(k) +
               " is a tensor the weights file does not carry");
      }
    }
    staged.objects.push_back({o.name, object, c10::ivalue::Tuple::create(std::move(items)), state});
  }

  try {
    // Into the inactive buffer: runs keep reading the active one. A CUDA package's constants are
    // copied to its device on the way.
    model.load_constants(weights.constants, /*use_inactive=*/true, /*check_full_update=*/true,
                         /*user_managed=*/false, /*allow_h2d_copy=*/true);
  } catch (const std::exception& e) {
    fail(kOther, "cannot load weights file " + file + ": " + error_text(e));
  }
  return staged;
}

void activate_weights(torch::inductor::AOTIModelPackageLoader& model, const StagedWeights& staged) {
  size_t done = 0;
  try {
    for (; done < staged.objects.size(); ++done) {
      const ObjectUpdate& u = staged.objects[done];
      call_method(u.object, "__setstate__", {u.new_state});
    }
  } catch (const std::exception& e) {
    const std::string name = staged.objects[done].name;
    // Back to the states they had, which each object accepted before.
    while (done-- > 0) {
      const ObjectUpdate& u = staged.objects[done];
      call_method(u.object, "__setstate__", {u.old_state});
    }
    fail(kIntegrity, "weights file " + staged.source + ": custom object " + name +
                         " refused its new state: " + error_text(e));
  }
  model.get_runner()->swap_constant_buffer();
}

void release_previous_weights(torch::inductor::AOTIModelPackageLoader& model) {
  model.get_runner()->free_inactive_constant_buffer();
}

}  // namespace my_ops::loader
