#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <vector>

#include "ops/common/cpu_kernel.h"
#include "ops/quantized_linear/cpu_vec.h"
#include "ops/quantized_linear/quantized_linear.h"

namespace my_ops {
namespace {

// Everything but the products: the argument checks are done. `layout(q, params, rows, k)` lays
// q's rows out for the products, once per call; `multiply(q, rows_layout, params, out, bias,
// n_begin, n_end)` runs one of the cpu_vec products over a range of output channels.
template <class Layout, class Multiply>
OwnedTensor quantized_linear(TensorRef x, TensorRef bias, const LinearShape& shape,
                             const cpu_vec::QuantizedLinearKernels& kernels, const Layout& layout,
                             const Multiply& multiply) {
  return float32_linear(
      x, bias, shape.out_features,
      [&](const float* x_data, const float* bias_data, float* out_data) {
        const int64_t rows = shape.rows;
        const int64_t k = shape.in_features;
        std::vector<uint8_t> q(static_cast<size_t>(rows * k));
        std::vector<cpu_vec::QuantizedRow> params(static_cast<size_t>(rows));
        parallel_for_work(0, rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(1, k)),
                          rows * k, [&](int64_t begin, int64_t end) {
                            kernels.quantize_rows(x_data, k, begin, end, q.data(), params.data());
                          });
        const std::vector<uint8_t> laid_out = layout(q.data(), params.data(), rows, k);
        const uint8_t* rows_layout = laid_out.empty() ? nullptr : laid_out.data();
        // Parallel over output channels: each thread streams its own share of the weights, which is
        // what the products at a few rows are bound by.
        const int64_t n = shape.out_features;
        const int64_t work_per_channel = std::max<int64_t>(1, rows * k);
        const int64_t grain = std::max<int64_t>(1, kGrainSize / work_per_channel);
        parallel_for_work(0, n, grain, n * work_per_channel, [&](int64_t begin, int64_t end) {
          multiply(q.data(), rows_layout, params.data(), out_data, bias_data, begin, end);
        });
      });
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor linear_int8(TensorRef x, TensorRef weight, TensorRef weight_scale, TensorRef bias) {
  const LinearShape shape = check_linear_int8_args(x, weight, weight_scale, bias);
  const ContiguousAs w(weight);
  const ContiguousAs scales(weight_scale);
  const float* scale_data = scales.ref().data_as<float>();
  check_weight_scale_values("linear_int8", scale_data, scales.ref().numel());
  const cpu_vec::QuantizedLinearKernels& kernels = cpu_vec::quantized_linear_kernels();
  return quantized_linear(
      x, bias, shape, kernels, kernels.int8_rows,
      [&](const uint8_t* q, const uint8_t* rows_layout, const cpu_vec::QuantizedRow* params,
          float* out, const float* b, int64_t begin, int64_t end) {
        kernels.linear_int8(q, rows_layout, params, shape.rows, shape.in_features,
                            w.ref().data_as<int8_t>(), scale_data, b, out, shape.out_features,
                            begin, end);
      });
}

OwnedTensor linear_int4(TensorRef x, TensorRef weight, TensorRef weight_scale, int64_t group_size,
                        TensorRef bias) {
  const LinearShape shape = check_linear_int4_args(x, weight, weight_scale, group_size, bias);
  const ContiguousAs w(weight);
  const ContiguousAs scales(weight_scale);
  const cpu_vec::QuantizedLinearKernels& kernels = cpu_vec::quantized_linear_kernels();
  // float16 scales as float32, once per call (about 2.5 us for the 27,648 of SmolLM2's gate and up
  // projection): what the kernels read, checked as float32 ones are.
  const int64_t scale_count = scales.ref().numel();
  std::vector<float> converted;
  const float* scale_data = nullptr;
  if (scales.ref().scalar_type() == ScalarType::Half) {
    converted.resize(static_cast<size_t>(scale_count));
    kernels.halves_to_floats(scales.ref().data_as<uint16_t>(), scale_count, converted.data());
    scale_data = converted.data();
  } else {
    scale_data = scales.ref().data_as<float>();
  }
  check_weight_scale_values("linear_int4", scale_data, scale_count);
  return quantized_linear(
      x, bias, shape, kernels,
      [&](const uint8_t* q, const cpu_vec::QuantizedRow* params, int64_t rows, int64_t k) {
        return kernels.int4_rows(q, params, rows, k, group_size);
      },
      [&](const uint8_t* q, const uint8_t* rows_layout, const cpu_vec::QuantizedRow* params,
          float* out, const float* b, int64_t begin, int64_t end) {
        kernels.linear_int4(q, rows_layout, params, shape.rows, shape.in_features,
                            w.ref().data_as<uint8_t>(), scale_data, group_size, b, out,
                            shape.out_features, begin, end);
      });
}

}  // namespace cpu
}  // namespace my_ops
