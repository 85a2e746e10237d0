// Times two AOTInductor packages against each other in one process, for //deploy:bench's
// custom-op tax table: the C++ runner's side of "ours / Inductor's".
//
// Each package is loaded the way the loader loads one (deploy/loader/runner.h: a private,
// hashed copy; the op libraries dlopen()ed into the global scope first; one runner), then the
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
#include <vector>

#include "deploy/loader/failure.h"
#include "deploy/loader/file_io.h"
#include "deploy/loader/private_dir.h"
#include "deploy/loader/runner.h"
#include "deploy/loader/stage.h"
#include "deploy/loader/tensor_io.h"
#include "deploy/loader/text.h"
#include "deploy/loader/verified_copy.h"

namespace my_ops::bench {
namespace {

using namespace my_ops::loader;

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

double median_of(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int run(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  Stage::install();
  const std::unique_ptr<PrivateDir> dir = PrivateDir::create();
  std::vector<VerifiedCopy> packages;
  for (size_t i = 0; i < 2; ++i) {
    packages.push_back(copy_and_hash(
        opt.packages[i], dir->path() + "/model_" + std::to_string(i) + ".pt2", kPackageRole));
  }
  std::vector<VerifiedCopy> libraries;
  for (size_t i = 0; i < opt.ops.size(); ++i) {
    libraries.push_back(copy_and_hash(
        opt.ops[i], dir->path() + "/op_library_" + std::to_string(i) + ".so", kOpLibraryRole));
  }
  std::vector<at::Tensor> inputs = load_tensors(opt.input, "input file", kMaxInputBytes);
  // As the loader runs a package: load_package turns on the input checks compiled into it.
  load_op_libraries(libraries);
  auto ours = load_package(packages[0], 1);
  auto theirs = load_package(packages[1], 1);
  validate_inputs(inputs, ours->get_metadata());
  validate_inputs(inputs, theirs->get_metadata());
  for (auto& t : inputs) t = t.contiguous();

  // Warm-up: the first calls pay for lazy initialisation.
  for (int i = 0; i < 20; ++i) {
    ours->run(inputs);
    theirs->run(inputs);
  }
  for (long round = 0; round < opt.rounds; ++round) {
    std::vector<double> times[2];
    for (auto& t : times) t.reserve(static_cast<size_t>(opt.calls));
    for (long done = 0, block = 0; done < opt.calls; done += opt.block, ++block) {
      const long n = std::min(opt.block, opt.calls - done);
      for (int turn = 0; turn < 2; ++turn) {
        const int side = static_cast<int>((block + round + turn) % 2);
        auto& model = side == 0 ? *ours : *theirs;
        for (long k = 0; k < n; ++k) {
          const auto t0 = std::chrono::steady_clock::now();
          model.run(inputs);
          const auto t1 = std::chrono::steady_clock::now();
          times[side].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
      }
    }
    std::printf("%.6f %.6f\n", median_of(times[0]), median_of(times[1]));
    std::fflush(stdout);
  }
  return kOk;
}

}  // namespace
}  // namespace my_ops::bench

int main(int argc, char** argv) {
  using namespace my_ops::loader;
  PrivateDir::block_signals();
  PrivateDir::handle_signals();
  int code = kOther;
  std::string error;
  try {
    code = my_ops::bench::run(argc, argv);
  } catch (const Failure& f) {
    error = f.message;
    code = f.code;
  } catch (const std::exception& e) {
    error = error_text(e);
  }
  if (code != kOk) std::cerr << "paired_timer: error: " << escape_line(error) << "\n";
  PrivateDir::remove_all();
  return code;
}
