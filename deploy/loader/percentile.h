#pragma once

// The latency summaries the loader's --bench and the benchmarks' C++ runners print.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace my_ops::loader {

// The nearest-rank percentile `p` (0 to 100) of `v`, which must not be empty.
inline double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(rank == 0 ? 0 : rank - 1, v.size() - 1)];
}

}  // namespace my_ops::loader
