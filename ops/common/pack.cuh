#pragma once

// Fixed-size groups of elements moved with one 16-byte memory instruction. Kernels are written
// against a Pack<scalar_t, kPackSize> and instantiated twice: with the widest pack the data allows,
// and with kPackSize = 1 as the fallback for unaligned or oddly sized inputs, so both paths share
// one body.

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
bool is_pack_aligned(const void* ptr, int pack_size) {
  return reinterpret_cast<std::uintptr_t>(ptr) % (sizeof(scalar_t) * pack_size) == 0;
}

}  // namespace my_ops
