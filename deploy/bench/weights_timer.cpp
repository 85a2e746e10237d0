// A full load against a weights update, on the deploy API (the loader's code), for
// //deploy:bench_weights. Each round opens the package as `loader` does (copies, hashes, checks,
// loads), times one call of update_weights with the weights file, and times `--calls` runs with
// the new weights; it prints one line per round:
//   open_ms X update_ms Y run_p50_ms Z
// A first open, not timed, loads the op library, which later opens find loaded.
//   weights_timer --ops LIB --package P --weights W --input I --rounds N --calls C

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "my_ops/model.h"
#include "my_ops/tensor_file.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  my_ops::deploy::OpenOptions options;
  my_ops::deploy::WeightsOptions weights;
  std::string input;
  long rounds = 0;
  long calls = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--ops") {
      options.op_libraries.push_back(value);
    } else if (flag == "--package") {
      options.package = value;
    } else if (flag == "--weights") {
      weights.weights = value;
    } else if (flag == "--input") {
      input = value;
    } else if (flag == "--rounds") {
      rounds = std::strtol(value, nullptr, 10);
    } else if (flag == "--calls") {
      calls = std::strtol(value, nullptr, 10);
    } else {
      std::cerr << "weights_timer: error: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (argc % 2 == 0 || options.package.empty() || weights.weights.empty() || input.empty() ||
      rounds < 1 || calls < 1) {
    std::cerr << "usage: weights_timer --ops LIB --package P --weights W --input I --rounds N "
                 "--calls C\n";
    return 2;
  }
  try {
    const std::vector<at::Tensor> raw = my_ops::deploy::read_tensors(input);
    my_ops::deploy::Model::open(options);
    for (long r = 0; r < rounds; ++r) {
      auto t0 = Clock::now();
      my_ops::deploy::Model model = my_ops::deploy::Model::open(options);
      const double open_ms = ms_since(t0);
      const std::vector<at::Tensor> inputs = model.prepare(raw);
      model.run(inputs);
      t0 = Clock::now();
      model.update_weights(weights);
      const double update_ms = ms_since(t0);
      for (int i = 0; i < 3; ++i) model.run(inputs);
      std::vector<double> latencies;
      for (long i = 0; i < calls; ++i) {
        t0 = Clock::now();
        model.run(inputs);
        latencies.push_back(ms_since(t0));
      }
      std::nth_element(latencies.begin(), latencies.begin() + latencies.size() / 2,
                       latencies.end());
      std::printf("open_ms %.3f update_ms %.3f run_p50_ms %.4f\n", open_ms, update_ms,
                  latencies[latencies.size() / 2]);
      std::fflush(stdout);
    }
    return 0;
  } catch (const my_ops::deploy::Error& e) {
    std::cerr << "weights_timer: error: " << e.what() << "\n";
    return e.code();
  }
}
