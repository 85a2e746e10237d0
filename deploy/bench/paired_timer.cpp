// Times two AOTInductor packages against each other in one process, for //deploy:bench's
// custom-op tax table: the C++ runner's side of "ours / Inductor's".
//
// Each package is opened as the loader opens one (my_ops/model.h: a private, hashed copy; the op
// libraries dlopen()ed into the global scope first; one runner; no manifest), then the
// two are called in alternating blocks of a few calls, so background load and the CPU's clock
// fall on both alike. Timed in separate processes, the same package against itself gave
// per-round ratios from 0.6 to 1.9 at 1 x 64 on a shared 2-core machine; alternating in one
// process, 0.99 to 1.02.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "deploy/loader/percentile.h"
#include "my_ops/error.h"
#include "my_ops/model.h"
#include "my_ops/process.h"
#include "my_ops/tensor_file.h"

namespace my_ops::bench {
namespace {

using deploy::Error;
using enum deploy::ExitCode;

[[noreturn]] void fail(deploy::ExitCode code, std::string message) {
  throw Error(code, std::move(message));
}

constexpr const char* kUsageText =
    R"(usage: paired_timer --ops LIB [--ops LIB ...] --input FILE [--calls N] [--rounds R]
                    [--block B] OURS.pt2 THEIRS.pt2

Loads both packages into one process and calls them in alternating blocks of B calls
(which goes first alternates too), one thread. Prints one line per round,
"<ours p50 ms> <theirs p50 ms>", each the median of that round's N calls.

  --ops LIB     an op library the packages call (repeatable; at least one)
  --input FILE  the inputs, as the loader reads them (torch.save of a tuple of tensors)
  --calls N     calls of each package per round (default 2000)
  --rounds R    rounds (default 5)
  --block B     calls per block (default 10)

Exit codes are the loader's: 2 for a bad command line, 3 for an op library,
4 and 5 for a package, 6 and 7 for the input.
)";

constexpr uint64_t kMaxInputBytes = uint64_t{1} << 30;

struct Options {
  std::vector<std::string> ops;
  std::string input;
  std::vector<std::string> packages;
  long calls = 2000;
  long rounds = 5;
  long block = 10;
};

long parse_positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1 || value > 100'000'000) {
    fail(kUsage, flag + ": expected a positive integer, got '" + text + "'");
  }
  return value;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsageText;
      std::exit(kOk);
    }
    if (a.rfind("--", 0) == 0) {
      if (i + 1 >= argc) fail(kUsage, a + ": expected a value");
      const std::string v = argv[++i];
      if (a == "--ops") {
        o.ops.push_back(v);
      } else if (a == "--input") {
        o.input = v;
      } else if (a == "--calls") {
        o.calls = parse_positive(a, v);
      } else if (a == "--rounds") {
        o.rounds = parse_positive(a, v);
      } else if (a == "--block") {
        o.block = parse_positive(a, v);
      } else {
        fail(kUsage, "unknown option " + a + " (see --help)");
      }
    } else {
      o.packages.push_back(a);
    }
  }
  if (o.packages.size() != 2) fail(kUsage, "expected two packages, OURS.pt2 THEIRS.pt2");
  if (o.ops.empty()) fail(kUsage, "expected at least one --ops LIB");
  if (o.input.empty()) fail(kUsage, "expected --input FILE");
  return o;
}

int run(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  auto check = [&](const std::string& package) {
    deploy::OpenOptions options;
    options.package = package;
    options.verify = false;  // the benchmark's own packages, just exported
    options.op_libraries = opt.ops;
    return deploy::CheckedPackage::check(options);
  };
  // Both packages and the input file are read before anything loads, as the loader does.
  deploy::CheckedPackage ours_package = check(opt.packages[0]);
  deploy::CheckedPackage theirs_package = check(opt.packages[1]);
  const std::vector<at::Tensor> inputs =
      deploy::read_tensors(opt.input, kMaxInputBytes, "input file");
  const deploy::Model ours = deploy::Model::load(std::move(ours_package));
  const deploy::Model theirs = deploy::Model::load(std::move(theirs_package));
  // Checked against each package's input signature and made contiguous once, not per call.
  const std::vector<at::Tensor> ours_inputs = ours.prepare(inputs);
  const std::vector<at::Tensor> theirs_inputs = theirs.prepare(inputs);

  // Warm-up: the first calls pay for lazy initialisation.
  for (int i = 0; i < 20; ++i) {
    ours.run(ours_inputs);
    theirs.run(theirs_inputs);
  }
  for (long round = 0; round < opt.rounds; ++round) {
    std::vector<double> times[2];
    for (auto& t : times) t.reserve(static_cast<size_t>(opt.calls));
    for (long done = 0, block = 0; done < opt.calls; done += opt.block, ++block) {
      const long n = std::min(opt.block, opt.calls - done);
      for (int turn = 0; turn < 2; ++turn) {
        const int side = static_cast<int>((block + round + turn) % 2);
        const deploy::Model& model = side == 0 ? ours : theirs;
        const std::vector<at::Tensor>& model_inputs = side == 0 ? ours_inputs : theirs_inputs;
        for (long k = 0; k < n; ++k) {
          const auto t0 = std::chrono::steady_clock::now();
          model.run(model_inputs);
          const auto t1 = std::chrono::steady_clock::now();
          times[side].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      }
    }
    std::printf("%.6f %.6f\n", loader::percentile(times[0], 50), loader::percentile(times[1], 50));
    std::fflush(stdout);
  }
  return kOk;
}

}  // namespace
}  // namespace my_ops::bench

int main(int argc, char** argv) {
  my_ops::deploy::install_process_handlers("paired_timer");
  int code = my_ops::deploy::kOther;
  std::string error;
  try {
    code = my_ops::bench::run(argc, argv);
  } catch (const my_ops::deploy::Error& e) {
    error = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    error = e.what();
    error = error.substr(0, error.find('\n'));
  }
  if (code != my_ops::deploy::kOk) {
    std::cerr << "paired_timer: error: " << my_ops::deploy::escape_line(error) << "\n";
  }
  my_ops::deploy::remove_private_folders();
  return code;
}
