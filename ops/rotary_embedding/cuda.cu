#include <torch/headeronly/core/Dispatch_v2.h>
#include <torch/headeronly/macros/Macros.h>

#include <optional>

#include "ops/common/acc_type.h"
#include "ops/common/launch.cuh"
#include "ops/common/pack.cuh"
#include "ops/rotary_embedding/rotary_embedding.h"

namespace my_ops {
namespace {

// The rotation of one pair (a, b) by the angle whose cosine and sine are c and s, in acc_t: each
// output is rounded to scalar_t once.
template <typename scalar_t>
__device__ __forceinline__ void rotate(scalar_t a_in, scalar_t b_in, scalar_t c_in, scalar_t s_in,
                                       scalar_t& a_out, scalar_t& b_out) {
  using acc_t = acc_type<scalar_t>;
  const acc_t a = static_cast<acc_t>(a_in);
  const acc_t b = static_cast<acc_t>(b_in);
  const acc_t c = static_cast<acc_t>(c_in);
  const acc_t s = static_cast<acc_t>(s_in);
  a_out = static_cast<scalar_t>(a * c - b * s);
  b_out = static_cast<scalar_t>(b * c + a * s);
}

// Where each row finds its angles (see RotaryRows in cpu_vec.h, the CPU kernel's twin): a row's
// token is row / heads, its tables' row positions[token % period], or token % period when
// positions is null.
struct RotaryRows {
  int64_t heads;
  int64_t head_dim;
  int64_t half;
  int64_t period;
  int64_t table_rows;
  const int64_t* positions;
};

// Where pair `q` (of rows * half) lives: its row, its column among the row's pairs, the offset of
// its first member in x, and the offset of its angle in the [positions, half] tables.
struct PairIndex {
  int64_t row;
  int64_t col;
  int64_t element;
  int64_t table;

  __device__ __forceinline__ PairIndex(int64_t q, const RotaryRows& rows) {
    row = q / rows.half;
    col = q - row * rows.half;
    element = row * rows.head_dim + col;
    const int64_t token = (row / rows.heads) % rows.period;
    int64_t position = token;
    if (rows.positions != nullptr) {
      position = rows.positions[token];
      // As ATen's index kernels do: a position past the tables stops the kernel (a device-side
      // assert) instead of reading another row.
      CUDA_KERNEL_ASSERT_MSG(position >= 0 && position < rows.table_rows,
                             "rotary_embedding: a position is outside the cos/sin tables");
    }
    table = position * rows.half + col;
  }
};

// Half-split layout (NeoX/LLaMA): pair (col, col + half) of each row. kPackSize consecutive pairs
// per thread, loaded as packs from both halves and from the tables. Requires half % kPackSize == 0
// and pack-aligned pointers, so that a pack never straddles two rows or two table rows.
template <typename scalar_t, int kPackSize>
__global__ void __launch_bounds__(kThreads)
    rotary_half_split_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ cos,
                             const scalar_t* __restrict__ sin, scalar_t* __restrict__ out,
                             int64_t num_packs, const RotaryRows rows) {
  using PackT = Pack<scalar_t, kPackSize>;
  for (int64_t p = global_thread_index(); p < num_packs; p += grid_stride()) {
    const PairIndex idx(p * kPackSize, rows);
    const int64_t a_offset = idx.element;
    const PackT a = load_pack<kPackSize>(x + a_offset, /*aligned=*/true);
    const PackT b = load_pack<kPackSize>(x + a_offset + rows.half, /*aligned=*/true);
    const PackT c = load_pack<kPackSize>(cos + idx.table, /*aligned=*/true);
    const PackT s = load_pack<kPackSize>(sin + idx.table, /*aligned=*/true);
    PackT out_a;
    PackT out_b;
#pragma unroll
    for (int k = 0; k < kPackSize; ++k) {
      rotate(a.values[k], b.values[k], c.values[k], s.values[k], out_a.values[k], out_b.values[k]);
    }
    store_pack<kPackSize>(out + a_offset, out_a, /*aligned=*/true);
    store_pack<kPackSize>(out + a_offset + rows.half, out_b, /*aligned=*/true);
  }
}

// Interleaved layout (GPT-J): pair (2 col, 2 col + 1) of each row, read and written as one
// two-element pack when x and out are aligned to two elements (a contiguous x at an even storage
// offset), element by element otherwise.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    rotary_interleaved_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ cos,
                              const scalar_t* __restrict__ sin, scalar_t* __restrict__ out,
                              int64_t num_pairs, const RotaryRows rows, bool aligned) {
  using PairT = Pack<scalar_t, 2>;
  for (int64_t q = global_thread_index(); q < num_pairs; q += grid_stride()) {
    const PairIndex idx(q, rows);
    // Pair col of the row: elements (2 col, 2 col + 1) from the row's start.
    const int64_t offset = idx.row * rows.head_dim + 2 * idx.col;
    const PairT in = load_pack<2>(x + offset, aligned);
    PairT result;
    rotate(in.values[0], in.values[1], cos[idx.table], sin[idx.table], result.values[0],
           result.values[1]);
    store_pack<2>(out + offset, result, aligned);
  }
}

// Half-split layout, any head_dim and alignment: one pair per thread.
template <typename scalar_t>
__global__ void __launch_bounds__(kThreads)
    rotary_half_split_pair_kernel(const scalar_t* __restrict__ x, const scalar_t* __restrict__ cos,
                                  const scalar_t* __restrict__ sin, scalar_t* __restrict__ out,
                                  int64_t num_pairs, const RotaryRows rows) {
  for (int64_t q = global_thread_index(); q < num_pairs; q += grid_stride()) {
    const PairIndex idx(q, rows);
    const int64_t a = idx.element;
    rotate(x[a], x[a + rows.half], cos[idx.table], sin[idx.table], out[a], out[a + rows.half]);
  }
}

template <typename scalar_t>
void launch_rotary(const scalar_t* x, const scalar_t* cos, const scalar_t* sin, scalar_t* out,
                   int64_t num_pairs, const RotaryRows& rows, bool interleaved,
                   cudaStream_t stream) {
  constexpr int kPackSize = kWidestPack<scalar_t>;
  if (interleaved) {
    const bool aligned = is_pack_aligned<scalar_t>(x, 2) && is_pack_aligned<scalar_t>(out, 2);
    rotary_interleaved_kernel<scalar_t><<<num_blocks_for(num_pairs), kThreads, 0, stream>>>(
        x, cos, sin, out, num_pairs, rows, aligned);
  } else if (rows.half % kPackSize == 0 && rows.head_dim % kPackSize == 0 &&
             is_pack_aligned<scalar_t>(x, kPackSize) && is_pack_aligned<scalar_t>(cos, kPackSize) &&
             is_pack_aligned<scalar_t>(sin, kPackSize) &&
             is_pack_aligned<scalar_t>(out, kPackSize)) {
    const int64_t num_packs = num_pairs / kPackSize;
    rotary_half_split_kernel<scalar_t, kPackSize>
        <<<num_blocks_for(num_packs), kThreads, 0, stream>>>(x, cos, sin, out, num_packs, rows);
  } else {
    rotary_half_split_pair_kernel<scalar_t>
        <<<num_blocks_for(num_pairs), kThreads, 0, stream>>>(x, cos, sin, out, num_pairs, rows);
  }
  check_kernel_launch();
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor rotary_embedding(TensorRef x, TensorRef cos, TensorRef sin, TensorRef positions,
                             bool interleaved) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin, positions);
  const DeviceGuard device_guard(x.device_index());
  const ContiguousAs x_contig(x);
  const ContiguousAs cos_contig(cos);
  const ContiguousAs sin_contig(sin);
  std::optional<ContiguousAs> positions_contig;
  if (positions.defined()) positions_contig.emplace(positions);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  if (x.numel() == 0) return out;
  const int64_t num_pairs = x.numel() / shape.head_dim * shape.half;
  const cudaStream_t stream = current_stream(x.device_index());
  const RotaryRows rows{
      shape.heads,      shape.head_dim,
      shape.half,       positions_contig ? shape.position_period : shape.seq,
      shape.table_rows, positions_contig ? positions_contig->ref().data_as<int64_t>() : nullptr};
  THO_DISPATCH_V2(x.scalar_type(), "rotary_embedding_cuda", AT_WRAP([&] {
                    const scalar_t* x_data = x_contig.ref().data_as<scalar_t>();
                    scalar_t* out_data = out.ref().mutable_data_as<scalar_t>();
                    if (2 * shape.half < shape.head_dim) {
                      // A partial rotation passes the other features through: copied first,
                      // the rotated ones then overwritten.
                      check_cuda(cudaMemcpyAsync(out_data, x_data, x.numel() * sizeof(scalar_t),
                                                 cudaMemcpyDeviceToDevice, stream));
                    }
                    if (num_pairs == 0) return;
                    launch_rotary<scalar_t>(x_data, cos_contig.ref().data_as<scalar_t>(),
                                            sin_contig.ref().data_as<scalar_t>(), out_data,
                                            num_pairs, rows, interleaved, stream);
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
  return out;
}

}  // namespace cuda
}  // namespace my_ops
