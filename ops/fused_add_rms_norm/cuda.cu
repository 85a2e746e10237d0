#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <tuple>

#include "ops/common/block_reduce.cuh"
#include "ops/common/launch.cuh"
#include "ops/common/math.cuh"
#include "ops/common/pack.cuh"
#include "ops/fused_add_rms_norm/fused_add_rms_norm.h"

namespace my_ops {
namespace {

// One block per row (grid-stride over rows), kPackSize elements per memory access. Requires
// row_length % kPackSize == 0 and pack-aligned pointers, so every row starts on a pack boundary.
// Must be launched with kThreads threads.
//
// The normalized output is computed from the acc_t (float32 for Half/BFloat16) sum h, not from h
// rounded to scalar_t, which avoids compounding two roundings. The second loop therefore
// recomputes x + residual rather than reading the rounded sum_out back; the re-read of the row is
// normally served from L2.
template <typename scalar_t, int kPackSize>
__global__ void add_rms_norm_kernel(const scalar_t* __restrict__ x,
                                    const scalar_t* __restrict__ residual,
                                    const scalar_t* __restrict__ weight, scalar_t* __restrict__ out,
                                    scalar_t* __restrict__ sum_out, int64_t rows,
                                    int64_t row_length, at::opmath_type<scalar_t> eps) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;
  const PackT* x_packs = reinterpret_cast<const PackT*>(x);
  const PackT* residual_packs = reinterpret_cast<const PackT*>(residual);
  const PackT* weight_packs = reinterpret_cast<const PackT*>(weight);
  PackT* out_packs = reinterpret_cast<PackT*>(out);
  PackT* sum_packs = reinterpret_cast<PackT*>(sum_out);
  const int64_t packs_per_row = row_length / kPackSize;

  __shared__ acc_t reduce_scratch[kThreads / kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t row_offset = row * packs_per_row;
    acc_t sum_sq = acc_t(0);
    for (int64_t j = threadIdx.x; j < packs_per_row; j += blockDim.x) {
      const PackT x_pack = x_packs[row_offset + j];
      const PackT residual_pack = residual_packs[row_offset + j];
      PackT sum_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        const acc_t h =
            static_cast<acc_t>(x_pack.values[k]) + static_cast<acc_t>(residual_pack.values[k]);
        sum_pack.values[k] = static_cast<scalar_t>(h);
        sum_sq += h * h;
      }
      sum_packs[row_offset + j] = sum_pack;
    }
    // Every thread of the block reaches this call: the row loop bound is uniform across the block.
    sum_sq = block_reduce_sum(sum_sq, reduce_scratch);
    const acc_t inv_rms = device_rsqrt(sum_sq / static_cast<acc_t>(row_length) + eps);
    for (int64_t j = threadIdx.x; j < packs_per_row; j += blockDim.x) {
      const PackT x_pack = x_packs[row_offset + j];
      const PackT residual_pack = residual_packs[row_offset + j];
      const PackT weight_pack = weight_packs[j];
      PackT out_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        const acc_t h =
            static_cast<acc_t>(x_pack.values[k]) + static_cast<acc_t>(residual_pack.values[k]);
        out_pack.values[k] =
            static_cast<scalar_t>(h * inv_rms * static_cast<acc_t>(weight_pack.values[k]));
      }
      out_packs[row_offset + j] = out_pack;
    }
  }
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_cuda(const at::Tensor& x,
                                                           const at::Tensor& residual,
                                                           const at::Tensor& weight, double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor x_contig = x.contiguous();
  const at::Tensor residual_contig = residual.contiguous();
  const at::Tensor weight_contig = weight.contiguous();
  const auto out_options = x.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor out = at::empty(x.sizes(), out_options);
  at::Tensor sum_out = at::empty(x.sizes(), out_options);
  if (x.numel() == 0) {
    return {out, sum_out};
  }
  const int64_t row_length = x.size(-1);
  const int64_t rows = x.numel() / row_length;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "fused_add_rms_norm_cuda",
      [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* x_data = x_contig.const_data_ptr<scalar_t>();
        const scalar_t* residual_data = residual_contig.const_data_ptr<scalar_t>();
        const scalar_t* weight_data = weight_contig.const_data_ptr<scalar_t>();
        scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
        scalar_t* sum_data = sum_out.mutable_data_ptr<scalar_t>();
        const acc_t acc_eps = static_cast<acc_t>(eps);
        const unsigned int blocks = num_blocks_for(rows, /*items_per_block=*/1);
        constexpr int kPackSize = kWidestPack<scalar_t>;
        const bool packable = row_length % kPackSize == 0 &&
                              is_pack_aligned<scalar_t>(x_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(residual_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(weight_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(out_data, kPackSize) &&
                              is_pack_aligned<scalar_t>(sum_data, kPackSize);
        if (packable) {
          add_rms_norm_kernel<scalar_t, kPackSize><<<blocks, kThreads, 0, stream>>>(
              x_data, residual_data, weight_data, out_data, sum_data, rows, row_length, acc_eps);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        } else {
          add_rms_norm_kernel<scalar_t, 1><<<blocks, kThreads, 0, stream>>>(
              x_data, residual_data, weight_data, out_data, sum_data, rows, row_length, acc_eps);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
      });
  return {out, sum_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) { m.impl("fused_add_rms_norm", &fused_add_rms_norm_cuda); }

}  // namespace my_ops
