#include "deploy/runtime/src/weights.h"

#include <ATen/core/class_type.h>
#include <ATen/core/function.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <memory>
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
#include "deploy/runtime/src/verified_copy.h"
#include "deploy/runtime/src/verify.h"

namespace my_ops::deploy::detail {
namespace {

constexpr FileRole kWeightsRole{"weights file", kIntegrity, kIntegrity};
constexpr FileRole kWeightsManifestRole{"weights manifest", kIntegrity, kIntegrity};
// How torch names the custom class registered as class_<T>("Class") in TORCH_LIBRARY(ns).
constexpr char kCustomClassPrefix[] = "__torch__.torch.classes.";

std::string describe(const std::string& dtype, c10::IntArrayRef shape) {
  return dtype + " " + c10::str(shape);
}

}  // namespace

c10::ScalarType dtype_named(const std::string& name) {
  for (c10::ScalarType t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                            at::kShort, at::kChar, at::kByte, at::kBool}) {
    if (name == c10::toString(t)) return t;
  }
  // parse_weights_manifest admits only the dtypes above.
  fail(kIntegrity, "unknown dtype " + single_quoted(name));
}

// A private, writable mapping of the private copy of weights.bin: the model may write to a buffer
// it owns, which then becomes this process's page, never the file's.
class Mapping {
 public:
  Mapping(int fd, uint64_t size, const std::string& source) : size_(size) {
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      fail(kOther, "cannot map weights file " + source + ": " + std::strerror(errno));
    }
    data_ = static_cast<unsigned char*>(p);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  unsigned char* data() const { return data_; }

 private:
  unsigned char* data_ = nullptr;
  uint64_t size_;
};

namespace {

// The tensor at `t` in the mapping, which it does not own (see StagedWeights::mapping).
at::Tensor mapped_tensor(const Mapping& mapping, const WeightsTensor& t) {
  const auto options = at::TensorOptions().dtype(dtype_named(t.dtype));
  if (t.nbytes == 0) return at::empty(t.shape, options);
  return at::from_blob(mapping.data() + t.offset, t.shape, options);
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

// The manifest, its signature checked before a byte of it is parsed (the signature covers its
// exact bytes), naming the loaded package.
std::optional<WeightsManifest> read_manifest(const WeightsCheck& check, const std::string& path,
                                             const std::string& package_sha256, bool optional) {
  const std::optional<std::string> text =
      read_small(path, kWeightsManifestRole, kMaxWeightsManifestBytes);
  if (!text && optional) return std::nullopt;
  if (!text) fail(kIntegrity, "weights manifest not found: " + path);
  if (!check.public_key.empty()) check_signature(*text, "weights manifest", path, check.public_key);
  WeightsManifest m;
  try {
    m = parse_weights_manifest(*text);
  } catch (const ManifestError& e) {
    fail(kIntegrity, "weights manifest " + path + " is malformed: " + e.what());
  }
  if (!package_sha256.empty() && m.package.sha256 != package_sha256) {
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

// What the package holds as a constant, or takes as one where it was compiled without its
// weights.
struct HeldConstant {
  std::string dtype;
  std::vector<int64_t> shape;
  bool contiguous = true;
};

// Every tensor of the manifest against what the model holds there (name, dtype, shape), and
// every one the model holds against the manifest, before anything is mapped: what the model is
// given has its own sizes, whatever the manifest claims.
class Fit {
 public:
  Fit(torch::inductor::AOTIModelPackageLoader& model, const WeightsManifest& m,
      const ConstantSpecs* specs, const std::string& file)
      : file_(file) {
    check_constants(specs ? taken(model, *specs) : held(model), m);
    check_objects(model, m);
  }

  std::vector<ObjectPlan>& objects() { return objects_; }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    fail(kIntegrity, "weights file " + file_ + " does not fit the package: " + why);
  }

  void check_tensor(const std::string& what, const WeightsTensor& t, const std::string& dtype,
                    c10::IntArrayRef shape) const {
    if (dtype != t.dtype || !shape.equals(t.shape)) {
      refuse(what + " is " + describe(t.dtype, t.shape) + " in the weights file, " +
             describe(dtype, shape) + " in the package");
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

  // The constants of a package that holds its weights, as they are.
  static std::unordered_map<std::string, HeldConstant> held(
      torch::inductor::AOTIModelPackageLoader& model) {
    std::unordered_map<std::string, HeldConstant> out;
    for (const auto& [name, t] :
         model.get_runner()->extract_constants_map(/*use_inactive=*/false)) {
      out[name] = {c10::toString(t.scalar_type()), t.sizes().vec(), t.is_contiguous()};
    }
    return out;
  }

  // The constants a package compiled without its weights takes, by the names load_constants
  // takes (their names in the program), as its metadata describes them; the export lists them
  // all, so one it lacks is a corrupt package.
  std::unordered_map<std::string, HeldConstant> taken(
      torch::inductor::AOTIModelPackageLoader& model, const ConstantSpecs& specs) const {
    std::unordered_map<std::string, HeldConstant> out;
    for (const auto& [internal, name] : model.get_runner()->getConstantNamesToOriginalFQNs()) {
      auto it = specs.find(name);
      if (it == specs.end()) {
        fail(kPackageCorrupt, "the package takes a constant " + name +
                                  " that its metadata does not describe, so no weights file " +
                                  "can be checked against it");
      }
      out[name] = {it->second.dtype, it->second.shape, true};
    }
    return out;
  }

  // The same dtypes and shapes as the model's own, or the model would read bytes where its code
  // does not expect them.
  void check_constants(const std::unordered_map<std::string, HeldConstant>& current,
                       const WeightsManifest& m) {
    same_names(m.constants, current, "constant");
    for (const auto& c : m.constants) {
      const HeldConstant& have = current.at(c.name);
      check_tensor("constant " + c.name, c.tensor, have.dtype, have.shape);
      if (!have.contiguous) {
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
        const at::Tensor& have = plan.items[t.index].toTensor();
        check_tensor(where, t.tensor, c10::toString(have.scalar_type()), have.sizes());
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

}  // namespace

std::optional<CheckedWeights> check_weights(const WeightsCheck& check,
                                            const std::string& package_sha256, bool optional) {
  const std::string manifest_path =
      check.manifest.empty() ? dir_name(check.weights) + "/weights.json" : check.manifest;
  std::optional<WeightsManifest> m = read_manifest(check, manifest_path, package_sha256, optional);
  if (!m) return std::nullopt;
  return CheckedWeights{check.weights, manifest_path, std::move(*m)};
}

StagedWeights stage_weights(torch::inductor::AOTIModelPackageLoader& model,
                            const CheckedWeights& checked, const ConstantSpecs* specs,
                            WeightsBuffer buffer, bool on_cpu, const std::string& copy) {
  const WeightsManifest& m = checked.manifest;
  const std::string& file = checked.source;
  Fit fit(model, m, specs, file);
  // The exporter writes the tensors and the padding that aligns them, nothing else: a larger
  // file would only cost the copy's time and disk.
  uint64_t held = 0;
  const auto add = [&](const WeightsTensor& t) {
    held += (t.nbytes + kWeightsAlignment - 1) / kWeightsAlignment * kWeightsAlignment;
  };
  for (const auto& c : m.constants) add(c.tensor);
  for (const auto& o : m.objects) {
    for (const auto& t : o.tensors) add(t.tensor);
  }
  if (m.blob_size > held) {
    fail(kIntegrity, "weights file " + file + " does not fit the package: its manifest says " +
                         std::to_string(m.blob_size) + " bytes, its tensors take " +
                         std::to_string(held));
  }
  // Hashed while copied, and only the copy is used: a file changed after the check changes
  // nothing.
  const VerifiedCopy blob = copy_and_hash(file, copy, kWeightsRole);
  if (blob.size != m.blob_size) {
    fail(kIntegrity, "weights file " + file + " does not match weights manifest " +
                         checked.manifest_path + ": " + std::to_string(blob.size) +
                         " bytes, the manifest says " + std::to_string(m.blob_size));
  }
  if (blob.sha256 != m.blob.sha256) {
    fail(kIntegrity, "weights file " + file + " does not match weights manifest " +
                         checked.manifest_path + ": sha256 " + blob.sha256 + ", manifest has " +
                         m.blob.sha256);
  }

  StagedWeights staged;
  staged.source = file;
  staged.sha256 = m.blob.sha256;
  staged.mapping = std::make_shared<Mapping>(blob.fd.get(), m.blob_size, file);
  // The mapping keeps the copy's pages; its name would only hold the disk space until the model
  // is destroyed, across any number of updates.
  ::unlink(blob.copy.c_str());
  const Mapping& mapping = *staged.mapping;
  std::unordered_map<std::string, at::Tensor> constants;
  try {
    for (const auto& c : m.constants) constants[c.name] = mapped_tensor(mapping, c.tensor);
    for (size_t i = 0; i < m.objects.size(); ++i) {
      ObjectPlan& plan = fit.objects()[i];
      for (const WeightsStateTensor& t : m.objects[i].tensors) {
        c10::IValue& item = plan.items[t.index];
        // A CPU model's objects keep their state on the mapping; a CUDA model's are copied (to
        // its device), as it keeps no mapping.
        const at::Tensor mapped = mapped_tensor(mapping, t.tensor);
        item = on_cpu ? mapped
                      : mapped.to(item.toTensor().device(), mapped.scalar_type(),
                                  /*non_blocking=*/false, /*copy=*/true);
      }
      staged.objects.push_back({plan.name, plan.object,
                                c10::ivalue::Tuple::create(std::move(plan.items)), plan.old_state});
    }
  } catch (const c10::Error& e) {
    fail(kOther, "cannot hold the tensors of weights file " + file + ": " + error_text(e));
  }
  try {
    // A CPU model computes on the mapped tensors themselves; a CUDA model's are copied to its
    // device on the way, and it needs the mapping no longer.
    model.load_constants(constants, /*use_inactive=*/buffer == WeightsBuffer::kInactive,
                         /*check_full_update=*/true, /*user_managed=*/on_cpu,
                         /*allow_h2d_copy=*/!on_cpu);
  } catch (const std::exception& e) {
    fail(kOther, "cannot load weights file " + file + ": " + error_text(e));
  }
  if (!on_cpu) staged.mapping.reset();
  return staged;
}

void activate_weights(torch::inductor::AOTIModelPackageLoader& model, const StagedWeights& staged,
                      WeightsBuffer buffer) {
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
  if (buffer == WeightsBuffer::kInactive) model.get_runner()->swap_constant_buffer();
}

void release_previous_weights(torch::inductor::AOTIModelPackageLoader& model) {
  model.get_runner()->free_inactive_constant_buffer();
}

}  // namespace my_ops::deploy::detail
