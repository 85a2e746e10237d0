// Loads the shared library built from a cuda_library and checks its symbols.
// Passes on a machine without a GPU (the library must still load there); on
// a machine with one, it also runs the kernel and checks the result.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

// Linking libtorch loads the CUDA libraries the smoke library needs.
#include <ATen/ATen.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIBRARY.so\n", argv[0]);
    return 2;
  }
  // Keep libtorch linked, so its CUDA dependencies are loaded before dlopen.
  (void)at::ones({1});
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "FAILED: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  auto device_count = reinterpret_cast<int (*)()>(dlsym(lib, "cuda_smoke_device_count"));
  auto add_one_errors =
      reinterpret_cast<int64_t (*)(int64_t)>(dlsym(lib, "cuda_smoke_add_one_errors"));
  if (device_count == nullptr || add_one_errors == nullptr) {
    std::fprintf(stderr, "FAILED: smoke symbols missing from %s\n", argv[1]);
    return 1;
  }
  const int devices = device_count();
  if (devices == 0) {
    std::printf("library loads and exports its symbols; no GPU, so the kernel did not run\n");
    return 0;
  }
  const int64_t errors = add_one_errors(1000003);
  std::printf("%d GPU(s); kernel result errors: %lld\n", devices, static_cast<long long>(errors));
  return errors == 0 ? 0 : 1;
}
