#include "my_ops/model.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/input_signature.h"
#include "deploy/runtime/src/manifest.h"
#include "deploy/runtime/src/model_impl.h"
#include "deploy/runtime/src/op_check.h"
#include "deploy/runtime/src/package_contract.h"
#include "deploy/runtime/src/private_dir.h"
#include "deploy/runtime/src/runner.h"
#include "deploy/runtime/src/tensor_io.h"
#include "deploy/runtime/src/verified_copy.h"
#include "deploy/runtime/src/verify.h"
#include "deploy/runtime/src/weights.h"
#include "deploy/runtime/src/weights_manifest.h"

namespace my_ops::deploy {
namespace {

using detail::error_text;
using detail::translated;

// libmy_ops.so in the folder of the file that holds this code: the SDK's lib/, or the folder of
// a program linked with it statically (the loader's bundle).
std::string default_op_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&default_op_library), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "libmy_ops.so";
  }
  const std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/libmy_ops.so";
}

[[noreturn]] void fail_usage(std::string message) { throw Error(kUsage, std::move(message)); }

constexpr int kMaxIntraOpThreads = 256;

// A key that is set must say something: an empty one is a caller's unset variable, and reading it
// as "no key" would skip the signature check the caller asked for.
const std::optional<std::string>& set_key(const std::optional<std::string>& key,
                                          const char* options) {
  if (key && key->empty()) {
    fail_usage(std::string(options) + "::public_key is empty; leave it unset for no key");
  }
  return key;
}

std::vector<InputSignature> public_signature(const std::vector<detail::InputSpec>& specs) {
  std::vector<InputSignature> out;
  for (const auto& spec : specs) {
    InputSignature signature{spec.dtype, {}};
    for (const auto& dim : spec.dims) {
      signature.dims.push_back(
          DimRange{dim.lo, dim.hi < 0 ? std::nullopt : std::optional<int64_t>(dim.hi)});
    }
    out.push_back(std::move(signature));
  }
  return out;
}

}  // namespace

CheckedPackage CheckedPackage::check(const OpenOptions& options) {
  return translated([&] {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    OpenOptions& opt = impl->options;
    if (opt.package.empty()) fail_usage("no package given (OpenOptions::package)");
    if (opt.runners < 1) {
      fail_usage("OpenOptions::runners must be at least 1, got " + std::to_string(opt.runners));
    }
    if (opt.intra_op_threads < 0 || opt.intra_op_threads > kMaxIntraOpThreads) {
      fail_usage("OpenOptions::intra_op_threads must be 0 (the process's setting) to " +
                 std::to_string(kMaxIntraOpThreads) + ", got " +
                 std::to_string(opt.intra_op_threads));
    }
    impl->public_key = set_key(opt.public_key, "OpenOptions").value_or("");
    if (opt.op_libraries.empty()) opt.op_libraries.push_back(default_op_library());

    impl->dir = detail::PrivateDir::create();
    const std::string& dir = impl->dir->path();
    // Each file is opened once, hashed while it is copied into the private folder, and only the
    // copies are used from here on. Cheap checks come first, so mistakes cost no model load, and
    // everything is verified before any of its code can run.
    impl->package = detail::copy_and_hash(opt.package, dir + "/model.pt2", detail::kPackageRole);
    detail::check_package(impl->package, opt.max_unpacked_bytes);
    auto& libraries = impl->libraries;
    for (size_t i = 0; i < opt.op_libraries.size(); ++i) {
      libraries.push_back(detail::copy_and_hash(opt.op_libraries[i],
                                                dir + "/op_library_" + std::to_string(i) + ".so",
                                                detail::kOpLibraryRole));
      // A second copy would register its ops again, which LibTorch answers with an abort.
      for (size_t j = 0; j < i; ++j) {
        if (libraries[j].sha256 == libraries[i].sha256) {
          fail_usage("op library " + opt.op_libraries[i] + " is the same library as " +
                     opt.op_libraries[j] + " (sha256 " + libraries[i].sha256 +
                     "): pass each library once");
        }
      }
    }
    if (opt.verify) {
      impl->manifest =
          detail::verify_manifest({opt.manifest, impl->public_key}, impl->package, impl->libraries);
    }
    // The weights file named, or the export's beside the package where there is one.
    const bool named = !opt.weights.weights.empty();
    const std::string weights =
        named ? opt.weights.weights : detail::dir_name(opt.package) + "/weights.bin";
    const std::string key =
        set_key(opt.weights.public_key, "OpenOptions::weights").value_or(impl->public_key);
    // Unverified, a package is taken as it is: so are the weights beside it, as far as the
    // package they name goes (they must still fit it, and match their manifest).
    impl->weights = detail::check_weights({weights, named ? opt.weights.manifest : "", key},
                                          opt.verify ? impl->package.sha256 : "",
                                          /*optional=*/!named);
    return CheckedPackage(std::move(impl));
  });
}

CheckedPackage::CheckedPackage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckedPackage::CheckedPackage(CheckedPackage&&) noexcept = default;
CheckedPackage& CheckedPackage::operator=(CheckedPackage&&) noexcept = default;
CheckedPackage::~CheckedPackage() = default;

Model Model::open(const OpenOptions& options) { return load(CheckedPackage::check(options)); }

Model Model::load(CheckedPackage&& checked) {
  return translated([&] {
    if (!checked.impl_) throw Error(kUsage, "Model::load: the package was moved from");
    auto impl = std::make_unique<Impl>();
    impl->package = std::move(checked.impl_);
    const CheckedPackage::Impl& package = *impl->package;
    const detail::Registrations none;
    const detail::Registrations& needed = package.manifest ? package.manifest->registrations : none;

    if (package.options.intra_op_threads > 0) at::set_num_threads(package.options.intra_op_threads);
    if (package.manifest && package.manifest->device == "cuda") detail::load_cuda_backend();
    detail::load_op_libraries(package.libraries);
    detail::check_registrations(needed, package.options.op_libraries);
    impl->runner = detail::load_package(package.package, package.options.runners,
                                        package.options.device_index);

    const auto aoti_metadata = impl->runner->get_metadata();
    Metadata& md = impl->metadata;
    md.package_sha256 = package.package.sha256;
    md.device = "cpu";
    if (auto it = aoti_metadata.find("AOTI_DEVICE_KEY"); it != aoti_metadata.end()) {
      md.device = it->second;
      if (it->second != "cpu") {
        try {
          impl->device = c10::Device(it->second);
        } catch (const std::exception&) {
          throw Error(kPackageCorrupt, "package " + package.package.source +
                                           " names an unknown device " + it->second);
        }
      }
    }
    // A package compiled without its weights lists the constants it takes; it runs on a weights
    // file (its export's, beside it, unless another is named), mapped into the buffer runs read.
    // A package with its weights takes a named file as an update.
    if (auto it = aoti_metadata.find(detail::contract::kWeightsMetadataKey);
        it != aoti_metadata.end()) {
      try {
        impl->constant_specs = detail::parse_constant_specs(it->second);
      } catch (const detail::ManifestError& e) {
        throw Error(kPackageCorrupt,
                    "package " + package.package.source +
                        " has a malformed list of the constants it takes: " + e.what());
      }
    }
    if (auto& weights = impl->package->weights) {
      const auto buffer =
          impl->constant_specs ? detail::WeightsBuffer::kActive : detail::WeightsBuffer::kInactive;
      impl->weights = detail::stage_weights(
          *impl->runner, *weights, impl->constant_specs ? &*impl->constant_specs : nullptr, buffer,
          !impl->device.has_value(), impl->package->dir->path() + "/weights.bin");
      weights.reset();
      detail::activate_weights(*impl->runner, impl->weights, buffer);
      if (buffer == detail::WeightsBuffer::kInactive) {
        detail::release_previous_weights(*impl->runner);
      }
      impl->weights_sha256 = impl->weights.sha256;
    } else if (impl->constant_specs) {
      throw Error(kIntegrity,
                  "package " + package.package.source +
                      " holds no weights, and there is no weights.json beside it: its export "
                      "writes weights.bin and weights.json with model.pt2, to be kept together "
                      "(or name a weights file for it)");
    }
    // A package with state: the buffers its runs update, and a decoder's cache and vocabulary.
    const auto entry = [&](const char* key) -> std::optional<std::string> {
      auto it = aoti_metadata.find(key);
      return it == aoti_metadata.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    try {
      if (auto text = entry(detail::contract::kStateMetadataKey)) {
        impl->state_specs = detail::parse_constant_specs(*text);
      }
      if (auto text = entry(detail::contract::kDecoderMetadataKey)) {
        impl->decoder = detail::parse_decoder_spec(*text);
      }
    } catch (const detail::ManifestError& e) {
      throw Error(kPackageCorrupt, "package " + package.package.source +
                                       " has a malformed description of its state: " + e.what());
    }
    if (impl->decoder && !impl->state_specs) {
      throw Error(kPackageCorrupt,
                  "package " + package.package.source + " is a decoder without a state");
    }
    if (impl->state_specs) {
      for (const auto& [name, spec] : *impl->state_specs) {
        // The state is some of the package's constants: a session's copy replaces them.
        if (impl->constant_specs) {
          const auto it = impl->constant_specs->find(name);
          if (it == impl->constant_specs->end() || it->second.dtype != spec.dtype ||
              it->second.shape != spec.shape) {
            throw Error(kPackageCorrupt, "package " + package.package.source + "'s state " + name +
                                             " is not one of its constants");
          }
        }
        md.state.push_back(name);
      }
      std::sort(md.state.begin(), md.state.end());
      impl->own_state = detail::make_state(*impl->state_specs, impl->device);
    }
    if (impl->decoder)
      md.decoder = DecoderInfo{impl->decoder->cache_length, impl->decoder->vocab_size};
    // Without a signature this runtime understands, AOTI's own runtime checks still apply.
    if (auto it = aoti_metadata.find(detail::kInputSignatureKey); it != aoti_metadata.end()) {
      impl->signature = detail::parse_input_signature(it->second);
      if (impl->signature) md.inputs = public_signature(*impl->signature);
    }
    if (package.manifest) {
      const detail::Manifest& m = *package.manifest;
      md.torch_version = m.torch_version;
      md.target = m.target;
      md.isa = m.isa;
      md.cpu_features = m.cpu_features;
      for (const auto& op : m.registrations.ops) md.ops.push_back(op.name);
      for (const auto& cls : m.registrations.classes) md.classes.push_back(cls.name);
    }
    return Model(std::move(impl));
  });
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

std::vector<at::Tensor> Model::prepare(const std::vector<at::Tensor>& inputs) const {
  return translated([&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) {
        throw Error(kInputMismatch, "input " + std::to_string(i) + " is an undefined tensor");
      }
    }
    // Before contiguous(): an input of absurd declared size (zero strides over a tiny storage)
    // is refused here instead of being materialised.
    if (impl_->signature) detail::check_inputs(inputs, *impl_->signature);
    std::vector<at::Tensor> prepared;
    prepared.reserve(inputs.size());
    for (const auto& t : inputs) prepared.push_back(t.contiguous());
    if (impl_->device) {
      try {
        for (auto& t : prepared) t = t.to(*impl_->device);
      } catch (const std::exception& e) {
        throw Error(kOther, "cannot move inputs to the package's device " + impl_->metadata.device +
                                ": " + detail::error_text(e));
      }
    }
    return prepared;
  });
}

namespace detail {

std::unique_ptr<SessionState> make_state(const ConstantSpecs& specs,
                                         const std::optional<c10::Device>& device) {
  static std::atomic<uint64_t> last_id{0};
  auto state = std::make_unique<SessionState>();
  state->id = ++last_id;
  for (const auto& [name, spec] : specs) {
    const at::TensorOptions options = at::TensorOptions()
                                          .dtype(dtype_named(spec.dtype))
                                          .device(device.value_or(c10::Device(c10::kCPU)));
    at::Tensor memory = at::zeros(spec.shape, options);
    state->views.emplace(name, at::from_blob(memory.data_ptr(), spec.shape, options));
    state->memory.push_back(std::move(memory));
  }
  return state;
}

std::vector<at::Tensor> run_on_state(const Model::Impl& impl, SessionState& state,
                                     const std::vector<at::Tensor>& prepared) {
  {
    std::lock_guard pass(impl.turnstile);
  }
  std::unique_lock alone(impl.runs);
  at::internal::lazy_init_num_threads();
  return translated([&] {
    if (impl.bound_state != state.id) {
      try {
        impl.runner->load_constants(state.views, /*use_inactive=*/false,
                                    /*check_full_update=*/false, /*user_managed=*/true);
      } catch (const std::exception& e) {
        throw Error(kOther, "cannot give the package its state: " + error_text(e));
      }
      impl.bound_state = state.id;
    }
    return run_once(*impl.runner, prepared);
  });
}

}  // namespace detail

std::vector<at::Tensor> Model::run(const std::vector<at::Tensor>& inputs) const {
  const std::vector<at::Tensor> prepared = prepare(inputs);
  if (impl_->own_state) return detail::run_on_state(*impl_, *impl_->own_state, prepared);
  {
    std::lock_guard pass(impl_->turnstile);
  }
  std::shared_lock running(impl_->runs);
  // at::set_num_threads sets OpenMP's thread count for the thread that calls it; every other
  // thread starts from $OMP_NUM_THREADS until LibTorch initialises it at its first ATen parallel
  // op, which the package's own OpenMP loops do not count as. So each thread that runs the model
  // takes the process's setting before the first of them (once; it costs nothing after that).
  at::internal::lazy_init_num_threads();
  return translated([&] { return detail::run_once(*impl_->runner, prepared); });
}

void Model::update_weights(const WeightsOptions& options) {
  translated([&] {
    if (options.weights.empty()) fail_usage("WeightsOptions::weights is empty: no weights file");
    const std::string key =
        set_key(options.public_key, "WeightsOptions").value_or(impl_->package->public_key);
    Impl& impl = *impl_;
    std::lock_guard one_update(impl.updating);
    const std::string copy =
        impl.package->dir->path() + "/weights_" + std::to_string(++impl.updates) + ".bin";
    detail::StagedWeights staged =
        detail::stage_weights(*impl.runner,
                              *detail::check_weights({options.weights, options.manifest, key},
                                                     impl.package->package.sha256),
                              impl.constant_specs ? &*impl.constant_specs : nullptr,
                              detail::WeightsBuffer::kInactive, !impl.device.has_value(), copy);
    {
      std::lock_guard hold_new_runs(impl.turnstile);
      std::unique_lock no_runs(impl.runs);
      detail::activate_weights(*impl.runner, staged, detail::WeightsBuffer::kInactive);
      impl.weights_sha256 = staged.sha256;
      // The new buffer holds the weights file's state: each run hands the package its own again.
      impl.bound_state = 0;
    }
    // No run reads the previous buffer, or the previous mapping, once the swap is done.
    detail::release_previous_weights(*impl.runner);
    impl.weights = std::move(staged);
  });
}

std::string Model::weights_sha256() const {
  std::shared_lock reading(impl_->runs);
  return impl_->weights_sha256;
}

const Metadata& Model::metadata() const { return impl_->metadata; }

int Model::intra_op_threads() const { return at::get_num_threads(); }

}  // namespace my_ops::deploy
