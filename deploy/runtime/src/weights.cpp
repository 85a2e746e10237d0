#include "deploy/runtime/src/weights.h"

#include <ATen/core/class_type.h>
#include <ATen/core/function.h>
#include <ATen/ops/empty.h>
#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/manifest.h"
#include "deploy/runtime/src/tensor_io.h"
#include "deploy/runtime/src/text.h"
#include "deploy/runtime/src/verify.h"

namespace my_ops::deploy::detail {
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

// The manifest, its signature checked before a byte of it is parsed (the signature covers its
// exact bytes), naming the loaded package.
WeightsManifest read_manifest(const WeightsCheck& check, const std::string& path,
                              const std::string& package_sha256) {
  const std::optional<std::string> text =
      read_small(path, kWeightsManifestRole, kMaxWeightsManifestBytes);
  if (!text) fail(kIntegrity, "weights manifest not found: " + path);
  if (!check.public_key.empty()) check_signature(*text, "weights manifest", path, check.public_key);
  WeightsManifest m;
  try {
    m = parse_weights_manifest(*text);
  } catch (const ManifestError& e) {
    fail(kIntegrity, "weights manifest " + path + " is malformed: " + e.what());
  }
  if (m.package.sha256 != package_sha256) {
    fail(kIntegrity, "weights manifest " + path + " is for another package: sha256 " +
                         m.package.sha256 + ", the loaded package's is " + package_sha256);
  }
  return m;
}

// A custom object of the model and what the weights file replaces in its state.
struct ObjectPlan {
  std::string name;
  c10::IValue object;
  c10::IValue old_state;
  std::vector<c10::IValue> items;     // its state's items, to take the new tensors
  std::vector<at::Tensor> new_items;  // as the manifest's object.tensors
};

// Every tensor of the manifest against what the model holds there (name, dtype, shape), and
// every one the model holds against the manifest, before anything is allocated: what is read
// afterwards has the model's own sizes, whatever the manifest claims.
class Fit {
 public:
  Fit(torch::inductor::AOTIModelPackageLoader& model, const WeightsManifest& m,
      const std::string& file)
      : file_(file) {
    check_constants(model, m);
    check_objects(model, m);
  }

  std::vector<ObjectPlan>& objects() { return objects_; }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    fail(kIntegrity, "weights file " + file_ + " does not fit the package: " + why);
  }

  void check_tensor(const std::string& what, const WeightsTensor& t, const at::Tensor& have) const {
    if (c10::toString(have.scalar_type()) != t.dtype || !have.sizes().equals(t.shape)) {
      refuse(what + " is " + describe(t.dtype, t.shape) + " in the weights file, " +
             describe(c10::toString(have.scalar_type()), have.sizes()) + " in the package");
    }
  }

  // The manifest lists every `what` (constant, custom object) the package holds, and only those.
  template <class Listed, class Held>
  void same_names(const Listed& listed, const Held& held, const std::string& what) const {
    std::unordered_set<std::string> names;
    for (const auto& entry : listed) names.insert(entry.name);
    for (const auto& [name, value] : held) {
      if (!names.count(name)) refuse("it lacks the package's " + what + " " + name);
    }
    for (const auto& entry : listed) {
      if (!held.count(entry.name)) refuse("the package has no " + what + " " + entry.name);
    }
  }

  // The same dtypes and shapes as the model's own, or the copy into its buffer would put bytes
  // where the model's code does not expect them.
  void check_constants(torch::inductor::AOTIModelPackageLoader& model, const WeightsManifest& m) {
    const auto current = model.get_runner()->extract_constants_map(/*use_inactive=*/false);
    same_names(m.constants, current, "constant");
    for (const auto& c : m.constants) {
      const at::Tensor& have = current.at(c.name);
      check_tensor("constant " + c.name, c.tensor, have);
      if (!have.is_contiguous()) {
        refuse("the package's constant " + c.name + " is not contiguous, and weights files are");
      }
    }
  }

  // Every custom object the package holds, each tensor of its state carried.
  void check_objects(torch::inductor::AOTIModelPackageLoader& model, const WeightsManifest& m) {
    const auto objects = model.get_custom_objs();
    same_names(m.objects, objects, "custom object");
    for (const WeightsObject& o : m.objects) {
      const c10::IValue& object = objects.at(o.name);
      if (!object.isObject() || class_name(object) != o.class_name) {
        refuse("custom object " + o.name + " is a " + o.class_name +
               " in the weights file, not in the package");
      }
      ObjectPlan plan{o.name, object, {}, {}, {}};
      try {
        plan.old_state = call_method(object, "__getstate__", {});
      } catch (const std::exception& e) {
        refuse("custom object " + o.name + " has no state to replace: " + error_text(e));
      }
      if (!plan.old_state.isTuple()) refuse("custom object " + o.name + "'s state is not a tuple");
      plan.items = plan.old_state.toTupleRef().elements().vec();
      std::vector<bool> carried(plan.items.size(), false);
      for (const WeightsStateTensor& t : o.tensors) {
        const std::string where =
            "custom object " + o.name + " state item " + std::to_string(t.index);
        if (t.index >= plan.items.size() || !plan.items[t.index].isTensor()) {
          refuse(where + " is not a tensor in the package");
        }
        check_tensor(where, t.tensor, plan.items[t.index].toTensor());
        carried[t.index] = true;
      }
      for (size_t k = 0; k < plan.items.size(); ++k) {
        if (!carried[k] && plan.items[k].isTensor()) {
          refuse("custom object " + o.name + " state item " + std::to_string(k) +
                 " is a tensor the weights file does not carry");
        }
      }
      objects_.push_back(std::move(plan));
    }
  }

  const std::string& file_;
  std::vector<ObjectPlan> objects_;
};

// weights.bin, opened once, its size checked, then read in one pass into fresh tensors (of the
// sizes Fit checked) while hashed; nothing of it is used unless the sha256 is the manifest's.
void read_blob(const std::string& file, const std::string& manifest_path, const WeightsManifest& m,
               std::unordered_map<std::string, at::Tensor>& constants,
               std::vector<ObjectPlan>& objects) {
  UniqueFd fd = open_regular_file(file, kWeightsRole);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || static_cast<uint64_t>(st.st_size) != m.blob_size) {
    fail(kIntegrity, "weights file " + file + " does not match weights manifest " + manifest_path +
                         ": " + std::to_string(st.st_size) + " bytes, the manifest says " +
                         std::to_string(m.blob_size));
  }
  // In file order, so that the one pass reads each tensor where it lies.
  struct Slot {
    const WeightsTensor* tensor;
    at::Tensor* out;
  };
  std::vector<Slot> slots;
  for (const auto& c : m.constants) slots.push_back({&c.tensor, &constants[c.name]});
  for (size_t i = 0; i < m.objects.size(); ++i) {
    objects[i].new_items.resize(m.objects[i].tensors.size());
    for (size_t j = 0; j < m.objects[i].tensors.size(); ++j) {
      slots.push_back({&m.objects[i].tensors[j].tensor, &objects[i].new_items[j]});
    }
  }
  std::sort(slots.begin(), slots.end(),
            [](const Slot& a, const Slot& b) { return a.tensor->offset < b.tensor->offset; });
  BlobReader reader(fd.get(), file);
  try {
    for (const Slot& s : slots) {
      *s.out = at::empty(s.tensor->shape, at::TensorOptions().dtype(scalar_type(s.tensor->dtype)));
      reader.read_to(s.tensor->offset, s.out->data_ptr(), s.tensor->nbytes);
    }
  } catch (const c10::Error& e) {
    fail(kOther, "cannot hold the tensors of weights file " + file + ": " + error_text(e));
  }
  const std::string sha256 = reader.finish(m.blob_size);
  if (sha256 != m.blob.sha256) {
    fail(kIntegrity, "weights file " + file + " does not match weights manifest " + manifest_path +
                         ": sha256 " + sha256 + ", manifest has " + m.blob.sha256);
  }
}

}  // namespace

StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            const WeightsCheck& check, const std::string& package_sha256) {
  const std::string& file = check.weights;
  const std::string manifest_path =
      check.manifest.empty() ? dir_name(file) + "/weights.json" : check.manifest;
  const WeightsManifest m = read_manifest(check, manifest_path, package_sha256);
  Fit fit(model, m, file);
  std::unordered_map<std::string, at::Tensor> constants;
  read_blob(file, manifest_path, m, constants, fit.objects());

  StagedWeights staged;
  staged.source = file;
  staged.sha256 = m.blob.sha256;
  for (size_t i = 0; i < m.objects.size(); ++i) {
    ObjectPlan& plan = fit.objects()[i];
    for (size_t j = 0; j < m.objects[i].tensors.size(); ++j) {
      c10::IValue& item = plan.items[m.objects[i].tensors[j].index];
      item = plan.new_items[j].to(item.toTensor().device());
    }
    staged.objects.push_back({plan.name, plan.object,
                              c10::ivalue::Tuple::create(std::move(plan.items)), plan.old_state});
  }
  try {
    // Into the inactive buffer: runs keep reading the active one. A CUDA package's constants are
    // copied to its device on the way.
    model.load_constants(constants, /*use_inactive=*/true, /*check_full_update=*/true,
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

}  // namespace my_ops::deploy::detail
