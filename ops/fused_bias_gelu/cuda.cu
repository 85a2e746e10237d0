#include <torch/headeronly/core/Dispatch_v2.h>

#include <cmath>
#include <string_view>

#include "ops/common/acc_type.h"
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

template <typename scalar_t, GeluApproximation kApprox>
__device__ __forceinline__ scalar_t bias_gelu(scalar_t x, scalar_t bias) {
  using acc_t = acc_type<scalar_t>;
  // x + bias is formed in acc_t and never rounded to scalar_t before the gelu.
  return static_cast<scalar_t>(gelu<kApprox>(static_cast<acc_t>(x) + static_cast<acc_t>(bias)));
}

// The fast path: out[i] = gelu(x[i] + bias[i % row_length]) over contiguous x as one flat range of
// packs. Requires row_length % kPackSize == 0 and pack-aligned pointers, so a pack never straddles
// two rows and the matching bias elements form a pack too; rows of any length stay cheap.
template <typename scalar_t, GeluApproximation kApprox>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_flat_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                          scalar_t* __restrict__ out, int64_t num_packs, int64_t packs_per_row) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
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
      out_pack.values[k] = bias_gelu<scalar_t, kApprox>(x_pack.values[k], bias_pack.values[k]);
    }
    out_packs[p] = out_pack;
    col += col_step;
    if (col >= packs_per_row) {
      col -= packs_per_row;
    }
  }
}

// Any row length and alignment: one warp per row (grid-stride over rows). Each row is split where
// x becomes 16-byte aligned (RowSplit); head and tail elements go one per lane, the rest as packs,
// with bias and out packed too wherever they are aligned at the same column.
template <typename scalar_t, GeluApproximation kApprox>
__global__ void __launch_bounds__(kThreads)
    bias_gelu_row_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ bias,
                         scalar_t* __restrict__ out, int64_t rows, int64_t row_length) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_stride() / kWarpSize;
  for (int64_t row = global_thread_index() / kWarpSize; row < rows; row += warps) {
    const scalar_t* x_row = x + row * row_length;
    scalar_t* out_row = out + row * row_length;
    const RowSplit<kPackSize> split(x_row, row_length);
    const bool bias_aligned = split.packs_aligned(bias);
    const bool out_aligned = split.packs_aligned(out_row);
    const int64_t edge_col = split.edge_column(lane, row_length);
    if (edge_col >= 0) {
      out_row[edge_col] = bias_gelu<scalar_t, kApprox>(x_row[edge_col], bias[edge_col]);
    }
    for (int64_t p = lane; p < split.num_packs; p += kWarpSize) {
      const int64_t col = split.pack_column(p);
      const PackT x_pack = load_pack<kPackSize>(x_row + col, /*aligned=*/true);
      const PackT bias_pack = load_pack<kPackSize>(bias + col, bias_aligned);
      PackT out_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        out_pack.values[k] = bias_gelu<scalar_t, kApprox>(x_pack.values[k], bias_pack.values[k]);
      }
      store_pack<kPackSize>(out_row + col, out_pack, out_aligned);
    }
  }
}

template <typename scalar_t, GeluApproximation kApprox>
void launch_bias_gelu(const scalar_t* x, const scalar_t* bias, scalar_t* out, int64_t numel,
                      int64_t row_length, cudaStream_t stream) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
  const bool flat = row_length % kPackSize == 0 && is_pack_aligned<scalar_t>(x, kPackSize) &&
                    is_pack_aligned<scalar_t>(bias, kPackSize) &&
                    is_pack_aligned<scalar_t>(out, kPackSize);
  if (flat) {
    const int64_t num_packs = numel / kPackSize;
    bias_gelu_flat_kernel<scalar_t, kApprox><<<num_blocks_for(num_packs), kThreads, 0, stream>>>(
        x, bias, out, num_packs, row_length / kPackSize);
  } else {
    const int64_t rows = numel / row_length;
    bias_gelu_row_kernel<scalar_t, kApprox>
        <<<num_blocks_for(rows, /*items_per_block=*/kThreads / kWarpSize), kThreads, 0, stream>>>(
            x, bias, out, rows, row_length);
  }
  check_kernel_launch();
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor fused_bias_gelu(TensorRef x, TensorRef bias, std::string_view approximate) {
  const GeluApproximation approx = check_fused_bias_gelu_args(x, bias, approximate);
  const DeviceGuard device_guard(x.device_index());
  const ContiguousAs x_contig(x);
  const ContiguousAs bias_contig(bias);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  const int64_t numel = x.numel();
  if (numel == 0) {
    return out;
  }
  const int64_t row_length = x.size(-1);
  const cudaStream_t stream = current_stream(x.device_index());
  // The body is parenthesized, not AT_WRAP'd: THO_DISPATCH_V2 hands it through one macro more
  // than ATen's AT_DISPATCH_V2, and there AT_WRAP no longer keeps its template arguments' commas
  // from splitting it.
  THO_DISPATCH_V2(x.scalar_type(), "fused_bias_gelu_cuda", ([&] {
                    const scalar_t* x_data = x_contig.ref().data_as<scalar_t>();
                    const scalar_t* bias_data = bias_contig.ref().data_as<scalar_t>();
                    scalar_t* out_data = out.ref().mutable_data_as<scalar_t>();
                    if (approx == GeluApproximation::kNone) {
                      launch_bias_gelu<scalar_t, GeluApproximation::kNone>(
                          x_data, bias_data, out_data, numel, row_length, stream);
                    } else {
                      launch_bias_gelu<scalar_t, GeluApproximation::kTanh>(
                          x_data, bias_data, out_data, numel, row_length, stream);
                    }
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
  return out;
}

}  // namespace cuda
}  // namespace my_ops
