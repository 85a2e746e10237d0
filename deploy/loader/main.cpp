// Standalone runtime for AOTInductor packages that use the my_ops library.
//
// Links only against LibTorch (no libpython), so it runs on edge hosts that have the LibTorch
// shared libraries but no Python. `loader --help` gives the command line and the exit codes.

#include <ATen/ops/tensor.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "deploy/loader/cli.h"
#include "deploy/loader/concurrent_runs.h"
#include "deploy/loader/expect.h"
#include "deploy/loader/percentile.h"
#include "my_ops/error.h"
#include "my_ops/model.h"
#include "my_ops/process.h"
#include "my_ops/session.h"
#include "my_ops/tensor_file.h"

namespace my_ops::loader {
namespace {

using deploy::Error;
using enum deploy::ExitCode;

std::string exe_path() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string("./loader");
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

deploy::OpenOptions open_options(const Options& opt) {
  deploy::OpenOptions options;
  options.package = opt.package;
  options.manifest = opt.manifest;
  options.verify = opt.verify;
  // The command line refuses an empty value, so "" is "not given" here.
  if (!opt.public_key.empty()) options.public_key = opt.public_key;
  options.op_libraries = opt.ops;
  options.max_unpacked_bytes = opt.max_unpacked_mib << 20;
  options.runners = static_cast<int>(opt.runners);
  options.intra_op_threads = static_cast<int>(opt.intra_op_threads);
  options.weights.weights = opt.weights;
  options.weights.manifest = opt.weights_manifest;
  return options;
}

// The prompt of --generate: one 1-D integer tensor of token ids.
std::vector<int64_t> read_prompt(const std::string& path, uint64_t max_bytes) {
  const std::vector<at::Tensor> tensors = deploy::read_tensors(path, max_bytes, "prompt-ids file");
  const auto what = [](const at::Tensor& t) {
    return std::to_string(t.dim()) + "-D " + std::string(c10::toString(t.scalar_type()));
  };
  if (tensors.size() != 1 || tensors[0].dim() != 1 ||
      !at::isIntegralType(tensors[0].scalar_type(), /*includeBool=*/false)) {
    throw Error(kInputMismatch,
                "prompt-ids file " + deploy::escape_line(path) +
                    ": expected one 1-D integer tensor of token ids, got " +
                    (tensors.size() == 1 ? "a " + what(tensors[0]) + " tensor"
                                         : std::to_string(tensors.size()) + " tensors"));
  }
  const at::Tensor ids = tensors[0].to(at::kLong).contiguous();
  return {ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()};
}

// --generate: the token loop of a decoder package, ids on stdout, rates on stderr.
int generate(const Options& opt, deploy::CheckedPackage&& checked, uint64_t max_input) {
  const std::vector<int64_t> prompt = read_prompt(opt.prompt_ids, max_input);
  deploy::check_output_path(opt.output);
  deploy::Model model = deploy::Model::load(std::move(checked));
  deploy::Session session(model);
  deploy::GenerateOptions options;
  options.max_new_tokens = opt.generate;
  options.sampling = {opt.temperature, opt.top_k, opt.top_p, opt.seed};
  if (opt.stop_token >= 0) options.stop_token = opt.stop_token;
  const deploy::Generated out = session.generate(prompt, options);
  if (!opt.output.empty()) {
    deploy::write_tensors(opt.output, {at::tensor(out.tokens, at::kLong)});
  }
  std::string line;
  for (int64_t t : out.tokens) line += (line.empty() ? "" : " ") + std::to_string(t);
  std::printf("%s\n", line.c_str());
  std::fprintf(stderr,
               "prefill %lld tokens %.2f ms (%.1f tokens/s), decode %zu tokens %.2f ms "
               "(%.1f tokens/s), intra-op-threads %d\n",
               static_cast<long long>(out.prompt_tokens), out.prefill_seconds * 1e3,
               out.prefill_tokens_per_second(), out.tokens.size() - 1, out.decode_seconds * 1e3,
               out.decode_tokens_per_second(), model.intra_op_threads());
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    throw Error(kOther, std::string("cannot write to standard output: ") + std::strerror(errno));
  }
  return kOk;
}

int run(int argc, char** argv) {
  Options opt = parse_args(argc, argv);
  if (opt.help) {
    std::cout << help_text();
    return kOk;
  }
  resolve_paths(opt, env_or_empty("BUILD_WORKING_DIRECTORY"));
  if (opt.ops.empty()) {
    opt.ops.push_back(default_op_library(exe_path(), env_or_empty("RUNFILES_DIR")));
  }
  deploy::check_output_path(opt.output);

  // The package and the op libraries, copied and checked; nothing of them loaded yet.
  deploy::CheckedPackage checked = deploy::CheckedPackage::check(open_options(opt));
  if (!opt.verify) {
    std::cerr << "loader: WARNING: --no-verify: the package and op libraries are NOT checked "
                 "against a manifest; running unverified native code\n";
  }
  const uint64_t max_input = opt.max_input_mib << 20;
  if (opt.generate > 0) return generate(opt, std::move(checked), max_input);
  std::vector<at::Tensor> inputs = deploy::read_tensors(opt.input, max_input, "input file");
  std::vector<at::Tensor> expected;
  if (!opt.expect.empty()) {
    expected = deploy::read_tensors(opt.expect, max_input, "expected-output file");
  }
  // Every file the run reads is open by now: the output may be none of them.
  deploy::check_output_path(opt.output);

  deploy::Model model = deploy::Model::load(std::move(checked));
  inputs = model.prepare(inputs);

  const RunFunction call = [&model](const std::vector<at::Tensor>& in) { return model.run(in); };
  std::vector<at::Tensor> outputs;
  if (opt.bench > 0) {
    // Warm-up: first runs pay for lazy initialisation (thread pools, caches, CUDA kernels).
    run_concurrently(call, inputs, opt.threads, 3 * opt.threads, nullptr);
    std::vector<double> latencies;
    outputs = run_concurrently(call, inputs, opt.threads, opt.bench * opt.threads, &latencies);
    // 0.1 us resolution: a call of a small package takes a few microseconds.
    std::printf("runs %zu threads %ld runners %ld intra-op-threads %d p50 %.4f ms p99 %.4f ms\n",
                latencies.size(), opt.threads, opt.runners, model.intra_op_threads(),
                percentile(latencies, 50), percentile(latencies, 99));
  } else if (opt.runs > 0) {
    auto t0 = std::chrono::steady_clock::now();
    outputs = run_concurrently(call, inputs, opt.threads, opt.runs - 1, nullptr);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("runs %ld threads %ld runners %ld wall %.3f ms\n", opt.runs, opt.threads,
                opt.runners, std::chrono::duration<double, std::milli>(t1 - t0).count());
  } else {
    // Without --bench or --runs, one run per thread still exercises concurrency.
    outputs =
        run_concurrently(call, inputs, opt.threads, opt.threads > 1 ? opt.threads : 0, nullptr);
  }
  deploy::write_tensors(opt.output, outputs);
  if (!opt.expect.empty()) {
    compare_expected(outputs, expected, opt.expect, opt.atol, opt.rtol, opt.exact);
    std::printf("outputs match %s%s\n", deploy::escape_line(opt.expect).c_str(),
                opt.exact ? " bit for bit" : "");
  }
  // SIGPIPE is ignored, so a closed stdout shows up here, as an error with its own code.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    throw Error(kOther, std::string("cannot write to standard output: ") + std::strerror(errno));
  }
  return kOk;
}

}  // namespace
}  // namespace my_ops::loader

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the blocked signals.
  my_ops::deploy::install_process_handlers("loader");
  // A closed pipe or a file-size limit makes the write fail (EPIPE, EFBIG) instead of killing
  // the loader before it cleans up, so each ends with its own line and exit code.
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
  int code = my_ops::deploy::kOther;
  std::string error;
  try {
    code = my_ops::loader::run(argc, argv);
  } catch (const my_ops::deploy::Error& e) {
    error = e.what();
    code = e.code();
  } catch (const std::exception& e) {
    // The API and the loader's own units throw Errors; this is LibTorch's or the library's.
    error = e.what();
    error = error.substr(0, error.find('\n'));
  } catch (...) {
    error = "unknown exception";
  }
  // Paths and names in a message come from outside: one line, whatever they hold.
  if (code != my_ops::deploy::kOk) {
    std::cerr << "loader: error: " << my_ops::deploy::escape_line(error) << "\n";
  }
  std::cout.flush();
  my_ops::deploy::remove_private_folders();
  return code;
}
