#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>

#include "ops/common/launch.cuh"
#include "ops/common/math.cuh"
#include "ops/common/pack.cuh"
#include "ops/fused_bias_gelu/fused_bias_gelu.h"

namespace my_ops {
namespace {

template <GeluApproximation kApprox, typename acc_t>
__device__ __forceinline__ acc_t gelu(acc_t v) {
  if constexpr (kApprox == GeluApproximation::kNone) {
    return acc_t(0.5) * v * (acc_t(1) + device_erf(v * acc_t(M_SQRT1_2)));
  } else {
    const acc_t kSqrt2OverPi = acc_t(M_SQRT2 * M_2_SQRTPI * 0.5);
    const acc_t kKappa = acc_t(0.044715);
    const acc_t inner = kSqrt2OverPi * (v + kKappa * v * v * v);
    return acc_t(0.5) * v * (acc_t(1) + device_tanh(inner));
  }
}

// out[i] = gelu(x[i] + bias[i % row_length]) over contiguous x, kPackSize elements at a time.
// Requires row_length % kPackSize == 0 and pack-aligned pointers, so a pack never straddles two
// rows and the matching bias elements form a pack too. x + bias is formed in acc_t and never
// rounded to scalar_t before the gelu.
template <typename scalar_t, int kPackSize, GeluApproximation kApprox>
__global__ void bias_gelu_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                                 scalar_t* __restrict__ out, int64_t num_packs,
                                 int64_t packs_per_row) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;
  const PackT* x_packs = reinterpret_cast<const PackT*>(x);
  const PackT* bias_packs = reinterpret_cast<const PackT*>(bias);
  PackT* out_packs = reinterpret_cast<PackT*>(out);

  const int64_t stride = grid_stride();
  int64_t p = global_thread_index();
  // The bias column is advanced incrementally instead of recomputing p % packs_per_row per pack:
  // both terms are below packs_per_row, so one conditional subtraction keeps it in range.
  const int64_t col_step = stride % packs_per_row;
  int64_t col = p % packs_per_row;
  for (; p < num_packs; p += stride) {
    const PackT x_pack = x_packs[p];
    const PackT bias_pack = bias_packs[col];
    PackT out_pack;
#pragma unroll
    for (int k = 0; k < kPackSize; ++k) {
      const acc_t v =
          static_cast<acc_t>(x_pack.values[k]) + static_cast<acc_t>(bias_pack.values[k]);
      out_pack.values[k] = static_cast<scalar_t>(gelu<kApprox>(v));
    }
    out_packs[p] = out_pack;
    col += col_step;
    if (col >= packs_per_row) {
      col -= packs_per_row;
    }
  }
}

template <typename scalar_t, int kPackSize>
void launch_bias_gelu(const scalar_t* x, const scalar_t* bias, scalar_t* out, int64_t numel,
                      int64_t row_length, GeluApproximation approx, cudaStream_t stream) {
  const int64_t num_packs = numel / kPackSize;
  const int64_t packs_per_row = row_length / kPackSize;
  const unsigned int blocks = num_blocks_for(num_packs);
  if (approx == GeluApproximation::kNone) {
    bias_gelu_kernel<scalar_t, kPackSize, GeluApproximation::kNone>
        <<<blocks, kThreads, 0, stream>>>(x, bias, out, num_packs, packs_per_row);
  } else {
    bias_gelu_kernel<scalar_t, kPackSize, GeluApproximation::kTanh>
        <<<blocks, kThreads, 0, stream>>>(x, bias, out, num_packs, packs_per_row);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor fused_bias_gelu_cuda(const at::Tensor& x, const at::Tensor& bias,
                                c10::string_view approximate) {
  const GeluApproximation approx = check_fused_bias_gelu_args(x, bias, approximate);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor x_contig = x.contiguous();
  const at::Tensor bias_contig = bias.contiguous();
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t numel = x.numel();
  if (numel == 0) {
    return out;
  }
  const int64_t row_length = x.size(-1);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "fused_bias_gelu_cuda", [&] {
        const scalar_t* x_data = x_contig.const_data_ptr<scalar_t>();
        const scalar_t* bias_data = bias_contig.const_data_ptr<scalar_t>();
        scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
        constexpr int kPackSize = kWidestPack<scalar_t>;
        const bool packable = row_length % kPackSize == 0 &&
                              is_pack_aligned<scalar_t>(x_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(bias_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(out_data, kPackSize);
        if (packable) {
          launch_bias_gelu<scalar_t, kPackSize>(x_data, bias_data, out_data, numel, row_length,
                                                approx, stream);
        } else {
          launch_bias_gelu<scalar_t, 1>(x_data, bias_data, out_data, numel, row_length, approx,
                                        stream);
        }
      });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) { m.impl("fused_bias_gelu", &fused_bias_gelu_cuda); }

}  // namespace my_ops
