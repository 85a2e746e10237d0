#include <torch/csrc/stable/ops.h>

#include <cstdint>

#include "ops/common/launch.cuh"
#include "ops/packed_linear/packed_linear.h"

namespace my_ops {
namespace {

// Rows of x one warp multiplies by a panel: each weight a lane loads serves this many rows.
constexpr int kRowsPerWarp = 4;

// One warp per (panel, group of kRowsPerWarp rows), one lane per channel of the panel: a step of k
// loads the panel's 32 weights as one coalesced 128-byte read, and x's value, the same address in
// every lane, as one broadcast.
__global__ void linear_packed_kernel(const float* __restrict__ x, int64_t rows, int64_t k,
                                     const float* __restrict__ weight,
                                     const float* __restrict__ bias, float* __restrict__ out,
                                     int64_t n) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t panels = n / kPanelChannels;
  const int64_t row_groups = (rows + kRowsPerWarp - 1) / kRowsPerWarp;
  const int64_t warps = panels * row_groups;
  for (int64_t warp = global_thread_index() / kWarpSize; warp < warps;
       warp += grid_stride() / kWarpSize) {
    const int64_t p = warp % panels;
    const int64_t m0 = warp / panels * kRowsPerWarp;
    const int live = static_cast<int>(rows - m0 < kRowsPerWarp ? rows - m0 : kRowsPerWarp);
    const float* w = weight + p * k * kPanelChannels + lane;
    float acc[kRowsPerWarp] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float wv = w[i * kPanelChannels];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        if (r < live) acc[r] = fmaf(x[(m0 + r) * k + i], wv, acc[r]);
      }
    }
    const int64_t channel = p * kPanelChannels + lane;
    const float b = bias != nullptr ? bias[channel] : 0.0f;
    for (int r = 0; r < live; ++r) out[(m0 + r) * n + channel] = acc[r] + b;
  }
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor linear_packed(TensorRef x, TensorRef weight, TensorRef bias) {
  const LinearShape shape = check_linear_packed_args(x, weight, bias);
  const DeviceGuard device_guard(x.device_index());
  const ContiguousAs w(weight);
  const int64_t warps = weight.size(0) * ((shape.rows + kRowsPerWarp - 1) / kRowsPerWarp);
  return float32_linear(x, bias, shape.out_features,
                        [&](const float* x_data, const float* bias_data, float* out) {
                          linear_packed_kernel<<<num_blocks_for(warps, kThreads / kWarpSize),
                                                 kThreads, 0, current_stream(x.device_index())>>>(
                              x_data, shape.rows, shape.in_features, w.ref().data_as<float>(),
                              bias_data, out, shape.out_features);
                          check_kernel_launch();
                        });
}

}  // namespace cuda
}  // namespace my_ops
