#include "deploy/runtime/src/runner.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/sysmacros.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/tensor_io.h"
#include "my_ops/process.h"

namespace my_ops::deploy::detail {
namespace {

// What went wrong inside LibTorch: AOTI's runtime prints the reason on stderr ("Error:
// input_handles[0]: ...") and throws an exception that only says which call failed.
std::string reason(const std::exception& e) {
  std::string printed = Stage::take_first_line();
  if (printed.rfind("Error: ", 0) == 0) printed.erase(0, 7);
  return printed.empty() ? error_text(e) : printed;
}

// Whether the file with this device and inode is already mapped into the process, i.e. the
// loader itself links it (libc10.so, say). Loading a copy would run its static initialisers a
// second time, and LibTorch's registries end the process on a duplicate key.
bool mapped_in_process(uint64_t device, uint64_t inode) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset major:minor inode [path]
    std::istringstream fields(line);
    std::string address, perms, offset, dev;
    uint64_t ino = 0;
    if (!(fields >> address >> perms >> offset >> dev >> ino) || ino != inode) continue;
    unsigned major_id = 0, minor_id = 0;
    if (std::sscanf(dev.c_str(), "%x:%x", &major_id, &minor_id) == 2 &&
        makedev(major_id, minor_id) == device) {
      return true;
    }
  }
  return false;
}

}  // namespace

void load_op_libraries(const std::vector<VerifiedCopy>& libraries) {
  // The libraries this process has loaded, by sha256: a second model that needs one uses it as
  // it is, where loading its own copy would register every op a second time.
  static std::mutex mutex;
  static std::set<std::string> loaded;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& lib : libraries) {
    if (loaded.count(lib.sha256) != 0) continue;
    if (mapped_in_process(lib.source_device, lib.source_inode)) continue;
    // A LibTorch error in the library's static initialisers ends the process from inside
    // dlopen(); the stage turns that into this library's one line and exit 3.
    Stage stage(kOpsLibrary, "cannot load op library " + lib.source);
    // RTLD_GLOBAL: a package exported with C shims calls aoti_torch_<device>_<op> functions
    // that its .so leaves undefined, and the dynamic linker looks for them in the global scope
    // when AOTI loads it (check_registrations makes sure they are there first). The handle is
    // never closed: registrations must outlive every run.
    // Through a descriptor of its own that is never closed: the library stays loaded for the
    // life of the process, and its name there (/proc/self/fd/N) must keep naming it, for a
    // sanitizer's symbolizer or a debugger that opens it by that name, after the copy's own
    // descriptor is closed and its number reused.
    const int kept = ::fcntl(lib.fd.get(), F_DUPFD_CLOEXEC, 0);
    if (kept < 0) fail(kOther, "cannot keep op library " + lib.source + " open");
    if (::dlopen(("/proc/self/fd/" + std::to_string(kept)).c_str(), RTLD_NOW | RTLD_GLOBAL) ==
        nullptr) {
      const char* err = ::dlerror();
      std::string why = err ? err : "?";
      fail(kOpsLibrary,
           "cannot load op library " + lib.source + ": " + why.substr(0, why.find('\n')));
    }
    loaded.insert(lib.sha256);
  }
  // An op library with CPU kernel tiers (libmy_ops.so) refuses a MY_OPS_CPU_ISA it cannot
  // honour, an unknown tier or one this CPU lacks: the environment's mistake, a usage error,
  // on every open, before a run.
  using IsaError = const char* (*)();
  if (auto isa_error = reinterpret_cast<IsaError>(::dlsym(RTLD_DEFAULT, "my_ops_cpu_isa_error"))) {
    if (const char* why = isa_error()) fail(kUsage, why);
  }
}

void load_cuda_backend() {
  // The process links libtorch_cpu.so and c10 only, so that a CPU run maps nothing of CUDA;
  // libtorch_cuda.so (the CUDA model runner, ATen's CUDA kernels) comes from the folder of the
  // libtorch_cpu.so this process runs on, by the path the dynamic loader found that one at: a
  // symbolic link in it is kept, so libtorch_cuda.so's $ORIGIN-relative RPATH finds the CUDA
  // libraries in the same tree (pip's layout).
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&aoti_torch_dtype_float32), &info) == 0 ||
      info.dli_fname == nullptr) {
    fail(kNoCudaBackend, "the package runs on CUDA, but the folder of libtorch_cpu.so is unknown");
  }
  const std::string cpu_library = info.dli_fname;
  const std::string backend =
      cpu_library.substr(0, cpu_library.rfind('/') + 1) + "libtorch_cuda.so";
  // RTLD_GLOBAL: the model .so that AOTI loads later resolves CUDA symbols through it.
  if (::dlopen(backend.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* err = ::dlerror();
    const std::string why = err ? err : "?";
    // dlopen()'s text names the file.
    fail(kNoCudaBackend,
         "the package runs on CUDA, but this LibTorch's CUDA backend cannot be "
         "loaded (a CPU-only LibTorch runs CPU packages only): " +
             why.substr(0, why.find('\n')));
  }
}

std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load_package(const VerifiedCopy& package,
                                                                      long runners,
                                                                      int device_index) {
  Stage stage(kPackageCorrupt, "cannot load package " + package.source);
  try {
    // AOTIModelPackageLoader extracts the package into a new folder under $TMPDIR: here, the
    // private folder that holds the copy, which nobody else can write. The variable is the
    // process's, so loads take turns and put it back.
    static std::mutex tmpdir_mutex;
    const std::lock_guard<std::mutex> lock(tmpdir_mutex);
    const char* previous = std::getenv("TMPDIR");
    const std::optional<std::string> saved =
        previous ? std::optional<std::string>(previous) : std::nullopt;
    const std::string folder = package.copy.substr(0, package.copy.rfind('/'));
    ::setenv("TMPDIR", folder.c_str(), 1);
    // Enables the shape/dtype/stride checks compiled into every AOTI model; without them a bad
    // input is undefined behaviour inside generated code. (Left as it is when already set.)
    ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
    struct Restore {
      const std::optional<std::string>& saved;
      ~Restore() { saved ? ::setenv("TMPDIR", saved->c_str(), 1) : ::unsetenv("TMPDIR"); }
    } restore{saved};
    return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        package.copy, "model", /*run_single_threaded=*/false, static_cast<size_t>(runners),
        static_cast<c10::DeviceIndex>(device_index));
  } catch (const std::exception& e) {
    const std::string msg = reason(e);
    // dlopen()'s text for a C shim no loaded library defines (only reachable with --no-verify:
    // otherwise check_registrations found it missing first).
    const std::string undefined_shim = "undefined symbol: aoti_torch_";
    const size_t shim = msg.find(undefined_shim);
    const bool ops = msg.find("Couldn't resolve") != std::string::npos ||
                     msg.find("Could not find schema") != std::string::npos ||
                     msg.find("Unknown builtin op") != std::string::npos ||
                     shim != std::string::npos;
    if (!ops) fail(kPackageCorrupt, "cannot load package " + package.source + ": " + msg);
    std::string what;
    if (shim != std::string::npos) {
      const size_t name = shim + undefined_shim.size() - std::string("aoti_torch_").size();
      what = "C function " + msg.substr(name, msg.find_first_of(" \t\n", name) - name);
    } else {
      // torch's "Couldn't resolve type" text puts the type name after the '?'.
      auto q = msg.rfind('?');
      what = q != std::string::npos && q + 1 < msg.size() ? msg.substr(q + 1) : msg;
    }
    fail(kOpsLibrary, "the op libraries do not provide " + what + ", which the package needs");
  }
}

std::vector<at::Tensor> run_once(torch::inductor::AOTIModelPackageLoader& loader,
                                 const std::vector<at::Tensor>& inputs) {
  try {
    return loader.run(inputs);
  } catch (const std::exception& e) {
    const std::string msg = reason(e);
    // AOTI's runtime input checks (AOTI_RUNTIME_CHECK_INPUTS) report through the same exception
    // type as kernel failures; their text is the only tell.
    const bool input_check = msg.find("input_handles") != std::string::npos ||
                             msg.find("unmatched") != std::string::npos;
    fail(input_check ? kInputMismatch : kOther, "model run failed: " + msg);
  }
}

}  // namespace my_ops::deploy::detail
