#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>
#include <type_traits>

#include "ops/common/block_reduce.cuh"
#include "ops/common/launch.cuh"
#include "ops/quantized_linear/quantized_linear.h"

namespace my_ops {
namespace {

// One row of x, quantized (as cpu_vec::QuantizedRow): the math is quantized_linear.h's.
struct QuantizedRow {
  float scale;
  int32_t zero_point;
  int32_t finite;
};

__device__ __forceinline__ float min_of(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float max_of(float a, float b) { return b > a ? b : a; }

template <typename T, class Combine>
__device__ __forceinline__ T warp_reduce(T value, const Combine& combine) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Every thread of the block gets the combination of all threads' values.
template <typename T, class Combine>
__device__ __forceinline__ T block_reduce(T value, T* scratch, T identity, const Combine& combine) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  value = warp_reduce(value, combine);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / kWarpSize) ? scratch[lane] : identity;
  return warp_reduce(value, combine);
}

// One block per row: its range, then its quantized values. nearbyintf rounds half to even, as
// the CPU kernels and the reference do; 1 / scale is a correctly rounded division (no fast math).
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const float* __restrict__ x, int64_t rows, int64_t k,
                         uint8_t* __restrict__ q, QuantizedRow* __restrict__ params) {
  __shared__ float scratch[kThreads / kWarpSize];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * k;
    float lo = 0.0f;
    float hi = 0.0f;
    float poison = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const float v = row[i];
      lo = min_of(lo, v);
      hi = max_of(hi, v);
      poison += v * 0.0f;
    }
    lo = block_reduce(lo, scratch, 0.0f, min_of);
    hi = block_reduce(hi, scratch, 0.0f, max_of);
    poison = block_reduce(poison, scratch, 0.0f, [](float a, float b) { return a + b; });
    const float span = hi - lo;
    const bool finite = poison == 0.0f && span <= 3.4028235e38f;
    float scale = __fdiv_rn(span, 255.0f);
    if (!finite || scale < 1.17549435e-38f) scale = 1.0f;
    const float inverse = __fdiv_rn(1.0f, scale);
    const int zero = finite ? min(max(-__float2int_rn(__fmul_rn(lo, inverse)), 0), 255) : 0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
      const int value = finite ? __float2int_rn(__fmul_rn(row[i], inverse)) + zero : 0;
      q[r * k + i] = static_cast<uint8_t>(min(max(value, 0), 255));
    }
    if (threadIdx.x == 0) params[r] = {scale, zero, finite ? 1 : 0};
  }
}

__device__ __forceinline__ bool usable_scale(float s) { return s > 0.0f && s <= 3.4028235e38f; }

// One warp per output element (grid-stride over rows x out_features): the few-row products of
// edge models, where each warp streams one weight row.
__global__ void __launch_bounds__(kThreads)
    linear_int8_kernel(const uint8_t* __restrict__ q, const QuantizedRow* __restrict__ params,
                       int64_t rows, int64_t k, const int8_t* __restrict__ weight,
                       const float* __restrict__ weight_scale, const float* __restrict__ bias,
                       float* __restrict__ out, int64_t n_total) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_stride() / kWarpSize;
  for (int64_t e = global_thread_index() / kWarpSize; e < rows * n_total; e += warps) {
    const int64_t m = e / n_total;
    const int64_t n = e - m * n_total;
    const uint8_t* q_row = q + m * k;
    const int8_t* w = weight + n * k;
    int32_t acc = 0;
    int32_t w_sum = 0;
    for (int64_t i = lane; i < k; i += kWarpSize) {
      acc += int32_t{q_row[i]} * int32_t{w[i]};
      w_sum += w[i];
    }
    acc = warp_reduce_sum(acc);
    w_sum = warp_reduce_sum(w_sum);
    if (lane != 0) continue;
    const QuantizedRow p = params[m];
    const float s = weight_scale[n];
    // A scale the CPU kernels would refuse (a check here would cost a synchronisation) gives NaN.
    if (!p.finite || !usable_scale(s)) {
      out[e] = __int_as_float(0x7fc00000);
      continue;
    }
    const int64_t centered = int64_t{acc} - int64_t{p.zero_point} * w_sum;
    out[e] = (p.scale * s) * static_cast<float>(centered) + (bias != nullptr ? bias[n] : 0.0f);
  }
}

// As linear_int8_kernel; each lane takes whole groups of 32 in_features (16 bytes). Scale is float
// or c10::Half (weight_scale's dtype).
template <typename Scale>
__global__ void __launch_bounds__(kThreads)
    linear_int4_kernel(const uint8_t* __restrict__ q, const QuantizedRow* __restrict__ params,
                       int64_t rows, int64_t k, const uint8_t* __restrict__ weight,
                       const Scale* __restrict__ weight_scale, int64_t group_size,
                       const float* __restrict__ bias, float* __restrict__ out, int64_t n_total) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_stride() / kWarpSize;
  const int64_t chunks = k / kInt4GroupMultiple;
  const int64_t groups = k / group_size;
  for (int64_t e = global_thread_index() / kWarpSize; e < rows * n_total; e += warps) {
    const int64_t m = e / n_total;
    const int64_t n = e - m * n_total;
    const QuantizedRow p = params[m];
    const uint8_t* q_row = q + m * k;
    const uint8_t* w = weight + n * (k / 2);
    const Scale* scales = weight_scale + n * groups;
    float total = 0.0f;
    bool scales_ok = true;
    for (int64_t c = lane; c < chunks; c += kWarpSize) {
      int32_t acc = 0;
      int32_t w_sum = 0;
      for (int64_t j = c * (kInt4GroupMultiple / 2); j < (c + 1) * (kInt4GroupMultiple / 2); ++j) {
        const int32_t low = (w[j] & 15) - 8;
        const int32_t high = (w[j] >> 4) - 8;
        acc += int32_t{q_row[2 * j]} * low + int32_t{q_row[2 * j + 1]} * high;
        w_sum += low + high;
      }
      const float s = static_cast<float>(scales[c * kInt4GroupMultiple / group_size]);
      scales_ok &= usable_scale(s);
      total += static_cast<float>(acc - p.zero_point * w_sum) * s;
    }
    total = warp_reduce_sum(total);
    scales_ok = __all_sync(0xffffffffu, scales_ok);
    if (lane != 0) continue;
    out[e] = p.finite && scales_ok ? p.scale * total + (bias != nullptr ? bias[n] : 0.0f)
                                   : __int_as_float(0x7fc00000);
  }
}

// Everything but the products, as the CPU kernels' quantized_linear: `multiply(q, params, out,
// bias, stream)` launches one of the product kernels.
template <class Multiply>
OwnedTensor quantized_linear(TensorRef x, TensorRef bias, const LinearShape& shape,
                             const Multiply& multiply) {
  const DeviceGuard device_guard(x.device_index());
  return float32_linear(x, bias, shape.out_features,
                        [&](const float* x_data, const float* bias_data, float* out_data) {
                          const cudaStream_t stream = current_stream(x.device_index());
                          const int64_t rows = shape.rows;
                          const int64_t k = shape.in_features;
                          // Scratch from torch's caching allocator, as bytes: the quantized rows,
                          // then their parameters.
                          const int64_t q_bytes = (rows * k + 15) / 16 * 16;
                          const int64_t scratch_sizes[] = {
                              q_bytes + rows * static_cast<int64_t>(sizeof(QuantizedRow))};
                          AtenTensorHandle scratch_handle;
                          const int64_t stride_one[] = {1};
                          STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(
                              1, scratch_sizes, stride_one, static_cast<int32_t>(ScalarType::Byte),
                              x.device_type(), x.device_index(), &scratch_handle));
                          const OwnedTensor scratch(scratch_handle);
                          uint8_t* q = scratch.ref().mutable_data_as<uint8_t>();
                          auto* params = reinterpret_cast<QuantizedRow*>(q + q_bytes);
                          quantize_rows_kernel<<<num_blocks_for(rows, 1), kThreads, 0, stream>>>(
                              x_data, rows, k, q, params);
                          check_kernel_launch();
                          multiply(q, params, out_data, bias_data, stream);
                          check_kernel_launch();
                        });
}

unsigned int warp_blocks(int64_t outputs) {
  return num_blocks_for(outputs, /*items_per_block=*/kThreads / kWarpSize);
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor linear_int8(TensorRef x, TensorRef weight, TensorRef weight_scale, TensorRef bias) {
  const LinearShape shape = check_linear_int8_args(x, weight, weight_scale, bias);
  const ContiguousAs w(weight);
  const ContiguousAs scales(weight_scale);
  return quantized_linear(x, bias, shape,
                          [&](const uint8_t* q, const QuantizedRow* params, float* out,
                              const float* b, cudaStream_t stream) {
                            const int64_t outputs = shape.rows * shape.out_features;
                            linear_int8_kernel<<<warp_blocks(outputs), kThreads, 0, stream>>>(
                                q, params, shape.rows, shape.in_features, w.ref().data_as<int8_t>(),
                                scales.ref().data_as<float>(), b, out, shape.out_features);
                          });
}

OwnedTensor linear_int4(TensorRef x, TensorRef weight, TensorRef weight_scale, int64_t group_size,
                        TensorRef bias) {
  const LinearShape shape = check_linear_int4_args(x, weight, weight_scale, group_size, bias);
  const ContiguousAs w(weight);
  const ContiguousAs scales(weight_scale);
  return quantized_linear(
      x, bias, shape,
      [&](const uint8_t* q, const QuantizedRow* params, float* out, const float* b,
          cudaStream_t stream) {
        const int64_t outputs = shape.rows * shape.out_features;
        const auto launch = [&](const auto* scale_data) {
          using Scale = std::remove_cv_t<
              std::remove_pointer_t<std::remove_reference_t<decltype(scale_data)>>>;
          linear_int4_kernel<Scale><<<warp_blocks(outputs), kThreads, 0, stream>>>(
              q, params, shape.rows, shape.in_features, w.ref().data_as<uint8_t>(), scale_data,
              group_size, b, out, shape.out_features);
        };
        if (scales.ref().scalar_type() == ScalarType::Half) {
          launch(scales.ref().data_as<c10::Half>());
        } else {
          launch(scales.ref().data_as<float>());
        }
      });
}

}  // namespace cuda
}  // namespace my_ops
