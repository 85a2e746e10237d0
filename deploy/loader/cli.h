#pragma once

// The loader's command line: options, their limits, and what paths mean.

#include <cstdint>
#include <string>
#include <vector>

namespace my_ops::loader {

// Threads and runners beyond these cost memory and time for nothing on any machine this runs
// on, and a typo such as 100000 would otherwise end in an abort when thread creation fails.
constexpr long kMaxThreads = 256;
constexpr long kMaxRunners = 256;
constexpr long kMaxRuns = 1000000;

struct Options {
  std::vector<std::string> ops;
  std::string package;
  std::string input;
  std::string output;
  std::string expect;
  std::string manifest;
  std::string public_key;
  std::string weights;           // weights.bin to run the package with
  std::string weights_manifest;  // "": weights.json beside it
  bool verify = true;
  bool exact = false;
  double atol = 1e-4;
  double rtol = 1e-4;
  long bench = 0;
  long runs = 0;
  long threads = 1;
  long runners = 0;           // 0: as many as threads
  long intra_op_threads = 0;  // 0: LibTorch's default ($OMP_NUM_THREADS, else one per core)
  // --generate N: a decoder package's token loop (my_ops/session.h) instead of one run.
  long generate = 0;
  std::string prompt_ids;  // torch.save file of a 1-D integer tensor
  double temperature = 0.0;
  long top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int64_t stop_token = -1;  // -1: none
  uint64_t max_unpacked_mib = 32768;
  uint64_t max_input_mib = 1024;
  bool help = false;
};

// `loader --help`: the command line, then every exit status with what it means.
std::string help_text();

// Fails with kUsage, one line naming the flag.
Options parse_args(int argc, const char* const* argv);

// Makes relative paths in `o` relative to `base` ($BUILD_WORKING_DIRECTORY under `bazel run`,
// which starts the binary inside its runfiles tree); with an empty base, leaves them alone.
// A bare `--ops libfoo.so` becomes "./libfoo.so": a file, never a library search.
void resolve_paths(Options& o, const std::string& base);

// libmy_ops.so beside the executable (the bundle's layout), else in its Bazel runfiles
// (`bazel run //deploy:loader`); the first that exists, or the bundle path for the error.
std::string default_op_library(const std::string& exe_path, const std::string& runfiles_dir);

}  // namespace my_ops::loader
