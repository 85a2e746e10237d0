# Cross-compiling for linux-aarch64 with Debian 12's cross GCC
# (apt-get install g++-12-aarch64-linux-gnu; tools/bazel installs it as root).
#   cmake -S example -B build --toolchain <this file> \
#     -DMY_OPS_AARCH64_SYSROOT=<arm64 sysroot> -DMY_OPS_LIBTORCH_DIR=<aarch64 torch dir>
# Without MY_OPS_AARCH64_SYSROOT the compiler's own target tree is used:
# /usr/aarch64-linux-gnu (libc6-dev-arm64-cross, glibc 2.36).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(_triple aarch64-linux-gnu)
set(CMAKE_C_COMPILER   /usr/bin/${_triple}-gcc-12)
set(CMAKE_CXX_COMPILER /usr/bin/${_triple}-g++-12)
set(CMAKE_AR     /usr/bin/${_triple}-ar     CACHE FILEPATH "")
set(CMAKE_RANLIB /usr/bin/${_triple}-ranlib CACHE FILEPATH "")
set(CMAKE_STRIP  /usr/bin/${_triple}-strip  CACHE FILEPATH "")

# try_compile projects get these too (toolchain files are re-read there, but
# -D cache values are not, unless forwarded).
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MY_OPS_AARCH64_SYSROOT)
if(NOT MY_OPS_AARCH64_SYSROOT AND DEFINED ENV{MY_OPS_AARCH64_SYSROOT})
  set(MY_OPS_AARCH64_SYSROOT "$ENV{MY_OPS_AARCH64_SYSROOT}")
endif()

if(MY_OPS_AARCH64_SYSROOT)
  # A Debian arm64 sysroot (e.g. the repo's @debian_bookworm_arm64_sysroot).
  # Debian's cross GCC keeps its own libstdc++ headers and crt/lib dirs under
  # --sysroot, so point it at the sysroot's (as tools/cc/cc_toolchain_config.bzl does).
  set(CMAKE_SYSROOT "${MY_OPS_AARCH64_SYSROOT}")
  set(_s "${MY_OPS_AARCH64_SYSROOT}")
  set(CMAKE_CXX_FLAGS_INIT
    "-nostdinc++ -isystem ${_s}/usr/include/c++/12 -isystem ${_s}/usr/include/${_triple}/c++/12 -isystem ${_s}/usr/include/c++/12/backward")
  set(_link "-B${_s}/usr/lib/gcc/${_triple}/12/ -B${_s}/usr/lib/${_triple}/ -L${_s}/usr/lib/gcc/${_triple}/12 -L${_s}/usr/lib/${_triple} -L${_s}/lib/${_triple}")
  set(CMAKE_EXE_LINKER_FLAGS_INIT "${_link}")
  set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_link}")
  set(CMAKE_FIND_ROOT_PATH "${_s}")
else()
  set(CMAKE_FIND_ROOT_PATH /usr/${_triple})
endif()

# Programs (code generators) run on the build machine; libraries, headers and
# packages come from the target tree only. my_opsConfig.cmake searches its
# explicit LibTorch hints with NO_CMAKE_FIND_ROOT_PATH, so an aarch64 LibTorch
# outside the sysroot is still found.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Binaries built here run under qemu for tests (try_run, add_test).
find_program(_qemu qemu-aarch64-static)
if(_qemu)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${_qemu};-cpu;neoverse-n1")
endif()
