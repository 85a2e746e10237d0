#pragma once

// The CPU kernel's math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp): it is
// written with ATen's header-only vector library (at::vec), which the stable ABI's headers do not
// offer, and compiled into the library, so it depends on no torch release at run time.

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "ops/common/acc_type.h"

namespace my_ops::cpu_vec {

// out[i] = gelu(x[i] + bias[i % row_length]) for the flat positions i in [begin, end) of
// contiguous x and out, bias contiguous [row_length]: gelu with erf (approximate="none") or with
// its tanh approximation. For float, double, c10::Half and c10::BFloat16.
template <typename scalar_t>
void bias_gelu_erf(const scalar_t* x, const acc_type<scalar_t>* bias, scalar_t* out, int64_t begin,
                   int64_t end, int64_t row_length);
template <typename scalar_t>
void bias_gelu_tanh(const scalar_t* x, const acc_type<scalar_t>* bias, scalar_t* out, int64_t begin,
                    int64_t end, int64_t row_length);

}  // namespace my_ops::cpu_vec
