#pragma once

// Fixed-size groups of elements moved with one 16-byte memory instruction.
//
// Kernels that walk rows split each row where its first operand (x) becomes pack-aligned: a head
// of fewer than kPackSize elements, whole packs, and a tail. The other operands of the same row
// are read and written as packs when they are aligned at the same column, which holds whenever
// their row offsets match x's modulo 16 bytes (the usual case), and element by element otherwise.
// So an odd row length or a view at an odd offset costs a few scalar accesses per row instead of
// sending the whole tensor down a one-element path.

#include <cstdint>

namespace my_ops {

constexpr int kMaxPackBytes = 16;

template <typename scalar_t, int kPackSize>
struct alignas(sizeof(scalar_t) * kPackSize) Pack {
  scalar_t values[kPackSize];
};

template <typename scalar_t>
constexpr int kWidestPack = kMaxPackBytes / sizeof(scalar_t);

// Whether a pointer can be read as Pack<scalar_t, pack_size>.
template <typename scalar_t>
__host__ __device__ __forceinline__ bool is_pack_aligned(const void* ptr, int pack_size) {
  return reinterpret_cast<std::uintptr_t>(ptr) % (sizeof(scalar_t) * pack_size) == 0;
}

// How many elements precede the first pack-aligned one at or after `ptr` (tensor data pointers
// are aligned to their element size, so this is exact).
template <typename scalar_t, int kPackSize>
__device__ __forceinline__ int64_t elements_to_pack_alignment(const scalar_t* ptr) {
  constexpr std::uintptr_t kBytes = sizeof(scalar_t) * kPackSize;
  const std::uintptr_t misalignment = reinterpret_cast<std::uintptr_t>(ptr) % kBytes;
  return misalignment == 0 ? 0 : static_cast<int64_t>((kBytes - misalignment) / sizeof(scalar_t));
}

// One pack from `ptr`: a single 16-byte load when `aligned`, else kPackSize element loads. The
// flag is uniform across a row, so the branch does not diverge within a warp.
template <int kPackSize, typename scalar_t>
__device__ __forceinline__ Pack<scalar_t, kPackSize> load_pack(const scalar_t* ptr, bool aligned) {
  using PackT = Pack<scalar_t, kPackSize>;
  if (aligned) {
    return *reinterpret_cast<const PackT*>(ptr);
  }
  PackT pack;
#pragma unroll
  for (int k = 0; k < kPackSize; ++k) {
    pack.values[k] = ptr[k];
  }
  return pack;
}

template <int kPackSize, typename scalar_t>
__device__ __forceinline__ void store_pack(scalar_t* ptr, const Pack<scalar_t, kPackSize>& pack,
                                           bool aligned) {
  if (aligned) {
    *reinterpret_cast<Pack<scalar_t, kPackSize>*>(ptr) = pack;
    return;
  }
#pragma unroll
  for (int k = 0; k < kPackSize; ++k) {
    ptr[k] = pack.values[k];
  }
}

// A row of `length` elements split where `anchor` (the row's first operand) becomes pack-aligned:
// [0, head) and [tail_begin, length) go element by element, [head, tail_begin) as whole packs.
template <int kPackSize>
struct RowSplit {
  int64_t head;
  int64_t num_packs;
  int64_t tail_begin;

  template <typename scalar_t>
  __device__ __forceinline__ RowSplit(const scalar_t* anchor, int64_t length) {
    const int64_t to_alignment = elements_to_pack_alignment<scalar_t, kPackSize>(anchor);
    head = to_alignment < length ? to_alignment : length;
    num_packs = (length - head) / kPackSize;
    tail_begin = head + num_packs * kPackSize;
  }

  // The head or tail column that the `t`-th thread of a row handles, or -1: head and tail are
  // each shorter than a pack, so one element per thread covers both.
  __device__ __forceinline__ int64_t edge_column(int64_t t, int64_t length) const {
    if (t < head) {
      return t;
    }
    const int64_t tail_col = tail_begin + (t - head);
    return tail_col < length ? tail_col : -1;
  }

  // The column of pack `p`.
  __device__ __forceinline__ int64_t pack_column(int64_t p) const { return head + p * kPackSize; }

  // Whether `ptr` (another operand's row start) is aligned where the packs begin.
  template <typename scalar_t>
  __device__ __forceinline__ bool packs_aligned(const scalar_t* ptr) const {
    return is_pack_aligned<scalar_t>(ptr + head, kPackSize);
  }
};

}  // namespace my_ops
