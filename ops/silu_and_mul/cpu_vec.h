#pragma once

// The CPU kernel's math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp): it is
// written with ATen's header-only vector library (at::vec), which the stable ABI's headers do not
// offer, and compiled into the library, so it depends on no torch release at run time.

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

namespace my_ops::cpu_vec {

// out[i] = silu(x[r, c]) * x[r, d + c] for the flat output positions i = r * d + c in
// [begin, end), x contiguous [rows, 2d]. For float, double, c10::Half and c10::BFloat16.
template <typename scalar_t>
void silu_and_mul(const scalar_t* x, scalar_t* out, int64_t begin, int64_t end, int64_t d);

}  // namespace my_ops::cpu_vec
