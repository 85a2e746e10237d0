// The deploy API from an application's side, for //deploy:bench: linked against the SDK's
// shared library (libmy_ops_deploy.so), as the SDK's example is, it times Model::run the way
// `loader --bench` times its runs, and prints the same line.
//   sdk_app --ops LIB --package P --input I --bench N
// --bench 0 runs the model once, as the loader does without --bench: the footprint tables time a
// start to its first result.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "deploy/loader/percentile.h"
#include "my_ops/model.h"
#include "my_ops/tensor_file.h"

using my_ops::loader::percentile;

int main(int argc, char** argv) {
  my_ops::deploy::OpenOptions options;
  std::string input;
  long calls = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--ops") {
      options.op_libraries.push_back(argv[i + 1]);
    } else if (flag == "--package") {
      options.package = argv[i + 1];
    } else if (flag == "--input") {
      input = argv[i + 1];
    } else if (flag == "--intra-op-threads") {
      options.intra_op_threads = static_cast<int>(std::strtol(argv[i + 1], nullptr, 10));
    } else if (flag == "--bench") {
      calls = std::strtol(argv[i + 1], nullptr, 10);
    } else {
      std::cerr << "sdk_app: error: unknown flag " << flag << "\n";
      return 2;
    }
  }
  if (argc % 2 == 0 || options.package.empty() || input.empty() || calls < 0) {
    std::cerr
        << "usage: sdk_app --ops LIB --package P --input I --bench N [--intra-op-threads I]\n";
    return 2;
  }
  try {
    const my_ops::deploy::Model model = my_ops::deploy::Model::open(options);
    const std::vector<at::Tensor> inputs = model.prepare(my_ops::deploy::read_tensors(input));
    if (calls == 0) {
      model.run(inputs);
      std::printf("runs 1\n");
      return 0;
    }
    // Warm-up, as the loader's: first runs pay for lazy initialisation.
    for (int i = 0; i < 3; ++i) model.run(inputs);
    std::vector<double> latencies;
    for (long i = 0; i < calls; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      model.run(inputs);
      const auto t1 = std::chrono::steady_clock::now();
      latencies.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::printf("runs %zu p50 %.4f ms p99 %.4f ms\n", latencies.size(), percentile(latencies, 50),
                percentile(latencies, 99));
    return 0;
  } catch (const my_ops::deploy::Error& e) {
    std::cerr << "sdk_app: error: " << e.what() << "\n";
    return e.code();
  }
}
