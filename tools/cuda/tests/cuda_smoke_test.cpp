// Loads the shared library built from a cuda_library and checks its symbols;
// without --load-only it then runs the kernel on a GPU and checks the result.
// The kernel run is a test only where there is a GPU (requires_cuda_device());
// finding none at run time is a failure, since a pass would claim a kernel ran
// that never did.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// Linking libtorch loads the CUDA libraries the smoke library needs.
#include <ATen/ATen.h>

int main(int argc, char** argv) {
  const bool load_only = argc == 3 && std::string(argv[1]) == "--load-only";
  if (argc != 2 && !load_only) {
    std::fprintf(stderr, "usage: %s [--load-only] LIBRARY.so\n", argv[0]);
    return 2;
  }
  const char* path = argv[argc - 1];
  // Keep libtorch linked, so its CUDA dependencies are loaded before dlopen.
  (void)at::ones({1});
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "FAILED: dlopen(%s): %s\n", path, dlerror());
    return 1;
  }
  auto device_count = reinterpret_cast<int (*)()>(dlsym(lib, "cuda_smoke_device_count"));
  auto add_one_errors =
      reinterpret_cast<int64_t (*)(int64_t)>(dlsym(lib, "cuda_smoke_add_one_errors"));
  if (device_count == nullptr || add_one_errors == nullptr) {
    std::fprintf(stderr, "FAILED: smoke symbols missing from %s\n", path);
    return 1;
  }
  if (load_only) {
    std::printf("library loads and exports its symbols (no kernel run asked for)\n");
    return 0;
  }
  const int devices = device_count();
  if (devices <= 0) {
    std::fprintf(stderr,
                 "FAILED: no CUDA device visible to this test, so the kernel cannot run. It is "
                 "built only when --//tools/cuda:cuda_device is true (by default: a GPU was found "
                 "on this machine); check the flag, the driver (nvidia-smi) and that the test can "
                 "open /dev/nvidia*.\n");
    return 1;
  }
  const int64_t errors = add_one_errors(1000003);
  std::printf("%d GPU(s); kernel result errors: %lld\n", devices, static_cast<long long>(errors));
  return errors == 0 ? 0 : 1;
}
