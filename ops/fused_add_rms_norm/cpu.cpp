#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "ops/fused_add_rms_norm/fused_add_rms_norm.h"

namespace my_ops {
namespace {

using at::vec::Vectorized;

// Normalizes one row. The row is first summed (x + residual) and written out while the sum of
// squares accumulates; the second loop re-reads only this row, which is still in cache, so memory
// is streamed once.
//
// The normalized output is computed from the float32 sum h, not from h rounded to the input dtype:
// for Half/BFloat16 that avoids compounding the rounding of h with the rounding of the output.
// For float/double the stored sum is already exact, so the second loop reads it back instead of
// adding again; for reduced precision it recomputes x + residual in float.
template <typename scalar_t>
void add_rms_norm_row(const scalar_t* x, const scalar_t* residual,
                      const at::opmath_type<scalar_t>* weight, scalar_t* out, scalar_t* sum_out,
                      int64_t n, at::opmath_type<scalar_t> eps) {
  using acc_t = at::opmath_type<scalar_t>;
  using Vec = Vectorized<scalar_t>;
  using AccVec = Vectorized<acc_t>;
  constexpr bool kSameType = std::is_same_v<scalar_t, acc_t>;
  constexpr int64_t kWidth = Vec::size();

  // A widened Half/BFloat16 vector arrives as two float halves, each with its own accumulator.
  AccVec sum_sq_lo(acc_t(0));
  AccVec sum_sq_hi(acc_t(0));
  int64_t j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    if constexpr (kSameType) {
      const Vec h = Vec::loadu(x + j) + Vec::loadu(residual + j);
      h.store(sum_out + j);
      sum_sq_lo = at::vec::fmadd(h, h, sum_sq_lo);
    } else {
      auto [x_lo, x_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(x + j));
      auto [r_lo, r_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(residual + j));
      const AccVec h_lo = x_lo + r_lo;
      const AccVec h_hi = x_hi + r_hi;
      at::vec::convert_from_float<scalar_t>(h_lo, h_hi).store(sum_out + j);
      sum_sq_lo = at::vec::fmadd(h_lo, h_lo, sum_sq_lo);
      sum_sq_hi = at::vec::fmadd(h_hi, h_hi, sum_sq_hi);
    }
  }
  acc_t sum_sq = at::vec::vec_reduce_all<acc_t>([](AccVec& a, AccVec& b) { return a + b; },
                                                sum_sq_lo + sum_sq_hi);
  for (int64_t k = j; k < n; ++k) {
    const acc_t h = static_cast<acc_t>(x[k]) + static_cast<acc_t>(residual[k]);
    sum_out[k] = static_cast<scalar_t>(h);
    sum_sq += h * h;
  }

  const acc_t inv_rms = acc_t(1) / std::sqrt(sum_sq / static_cast<acc_t>(n) + eps);
  const AccVec inv_rms_vec(inv_rms);
  j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    if constexpr (kSameType) {
      (Vec::loadu(sum_out + j) * inv_rms_vec * Vec::loadu(weight + j)).store(out + j);
    } else {
      auto [x_lo, x_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(x + j));
      auto [r_lo, r_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(residual + j));
      const AccVec out_lo = (x_lo + r_lo) * inv_rms_vec * AccVec::loadu(weight + j);
      const AccVec out_hi =
          (x_hi + r_hi) * inv_rms_vec * AccVec::loadu(weight + j + AccVec::size());
      at::vec::convert_from_float<scalar_t>(out_lo, out_hi).store(out + j);
    }
  }
  for (int64_t k = j; k < n; ++k) {
    const acc_t h = static_cast<acc_t>(x[k]) + static_cast<acc_t>(residual[k]);
    out[k] = static_cast<scalar_t>(h * inv_rms * weight[k]);
  }
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm_cpu(const at::Tensor& x,
                                                          const at::Tensor& residual,
                                                          const at::Tensor& weight, double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps);
  const at::Tensor x_contig = x.contiguous();
  const at::Tensor residual_contig = residual.contiguous();
  const auto out_options = x.options().memory_format(at::MemoryFormat::Contiguous);
  at::Tensor out = at::empty(x.sizes(), out_options);
  at::Tensor sum_out = at::empty(x.sizes(), out_options);
  if (x.numel() == 0) {
    return {out, sum_out};
  }
  const int64_t n = x.size(-1);
  const int64_t rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "fused_add_rms_norm_cpu",
      [&] {
        using acc_t = at::opmath_type<scalar_t>;
        // Widening the (short) weight once up front saves a conversion per element in the kernel.
        const at::Tensor acc_weight =
            weight.to(c10::CppTypeToScalarType<acc_t>::value).contiguous();
        const scalar_t* x_data = x_contig.const_data_ptr<scalar_t>();
        const scalar_t* residual_data = residual_contig.const_data_ptr<scalar_t>();
        const acc_t* weight_data = acc_weight.const_data_ptr<acc_t>();
        scalar_t* out_data = out.mutable_data_ptr<scalar_t>();
        scalar_t* sum_data = sum_out.mutable_data_ptr<scalar_t>();
        const acc_t acc_eps = static_cast<acc_t>(eps);
        const int64_t rows_per_grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
        at::parallel_for(0, rows, rows_per_grain, [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            const int64_t offset = row * n;
            add_rms_norm_row<scalar_t>(x_data + offset, residual_data + offset, weight_data,
                                       out_data + offset, sum_data + offset, n, acc_eps);
          }
        });
      });
  return {out, sum_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, CPU, m) { m.impl("fused_add_rms_norm", &fused_add_rms_norm_cpu); }

}  // namespace my_ops
