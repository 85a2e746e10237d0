#pragma once

// The loader's runs: one reference run, then more from several threads, each checked against it.

#include <ATen/Tensor.h>

#include <functional>
#include <vector>

namespace my_ops::loader {

using RunFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// One reference run, then `total` more shared out over `threads` threads, each checked bit for
// bit against the reference, which is returned. Per-call latencies (ms) go to `latencies` when
// non-null. The first exception a run throws is rethrown; outputs that differ between runs are
// an Error (kOther). All of it runs in one Stage (my_ops/process.h), "model run failed".
std::vector<at::Tensor> run_concurrently(const RunFunction& run,
                                         const std::vector<at::Tensor>& inputs, long threads,
                                         long total, std::vector<double>* latencies);

}  // namespace my_ops::loader
