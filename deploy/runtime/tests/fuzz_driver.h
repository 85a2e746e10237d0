#pragma once

// What the fuzz targets' own drivers share. The toolchain here is GCC, without libFuzzer, so each
// fuzz target has a main() of its own that mutates its seeds for a bounded time or count.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace my_ops::deploy::detail::fuzzing {

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

// Whether a run that asked for a count of inputs (--inputs) got them all: one that its time
// ceiling (--seconds) cut short read other inputs than the fixed set it stands for. Says so on
// stderr when it did not.
inline bool read_every_input_asked(int argc, char** argv, const char* name, long inputs,
                                   long max_inputs, long seconds) {
  const bool asked = flag(argc, argv, "--inputs", -1) != -1;
  if (!asked || inputs >= max_inputs) return true;
  std::fprintf(stderr, "%s: %ld of the %ld inputs asked for (--inputs) in the %ld s allowed\n",
               name, inputs, max_inputs, seconds);
  return false;
}

// What reading one input may cost: a parser of outside data is linear in its input, so its time
// per byte is bounded whatever the bytes; `floor_seconds` absorbs the fixed cost and a scheduler's
// hiccup on a small input.
struct CostBound {
  double seconds_per_byte;
  double floor_seconds;

  // The most reading an input of `bytes` bytes may take.
  double allowed(size_t bytes) const {
    return floor_seconds + seconds_per_byte * static_cast<double>(bytes);
  }
};

// Runs `one()`, which reads an input of `bytes` bytes, and returns how long it took at its
// fastest, after as many as three tries: one slow run can be the machine, three are the input.
// It stops trying once a run is within `bound`, or is so far over it (4 times) that no machine's
// hiccup explains it.
template <class One>
double fastest_within(const CostBound& bound, size_t bytes, One&& one) {
  const double allowed = bound.allowed(bytes);
  double fastest = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto t0 = std::chrono::steady_clock::now();
    one();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fastest = attempt == 0 ? took : std::min(fastest, took);
    if (fastest <= allowed || fastest > 4 * allowed) break;
  }
  return fastest;
}

// Writes `input` to $TEST_UNDECLARED_OUTPUTS_DIR/`name` (Bazel keeps it in the test's outputs),
// so that a failing input can be replayed; returns where, or "" without that folder.
inline std::string save_input(const std::string& name, const std::string& input) {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (dir == nullptr) return "";
  const std::string path = std::string(dir) + "/" + name;
  std::ofstream(path, std::ios::binary) << input;
  return path;
}

}  // namespace my_ops::deploy::detail::fuzzing
