#include "deploy/loader/concurrent_runs.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

#include "my_ops/error.h"
#include "my_ops/process.h"
#include "my_ops/tensor_file.h"

namespace my_ops::loader {
namespace {

using deploy::Error;
using enum deploy::ExitCode;

bool identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!deploy::bit_identical(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

std::vector<at::Tensor> run_concurrently(const RunFunction& run,
                                         const std::vector<at::Tensor>& inputs, long threads,
                                         long total, std::vector<double>* latencies) {
  deploy::Stage stage(kOther, "model run failed");
  std::vector<at::Tensor> reference = run(inputs);
  std::vector<std::vector<double>> per_thread(threads);
  std::vector<std::exception_ptr> errors(threads);
  std::atomic<bool> stop{false};
  std::atomic<bool> mismatch{false};
  auto worker = [&](long t) {
    const long iters = total / threads + (t < total % threads ? 1 : 0);
    try {
      for (long i = 0; i < iters && !stop; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        auto out = run(inputs);
        auto t1 = std::chrono::steady_clock::now();
        per_thread[t].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (!identical(out, reference)) {
          mismatch = true;
          stop = true;
        }
      }
    } catch (...) {
      errors[t] = std::current_exception();
      stop = true;
    }
  };
  if (threads == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    std::optional<std::string> spawn_error;
    for (long t = 0; t < threads && !spawn_error; ++t) {
      try {
        pool.emplace_back(worker, t);
      } catch (const std::system_error& e) {
        // Joining what started is the only way out that does not abort.
        spawn_error = e.what();
        stop = true;
      }
    }
    for (auto& th : pool) th.join();
    if (spawn_error) {
      throw Error(kOther, "cannot start " + std::to_string(threads) + " threads: " + *spawn_error);
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  if (mismatch) throw Error(kOther, "outputs differ between runs (not bit-identical)");
  if (latencies) {
    for (auto& v : per_thread) latencies->insert(latencies->end(), v.begin(), v.end());
  }
  return reference;
}

}  // namespace my_ops::loader
