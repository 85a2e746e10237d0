#pragma once

// The CPU kernel's math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp): it is
// written with ATen's header-only vector library (at::vec), which the stable ABI's headers do not
// offer, and compiled into the library, so it depends on no torch release at run time.

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "ops/common/acc_type.h"

namespace my_ops::cpu_vec {

// Rotates the rows [begin, end) of x, contiguous [..., seq, heads, 2 * half], into the same rows
// of out; cos and sin are contiguous [seq, half] of acc_type<scalar_t>. For float, double,
// c10::Half and c10::BFloat16.
template <typename scalar_t>
void rotary_embedding(const scalar_t* x, const acc_type<scalar_t>* cos,
                      const acc_type<scalar_t>* sin, scalar_t* out, int64_t begin, int64_t end,
                      int64_t seq, int64_t heads, int64_t half, bool interleaved);

}  // namespace my_ops::cpu_vec
