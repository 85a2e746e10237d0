#pragma once

// The CPU kernel's math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp): it is
// written with ATen's header-only vector library (at::vec), which the stable ABI's headers do not
// offer, and compiled into the library, so it depends on no torch release at run time.

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "ops/common/acc_type.h"

namespace my_ops::cpu_vec {

// Where each row of x finds its angles: x is contiguous [..., seq, heads, head_dim], its first
// 2 * half features rotated, the rest copied; a row's token is row / heads, and the token's row of
// the [positions, half] tables is positions[token % period], or token % period (period = seq)
// when positions is null.
struct RotaryRows {
  int64_t heads;
  int64_t head_dim;
  int64_t half;
  int64_t period;
  const int64_t* positions;  // nullable; every value already checked against the tables
};

// Rotates the rows [begin, end) of x into the same rows of out; cos and sin are contiguous
// [positions, half] of acc_type<scalar_t>. For float, double, c10::Half and c10::BFloat16.
template <typename scalar_t>
void rotary_embedding(const scalar_t* x, const acc_type<scalar_t>* cos,
                      const acc_type<scalar_t>* sin, scalar_t* out, int64_t begin, int64_t end,
                      const RotaryRows& rows, bool interleaved);

}  // namespace my_ops::cpu_vec
