#include <torch/headeronly/core/Dispatch_v2.h>

#include <tuple>
#include <utility>

#include "ops/common/acc_type.h"
#include "ops/common/block_reduce.cuh"
#include "ops/common/launch.cuh"
#include "ops/common/math.cuh"
#include "ops/common/pack.cuh"
#include "ops/rms_norm/rms_norm.h"

namespace my_ops {
namespace {

// One block per row (grid-stride over rows). Each row is split where x becomes 16-byte aligned
// (RowSplit): the few head and tail elements go one per thread, the rest as packs; so an odd row
// length or an offset view keeps the packed loads for all but a handful of elements per row.
// Without a residual (kHasResidual false) h is x itself and only `out` is written: a plain RMS norm
// moves two tensors of traffic, not the five a zero residual would cost.
//
// The normalized output is computed from the acc_t (float32 for Half/BFloat16) sum h, not from h
// rounded to scalar_t, which avoids compounding two roundings. The second loop therefore
// recomputes x + residual rather than reading the rounded sum_out back; the re-read of the row is
// normally served from L2. eps arrives rounded to acc_t: see the note in cpu.cpp.
template <typename scalar_t, bool kHasResidual>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ residual,
                    const scalar_t* __restrict__ weight, scalar_t* __restrict__ out,
                    scalar_t* __restrict__ sum_out, int64_t rows, int64_t row_length,
                    acc_type<scalar_t> eps) {
  using acc_t = acc_type<scalar_t>;
  constexpr int kPackSize = kWidestPack<scalar_t>;
  using PackT = Pack<scalar_t, kPackSize>;

  // reduce_scratch holds one partial per warp of a kThreads block (hence the launch bounds).
  __shared__ acc_t reduce_scratch[kThreads / kWarpSize];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t offset = row * row_length;
    const scalar_t* x_row = x + offset;
    const scalar_t* residual_row = kHasResidual ? residual + offset : nullptr;
    scalar_t* out_row = out + offset;
    scalar_t* sum_row = kHasResidual ? sum_out + offset : nullptr;
    const RowSplit<kPackSize> split(x_row, row_length);
    const bool residual_aligned = !kHasResidual || split.packs_aligned(residual_row);
    const bool sum_aligned = !kHasResidual || split.packs_aligned(sum_row);
    const bool weight_aligned = split.packs_aligned(weight);
    const bool out_aligned = split.packs_aligned(out_row);

    const auto element_sum = [&](int64_t col) {
      acc_t h = static_cast<acc_t>(x_row[col]);
      if constexpr (kHasResidual) {
        h += static_cast<acc_t>(residual_row[col]);
      }
      return h;
    };
    // The pack at `col` of h = x (+ residual), in acc_t: both loops form it, the second
    // again rather than reading back sum_out, which is rounded to scalar_t.
    const auto pack_sum = [&](int64_t col, acc_t(&h)[kPackSize]) {
      const PackT x_pack = load_pack<kPackSize>(x_row + col, /*aligned=*/true);
      PackT residual_pack;
      if constexpr (kHasResidual) {
        residual_pack = load_pack<kPackSize>(residual_row + col, residual_aligned);
      }
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        h[k] = static_cast<acc_t>(x_pack.values[k]);
        if constexpr (kHasResidual) {
          h[k] += static_cast<acc_t>(residual_pack.values[k]);
        }
      }
    };
    const int64_t edge_col = split.edge_column(threadIdx.x, row_length);

    acc_t sum_sq = acc_t(0);
    if (edge_col >= 0) {
      const acc_t h = element_sum(edge_col);
      if constexpr (kHasResidual) {
        sum_row[edge_col] = static_cast<scalar_t>(h);
      }
      sum_sq += h * h;
    }
    for (int64_t p = threadIdx.x; p < split.num_packs; p += blockDim.x) {
      const int64_t col = split.pack_column(p);
      acc_t h[kPackSize];
      pack_sum(col, h);
      PackT sum_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        if constexpr (kHasResidual) {
          sum_pack.values[k] = static_cast<scalar_t>(h[k]);
        }
        sum_sq += h[k] * h[k];
      }
      if constexpr (kHasResidual) {
        store_pack<kPackSize>(sum_row + col, sum_pack, sum_aligned);
      }
    }
    // Every thread of the block reaches this call: the row loop bound is uniform across the block.
    sum_sq = block_reduce_sum(sum_sq, reduce_scratch);
    const acc_t inv_rms = device_rsqrt(sum_sq / static_cast<acc_t>(row_length) + eps);

    if (edge_col >= 0) {
      out_row[edge_col] = static_cast<scalar_t>(element_sum(edge_col) * inv_rms *
                                                static_cast<acc_t>(weight[edge_col]));
    }
    for (int64_t p = threadIdx.x; p < split.num_packs; p += blockDim.x) {
      const int64_t col = split.pack_column(p);
      acc_t h[kPackSize];
      pack_sum(col, h);
      const PackT weight_pack = load_pack<kPackSize>(weight + col, weight_aligned);
      PackT out_pack;
#pragma unroll
      for (int k = 0; k < kPackSize; ++k) {
        out_pack.values[k] =
            static_cast<scalar_t>(h[k] * inv_rms * static_cast<acc_t>(weight_pack.values[k]));
      }
      store_pack<kPackSize>(out_row + col, out_pack, out_aligned);
    }
  }
}

// `residual` and `sum_out` are null handles when kHasResidual is false. `x`, `residual` and
// `weight` are contiguous; `out` and `sum_out` new contiguous tensors.
template <bool kHasResidual>
void launch_rms_norm(TensorRef x, TensorRef residual, TensorRef weight, double eps, TensorRef out,
                     TensorRef sum_out) {
  const int64_t row_length = x.size(-1);
  const int64_t rows = x.numel() / row_length;
  const cudaStream_t stream = current_stream(x.device_index());
  // The body is parenthesized, not AT_WRAP'd: THO_DISPATCH_V2 hands it through one macro more
  // than ATen's AT_DISPATCH_V2, and there AT_WRAP no longer keeps its template arguments' commas
  // from splitting it.
  THO_DISPATCH_V2(x.scalar_type(), "rms_norm_cuda", ([&] {
                    using acc_t = acc_type<scalar_t>;
                    rms_norm_kernel<scalar_t, kHasResidual>
                        <<<num_blocks_for(rows, /*items_per_block=*/1), kThreads, 0, stream>>>(
                            x.data_as<scalar_t>(),
                            kHasResidual ? residual.data_as<scalar_t>() : nullptr,
                            weight.data_as<scalar_t>(), out.mutable_data_as<scalar_t>(),
                            kHasResidual ? sum_out.mutable_data_as<scalar_t>() : nullptr, rows,
                            row_length, static_cast<acc_t>(eps));
                    check_kernel_launch();
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor rms_norm(TensorRef x, TensorRef weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  const DeviceGuard device_guard(x.device_index());
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  if (x.numel() != 0) {
    launch_rms_norm</*kHasResidual=*/false>(ContiguousAs(x), TensorRef(nullptr),
                                            ContiguousAs(weight), eps, out, TensorRef(nullptr));
  }
  return out;
}

std::tuple<OwnedTensor, OwnedTensor> fused_add_rms_norm(TensorRef x, TensorRef residual,
                                                        TensorRef weight, double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps);
  const DeviceGuard device_guard(x.device_index());
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  OwnedTensor sum_out = empty_like_with_sizes(x, x.sizes());
  if (x.numel() != 0) {
    launch_rms_norm</*kHasResidual=*/true>(ContiguousAs(x), ContiguousAs(residual),
                                           ContiguousAs(weight), eps, out, sum_out);
  }
  return {std::move(out), std::move(sum_out)};
}

// Computed out of place and copied into x and residual: the kernel above reads x and residual
// again after it wrote h (its second loop recomputes the unrounded sum), so it cannot write them.
void fused_add_rms_norm_(TensorRef x, TensorRef residual, TensorRef weight, double eps) {
  check_fused_add_rms_norm_in_place_args(x, residual, weight, eps);
  if (x.numel() == 0) return;
  auto [out, sum_out] = fused_add_rms_norm(x, residual, weight, eps);
  const DeviceGuard device_guard(x.device_index());
  copy_into(x, std::move(out));
  copy_into(residual, std::move(sum_out));
}

}  // namespace cuda
}  // namespace my_ops
