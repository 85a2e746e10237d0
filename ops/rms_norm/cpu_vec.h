#pragma once

// The CPU kernel's math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp): it is
// written with ATen's header-only vector library (at::vec), which the stable ABI's headers do not
// offer, and compiled into the library, so it depends on no torch release at run time.

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <cstdint>

#include "ops/common/acc_type.h"

namespace my_ops::cpu_vec {

// out[r, :] = x[r, :] / rms(x[r, :]) * weight for the rows r in [begin, end) of contiguous
// [rows, n] x and out, rms(h) = sqrt(mean(h * h) + eps). For float, double, c10::Half and
// c10::BFloat16.
template <typename scalar_t>
void rms_norm(const scalar_t* x, const acc_type<scalar_t>* weight, scalar_t* out, int64_t begin,
              int64_t end, int64_t n, acc_type<scalar_t> eps);

// rms_norm of h = x + residual, rows [begin, end), with h (rounded to scalar_t) also written to
// sum_out; every array contiguous [rows, n].
template <typename scalar_t>
void fused_add_rms_norm(const scalar_t* x, const scalar_t* residual,
                        const acc_type<scalar_t>* weight, scalar_t* out, scalar_t* sum_out,
                        int64_t begin, int64_t end, int64_t n, acc_type<scalar_t> eps);

// fused_add_rms_norm in place (fused_add_rms_norm_): x becomes the normalized rows and residual
// h, rows [begin, end) of contiguous [rows, n] x and residual, which share no memory. The results
// are those of fused_add_rms_norm, bit for bit.
template <typename scalar_t>
void fused_add_rms_norm_in_place(scalar_t* x, scalar_t* residual, const acc_type<scalar_t>* weight,
                                 int64_t begin, int64_t end, int64_t n, acc_type<scalar_t> eps);

}  // namespace my_ops::cpu_vec
