#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <optional>

#include "ops/common/cpu_kernel.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/packed_linear.h"

namespace my_ops {

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor linear_packed(TensorRef x, TensorRef weight, TensorRef bias) {
  const LinearShape shape = check_linear_packed_args(x, weight, bias);
  Sizes out_sizes(x.sizes());
  out_sizes.back() = shape.out_features;
  OwnedTensor out = empty_like_with_sizes(x, out_sizes);
  if (out.ref().numel() == 0) return out;
  const ContiguousAs x_float(x, ScalarType::Float);
  const ContiguousAs w(weight);
  std::optional<ContiguousAs> bias_float;
  if (bias.get() != nullptr) bias_float.emplace(bias, ScalarType::Float);
  const float* bias_data = bias_float ? bias_float->ref().data_as<float>() : nullptr;

  // A float32 result is written in place; another dtype through a float32 one, converted once.
  std::optional<OwnedTensor> out_float;
  if (x.scalar_type() != ScalarType::Float) {
    out_float.emplace(empty_like_with_sizes(x_float, out_sizes));
  }
  float* out_data = (out_float ? out_float->ref() : out.ref()).mutable_data_as<float>();
  // Parallel over panels: each thread streams its own share of the weights, which is what the
  // products at a few rows are bound by.
  const int64_t panels = weight.size(0);
  const int64_t work_per_panel = std::max<int64_t>(1, shape.rows * shape.in_features);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / (work_per_panel * kPanelChannels));
  parallel_for_work(
      0, panels, grain, panels * work_per_panel * kPanelChannels, [&](int64_t begin, int64_t end) {
        cpu_vec::linear_packed(x_float.ref().data_as<float>(), shape.rows, shape.in_features,
                               w.ref().data_as<float>(), bias_data, out_data, panels, begin, end);
      });
  if (out_float) {
    torch::stable::Tensor dst = out.ref().to_stable();
    torch::stable::copy_(dst, out_float->ref().to_stable());
  }
  return out;
}

}  // namespace cpu
}  // namespace my_ops
