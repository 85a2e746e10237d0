#pragma once

// What the fuzz targets' own drivers share. The toolchain here is GCC, without libFuzzer, so each
// fuzz target has a main() of its own that mutates its seeds for a bounded time or count.

#include <chrono>
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

// Calls `one(i)` for i = 0, 1, ... until it has made `max_inputs` calls or `seconds` have
// passed; returns how many calls it made.
template <class One>
long run_inputs(long seconds, long max_inputs, One&& one) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  long inputs = 0;
  while (inputs < max_inputs && std::chrono::steady_clock::now() < end) one(inputs++);
  return inputs;
}

}  // namespace my_ops::loader::fuzzing
