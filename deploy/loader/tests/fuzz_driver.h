#pragma once

// What the fuzz targets' own drivers share. The toolchain here is GCC, without libFuzzer, so each
// fuzz target has a main() of its own that mutates its seeds for a bounded time or count.

#include <cstdlib>
#include <string>

namespace my_ops::loader::fuzzing {

// N of the argument `name`=N (--seconds=60, say), or `fallback` when there is none.
inline long flag(int argc, char** argv, const std::string& name, long fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(name + "=", 0) == 0) return std::strtol(a.c_str() + name.size() + 1, nullptr, 10);
  }
  return fallback;
}

}  // namespace my_ops::loader::fuzzing
