// Standalone runtime for AOTInductor packages that use the my_ops library.
//
// Links only against LibTorch (no libpython), so it runs on edge hosts that have the LibTorch
// shared libraries but no Python. `loader --help` gives the command line and the exit codes.

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "deploy/loader/cli.h"
#include "deploy/loader/failure.h"
#include "deploy/loader/file_io.h"
#include "deploy/loader/op_check.h"
#include "deploy/loader/private_dir.h"
#include "deploy/loader/runner.h"
#include "deploy/loader/stage.h"
#include "deploy/loader/tensor_io.h"
#include "deploy/loader/text.h"
#include "deploy/loader/verified_copy.h"
#include "deploy/loader/verify.h"

namespace my_ops::loader {
namespace {

constexpr FileRole kPackageRole{"package", kPackageMissing, kPackageCorrupt};
constexpr FileRole kOpLibraryRole{"op library", kOpsLibrary, kOpsLibrary};

std::string exe_path() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string("./loader");
}

void check_output(const std::string& path) {
  if (auto problem = output_problem(path)) {
    fail(kOutputUnwritable, "cannot write output " + path + ": " + *problem);
  }
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int run(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  if (opt.help) {
    std::cout << kHelp;
    return kOk;
  }
  resolve_paths(opt, env_or_empty("BUILD_WORKING_DIRECTORY"));
  if (opt.ops.empty()) {
    opt.ops.push_back(default_op_library(exe_path(), env_or_empty("RUNFILES_DIR")));
  }
  check_output(opt.output);
  PrivateDir& dir = PrivateDir::create();
  Stage::install(dir.path());

  // Each file is opened once, hashed while it is copied into the private folder, and only the
  // copies are used from here on. Cheap checks come first, so mistakes cost no model load, and
  // everything is verified before any of its code can run.
  VerifiedCopy package = copy_and_hash(opt.package, dir.path() + "/model.pt2", kPackageRole);
  check_package(package, opt.max_unpacked_mib);
  std::vector<VerifiedCopy> libraries;
  for (size_t i = 0; i < opt.ops.size(); ++i) {
    libraries.push_back(copy_and_hash(
        opt.ops[i], dir.path() + "/op_library_" + std::to_string(i) + ".so", kOpLibraryRole));
    // A second copy would register its ops again, which LibTorch answers with an abort.
    for (size_t j = 0; j < i; ++j) {
      if (libraries[j].sha256 == libraries[i].sha256) {
        fail(kUsage, "op library " + opt.ops[i] + " is the same library as " + opt.ops[j] +
                         " (sha256 " + libraries[i].sha256 + "): pass each library once");
      }
    }
  }
  Registrations needed;  // what the package calls; stays empty with --no-verify
  const std::string device = verify_manifest(opt, package, libraries, &needed);
  const uint64_t max_input = opt.max_input_mib << 20;
  std::vector<at::Tensor> inputs = load_tensors(opt.input, "input file", max_input);
  std::vector<at::Tensor> expected;
  if (!opt.expect.empty()) expected = load_tensors(opt.expect, "expected-output file", max_input);
  // Every file the run reads is open by now: the output may be none of them.
  check_output(opt.output);

  if (device == "cuda") load_cuda_backend();
  load_op_libraries(libraries);
  check_registrations(needed, opt.ops);
  // Enables the shape/dtype/stride checks compiled into every AOTI model; without them a bad
  // input is undefined behaviour inside generated code.
  ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
  auto loader = load_package(package, opt.runners);

  auto metadata = loader->get_metadata();
  // Before contiguous(): an input of absurd declared size (zero strides over a tiny storage) is
  // rejected here instead of being materialised.
  validate_inputs(inputs, metadata);
  for (auto& t : inputs) t = t.contiguous();
  // Input files hold CPU tensors; a CUDA package needs them on its device.
  if (auto it = metadata.find("AOTI_DEVICE_KEY"); it != metadata.end() && it->second != "cpu") {
    try {
      c10::Device target(it->second);
      for (auto& t : inputs) t = t.to(target);
    } catch (const std::exception& e) {
      fail(kOther,
           "cannot move inputs to the package's device " + it->second + ": " + error_text(e));
    }
  }

  std::vector<at::Tensor> outputs;
  if (opt.bench > 0) {
    // Warm-up: first runs pay for lazy initialisation (thread pools, caches, CUDA kernels).
    run_concurrently(*loader, inputs, opt.threads, 3 * opt.threads, nullptr);
    std::vector<double> latencies;
    outputs = run_concurrently(*loader, inputs, opt.threads, opt.bench * opt.threads, &latencies);
    // 0.1 us resolution: a call of a small package takes a few microseconds.
    std::printf("runs %zu threads %ld runners %ld p50 %.4f ms p99 %.4f ms\n", latencies.size(),
                opt.threads, opt.runners, percentile(latencies, 50), percentile(latencies, 99));
  } else if (opt.runs > 0) {
    auto t0 = std::chrono::steady_clock::now();
    outputs = run_concurrently(*loader, inputs, opt.threads, opt.runs - 1, nullptr);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("runs %ld threads %ld runners %ld wall %.3f ms\n", opt.runs, opt.threads,
                opt.runners, std::chrono::duration<double, std::milli>(t1 - t0).count());
  } else {
    // Without --bench or --runs, one run per thread still exercises concurrency.
    outputs =
        run_concurrently(*loader, inputs, opt.threads, opt.threads > 1 ? opt.threads : 0, nullptr);
  }
  for (auto& t : outputs) t = t.cpu();
  save_tensors(opt.output, outputs);
  if (!opt.expect.empty()) {
    compare_expected(outputs, expected, opt.expect, opt.atol, opt.rtol, opt.exact);
    std::printf("outputs match %s%s\n", escape_line(opt.expect).c_str(),
                opt.exact ? " bit for bit" : "");
  }
  // SIGPIPE is ignored, so a closed stdout shows up here, as an error with its own code.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fail(kOther, std::string("cannot write to standard output: ") + std::strerror(errno));
  }
  return kOk;
}

}  // namespace
}  // namespace my_ops::loader

int main(int argc, char** argv) {
  using namespace my_ops::loader;
  // Before any thread exists, so that every thread inherits the mask and only the cleanup
  // thread ever sees these signals.
  PrivateDir::block_signals();
  // A closed pipe or a file-size limit makes the write fail (EPIPE, EFBIG) instead of killing
  // the loader before it cleans up, so each ends with its own line and exit code.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  int code = kOther;
  std::string error;
  try {
    code = run(argc, argv);
  } catch (const Failure& f) {
    error = f.message;
    code = f.code;
  } catch (const std::exception& e) {
    error = error_text(e);
    code = kOther;
  } catch (...) {
    error = "unknown exception";
    code = kOther;
  }
  // Paths and names in a message come from outside: one line, whatever they hold.
  if (code != kOk) std::cerr << "loader: error: " << escape_line(error) << "\n";
  std::cout.flush();
  PrivateDir::remove_all();
  return code;
}
