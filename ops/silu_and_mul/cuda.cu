#include <torch/headeronly/core/Dispatch_v2.h>

#include "ops/common/acc_type.h"
#include "ops/common/launch.cuh"
#include "ops/common/pack.cuh"
#include "ops/silu_and_mul/silu_and_mul.h"

namespace my_ops {
namespace {

// Precision-matched exp: float code must not promote to the slow double path.
__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

template <typename scalar_t>
__device__ __forceinline__ scalar_t silu_mul(scalar_t a_in, scalar_t b_in) {
  using acc_t = acc_type<scalar_t>;
  // silu(a) stays in acc_t until the product is rounded once.
  const acc_t a = static_cast<acc_t>(a_in);
  return static_cast<scalar_t>(a / (acc_t(1) + exp_of(-a)) * static_cast<acc_t>(b_in));
}

// The fast path: out[r, c] = silu(x[r, c]) * x[r, d + c] over contiguous x as one flat range of
// output packs. Requires d % kPackSize == 0 and pack-aligned pointers, so a pack never straddles
// the two halves or two rows.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_flat_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                             int64_t num_packs, int64_t packs_per_row) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
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
      out_pack.values[k] = silu_mul(a_pack.values[k], b_pack.values[k]);
    }
    out_packs[p] = out_pack;
  }
}

// Any d and alignment: one warp per row (grid-stride over rows). Each row is split where its first
// half becomes 16-byte aligned (RowSplit); head and tail elements go one per lane, the rest as
// packs, with the second half and out packed too wherever they are aligned at the same column.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_row_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                            int64_t rows, int64_t d) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_stride() / kWarpSize;
  for (int64_t row = global_thread_index() / kWarpSize; row < rows; row += warps) {
    const scalar_t* a_row = x + row * 2 * d;
    const scalar_t* b_row = a_row + d;
    scalar_t* out_row = out + row * d;
    const RowSplit<kPackSize> split(a_row, d);
    const bool b_aligned = split.packs_aligned(b_row);
    const bool out_aligned = split.packs_aligned(out_row);
    const int64_t edge_col = split.edge_column(lane, d);
    if (edge_col >= 0) {
      out_row[edge_col] = silu_mul(a_row[edge_col], b_row[edge_col]);
    }
    for (int64_t p = lane; p < split.num_packs; p += kWarpSize) {
      const int64_t col = split.pack_column(p);
      const PackT a_pack = load_pack<kPackSize>(a_row + col, /*aligned=*/true);
      const PackT b_pack = load_pack<kPackSize>(b_row + col, b_aligned);
      PackT out_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        out_pack.values[k] = silu_mul(a_pack.values[k], b_pack.values[k]);
      }
      store_pack<kPackSize>(out_row + col, out_pack, out_aligned);
    }
  }
}

template <typename scalar_t>
void launch_silu_and_mul(const scalar_t* x, scalar_t* out, int64_t numel_out, int64_t d,
                         cudaStream_t stream) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
  if (d % kPackSize == 0 && is_pack_aligned<scalar_t>(x, kPackSize) &&
      is_pack_aligned<scalar_t>(out, kPackSize)) {
    const int64_t num_packs = numel_out / kPackSize;
    silu_and_mul_flat_kernel<scalar_t>
        <<<num_blocks_for(num_packs), kThreads, 0, stream>>>(x, out, num_packs, d / kPackSize);
  } else {
    const int64_t rows = numel_out / d;
    silu_and_mul_row_kernel<scalar_t>
        <<<num_blocks_for(rows, /*items_per_block=*/kThreads / kWarpSize), kThreads, 0, stream>>>(
            x, out, rows, d);
  }
  check_kernel_launch();
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor silu_and_mul(TensorRef x) {
  const Sizes out_sizes = check_silu_and_mul_args(x);
  const DeviceGuard device_guard(x.device_index());
  const ContiguousAs x_contig(x);
  OwnedTensor out = empty_like_with_sizes(x, out_sizes);
  const int64_t numel_out = out.ref().numel();
  if (numel_out == 0) {
    return out;
  }
  const int64_t d = out.ref().size(-1);
  const cudaStream_t stream = current_stream(x.device_index());
  THO_DISPATCH_V2(x.scalar_type(), "silu_and_mul_cuda", AT_WRAP([&] {
                    const scalar_t* x_data = x_contig.ref().data_as<scalar_t>();
                    scalar_t* out_data = out.ref().mutable_data_as<scalar_t>();
                    launch_silu_and_mul<scalar_t>(x_data, out_data, numel_out, d, stream);
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
  return out;
}

}  // namespace cuda
}  // namespace my_ops
