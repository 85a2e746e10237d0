#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "ops/common/launch.cuh"
#include "ops/common/pack.cuh"
#include "ops/silu_and_mul/silu_and_mul.h"

namespace my_ops {
namespace {

// Precision-matched exp: float code must not promote to the slow double path.
__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

// out[r, c] = silu(x[r, c]) * x[r, d + c] over contiguous x, kPackSize outputs at a time. Requires
// d % kPackSize == 0 and pack-aligned pointers, so a pack never straddles the two halves or two
// rows. silu(a) stays in acc_t until the product is rounded once.
template <typename scalar_t, int kPackSize>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                        int64_t num_packs, int64_t packs_per_row) {
  using acc_t = at::opmath_type<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;
  const PackT* x_packs = reinterpret_cast<const PackT*>(x);
  PackT* out_packs = reinterpret_cast<PackT*>(out);
  for (int64_t p = global_thread_index(); p < num_packs; p += grid_stride()) {
    const int64_t row = p / packs_per_row;
    const int64_t col = p - row * packs_per_row;
    const PackT a_pack = x_packs[row * 2 * packs_per_row + col];
    const PackT b_pack = x_packs[(row * 2 + 1) * packs_per_row + col];
    PackT out_pack;
#pragma unroll
    for (int k = 0; k < kPackSize; ++k) {
      const acc_t a = static_cast<acc_t>(a_pack.values[k]);
      const acc_t b = static_cast<acc_t>(b_pack.values[k]);
      out_pack.values[k] = static_cast<scalar_t>(a / (acc_t(1) + exp_of(-a)) * b);
    }
    out_packs[p] = out_pack;
  }
}

template <typename scalar_t, int kPackSize>
void launch_silu_and_mul(const scalar_t* x, scalar_t* out, int64_t numel_out, int64_t d,
                         cudaStream_t stream) {
  const int64_t num_packs = numel_out / kPackSize;
  silu_and_mul_kernel<scalar_t, kPackSize>
      <<<num_blocks_for(num_packs), kThreads, 0, stream>>>(x, out, num_packs, d / kPackSize);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor silu_and_mul_cuda(const at::Tensor& x) {
  const std::vector<int64_t> out_sizes = check_silu_and_mul_args(x);
  const c10::cuda::CUDAGuard device_guard(x.device());
  const at::Tensor x_contig = x.contiguous();
  at::Tensor out = at::empty(out_sizes, x.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t numel_out = out.numel();
  if (numel_out == 0) {
    return out;
  }
  const int64_t d = out.size(-1);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "silu_and_mul_cuda", [&] {
        const scalar_t* x_data = x_contig.const_data_ptr<scalar_t>();
        scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
        constexpr int kPackSize = kWidestPack<scalar_t>;
        if (d % kPackSize == 0 && is_pack_aligned<scalar_t>(x_data, kPackSize) &&
            is_pack_aligned<scalar_t>(out_data, kPackSize)) {
          launch_silu_and_mul<scalar_t, kPackSize>(x_data, out_data, numel_out, d, stream);
        } else {
          launch_silu_and_mul<scalar_t, 1>(x_data, out_data, numel_out, d, stream);
        }
      });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, CUDA, m) { m.impl("silu_and_mul", &silu_and_mul_cuda); }

}  // namespace my_ops
