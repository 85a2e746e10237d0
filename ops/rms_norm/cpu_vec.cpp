#include "ops/rms_norm/cpu_vec.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

namespace my_ops::cpu_vec {
namespace {

using at::vec::Vectorized;

// h = x (+ residual) for one vector of scalar_t, widened to float halves for Half/BFloat16.
template <typename scalar_t, bool kHasResidual>
std::pair<Vectorized<float>, Vectorized<float>> widened_sum(const scalar_t* x,
                                                            const scalar_t* residual) {
  using Vec = Vectorized<scalar_t>;
  auto [h_lo, h_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(x));
  if constexpr (kHasResidual) {
    auto [r_lo, r_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(residual));
    h_lo = h_lo + r_lo;
    h_hi = h_hi + r_hi;
  }
  return {h_lo, h_hi};
}

// Normalizes one row of h = x (+ residual). The first loop streams the row (writing h when there
// is a residual) while the sum of squares accumulates; the second re-reads only this row, which is
// still in cache, so memory is streamed once. Without a residual nothing but `out` is written.
//
// The normalized output is computed from the float32 sum h, not from h rounded to the input dtype:
// for Half/BFloat16 that avoids compounding the rounding of h with the rounding of the output.
// For float/double the stored sum is already exact, so the second loop reads it back instead of
// adding again; for reduced precision it recomputes x + residual in float.
template <typename scalar_t, bool kHasResidual>
void rms_norm_row(const scalar_t* x, const scalar_t* residual,
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
      Vec h = Vec::loadu(x + j);
      if constexpr (kHasResidual) {
        h = h + Vec::loadu(residual + j);
        h.store(sum_out + j);
      }
      sum_sq_lo = at::vec::fmadd(h, h, sum_sq_lo);
    } else {
      const auto [h_lo, h_hi] = widened_sum<scalar_t, kHasResidual>(x + j, residual + j);
      if constexpr (kHasResidual) {
        at::vec::convert_from_float<scalar_t>(h_lo, h_hi).store(sum_out + j);
      }
      sum_sq_lo = at::vec::fmadd(h_lo, h_lo, sum_sq_lo);
      sum_sq_hi = at::vec::fmadd(h_hi, h_hi, sum_sq_hi);
    }
  }
  acc_t sum_sq = at::vec::vec_reduce_all<acc_t>([](AccVec& a, AccVec& b) { return a + b; },
                                                sum_sq_lo + sum_sq_hi);
  const auto scalar_sum = [&](int64_t k) {
    acc_t h = static_cast<acc_t>(x[k]);
    if constexpr (kHasResidual) {
      h += static_cast<acc_t>(residual[k]);
    }
    return h;
  };
  for (int64_t k = j; k < n; ++k) {
    const acc_t h = scalar_sum(k);
    if constexpr (kHasResidual) {
      sum_out[k] = static_cast<scalar_t>(h);
    }
    sum_sq += h * h;
  }

  const acc_t inv_rms = acc_t(1) / std::sqrt(sum_sq / static_cast<acc_t>(n) + eps);
  const AccVec inv_rms_vec(inv_rms);
  j = 0;
  for (; j + kWidth <= n; j += kWidth) {
    if constexpr (kSameType) {
      const Vec h = Vec::loadu((kHasResidual ? sum_out : x) + j);
      (h * inv_rms_vec * Vec::loadu(weight + j)).store(out + j);
    } else {
      const auto [h_lo, h_hi] = widened_sum<scalar_t, kHasResidual>(x + j, residual + j);
      const AccVec out_lo = h_lo * inv_rms_vec * AccVec::loadu(weight + j);
      const AccVec out_hi = h_hi * inv_rms_vec * AccVec::loadu(weight + j + AccVec::size());
      at::vec::convert_from_float<scalar_t>(out_lo, out_hi).store(out + j);
    }
  }
  for (int64_t k = j; k < n; ++k) {
    out[k] = static_cast<scalar_t>(scalar_sum(k) * inv_rms * weight[k]);
  }
}

// Rows [begin, end); `residual` and `sum_out` are null when kHasResidual is false.
template <typename scalar_t, bool kHasResidual>
void rms_norm_rows(const scalar_t* x, const scalar_t* residual,
                   const at::opmath_type<scalar_t>* weight, scalar_t* out, scalar_t* sum_out,
                   int64_t begin, int64_t end, int64_t n, at::opmath_type<scalar_t> eps) {
  static_assert(std::is_same_v<acc_type<scalar_t>, at::opmath_type<scalar_t>>);
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * n;
    rms_norm_row<scalar_t, kHasResidual>(x + offset, kHasResidual ? residual + offset : nullptr,
                                         weight, out + offset,
                                         kHasResidual ? sum_out + offset : nullptr, n, eps);
  }
}

}  // namespace

template <typename scalar_t>
void rms_norm(const scalar_t* x, const acc_type<scalar_t>* weight, scalar_t* out, int64_t begin,
              int64_t end, int64_t n, acc_type<scalar_t> eps) {
  rms_norm_rows<scalar_t, /*kHasResidual=*/false>(x, nullptr, weight, out, nullptr, begin, end, n,
                                                  eps);
}

template <typename scalar_t>
void fused_add_rms_norm(const scalar_t* x, const scalar_t* residual,
                        const acc_type<scalar_t>* weight, scalar_t* out, scalar_t* sum_out,
                        int64_t begin, int64_t end, int64_t n, acc_type<scalar_t> eps) {
  rms_norm_rows<scalar_t, /*kHasResidual=*/true>(x, residual, weight, out, sum_out, begin, end, n,
                                                 eps);
}

template <typename scalar_t>
void fused_add_rms_norm_in_place(scalar_t* x, scalar_t* residual, const acc_type<scalar_t>* weight,
                                 int64_t begin, int64_t end, int64_t n, acc_type<scalar_t> eps) {
  // rms_norm_row reads residual again after it wrote h (the tails, and every element in reduced
  // precision, recompute x + residual): it reads a copy of the row instead, which stays in L1.
  std::vector<scalar_t> residual_row(static_cast<size_t>(n));
  for (int64_t row = begin; row < end; ++row) {
    const int64_t offset = row * n;
    std::copy_n(residual + offset, n, residual_row.data());
    rms_norm_row<scalar_t, /*kHasResidual=*/true>(x + offset, residual_row.data(), weight,
                                                  /*out=*/x + offset, /*sum_out=*/residual + offset,
                                                  n, eps);
  }
}

template void rms_norm(const float*, const float*, float*, int64_t, int64_t, int64_t, float);
template void rms_norm(const double*, const double*, double*, int64_t, int64_t, int64_t, double);
template void rms_norm(const c10::Half*, const float*, c10::Half*, int64_t, int64_t, int64_t,
                       float);
template void rms_norm(const c10::BFloat16*, const float*, c10::BFloat16*, int64_t, int64_t,
                       int64_t, float);

template void fused_add_rms_norm(const float*, const float*, const float*, float*, float*, int64_t,
                                 int64_t, int64_t, float);
template void fused_add_rms_norm(const double*, const double*, const double*, double*, double*,
                                 int64_t, int64_t, int64_t, double);
template void fused_add_rms_norm(const c10::Half*, const c10::Half*, const float*, c10::Half*,
                                 c10::Half*, int64_t, int64_t, int64_t, float);
template void fused_add_rms_norm(const c10::BFloat16*, const c10::BFloat16*, const float*,
                                 c10::BFloat16*, c10::BFloat16*, int64_t, int64_t, int64_t, float);

template void fused_add_rms_norm_in_place(float*, float*, const float*, int64_t, int64_t, int64_t,
                                          float);
template void fused_add_rms_norm_in_place(double*, double*, const double*, int64_t, int64_t,
                                          int64_t, double);
template void fused_add_rms_norm_in_place(c10::Half*, c10::Half*, const float*, int64_t, int64_t,
                                          int64_t, float);
template void fused_add_rms_norm_in_place(c10::BFloat16*, c10::BFloat16*, const float*, int64_t,
                                          int64_t, int64_t, float);

}  // namespace my_ops::cpu_vec
