#include <torch/csrc/stable/ops.h>

#include <algorithm>

#include "ops/common/cpu_kernel.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/packed_linear.h"

namespace my_ops {

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor linear_packed(TensorRef x, TensorRef weight, TensorRef bias) {
  const LinearShape shape = check_linear_packed_args(x, weight, bias);
  const ContiguousAs w(weight);
  const int64_t panels = weight.size(0);
  return float32_linear(x, bias, shape.out_features,
                        [&](const float* x_data, const float* bias_data, float* out_data) {
                          // Parallel over panels: each thread streams its own share of the
                          // weights, which is what the products at a few rows are bound by.
                          const int64_t work_per_panel =
                              std::max<int64_t>(1, shape.rows * shape.in_features) * kPanelChannels;
                          const int64_t grain = std::max<int64_t>(1, kGrainSize / work_per_panel);
                          parallel_for_work(0, panels, grain, panels * work_per_panel,
                                            [&](int64_t begin, int64_t end) {
                                              cpu_vec::linear_packed(
                                                  x_data, shape.rows, shape.in_features,
                                                  w.ref().data_as<float>(), bias_data, out_data,
                                                  panels, begin, end);
                                            });
                        });
}

}  // namespace cpu
}  // namespace my_ops
