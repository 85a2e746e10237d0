#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>
#include <utility>

#include "ops/common/cpu_kernel.h"
#include "ops/rms_norm/rms_norm.h"

namespace my_ops {

// Shared with the CUDA kernel's comment: eps is rounded to the accumulation type (float for
// float/half/bfloat16), as eager's float computation rounds it. An eps below float's smallest
// subnormal (5e-324, say) is then 0, and an all-zero row gives NaN there, as in eager and as with
// eps = 0. Adding eps in double would not rescue that row: rsqrt(5e-324) overflows float.

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

// `residual` and `sum_out` are undefined tensors when kHasResidual is false.
template <bool kHasResidual>
void rms_norm_kernel(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                     double eps, at::Tensor& out, at::Tensor& sum_out) {
  const int64_t n = x.sizes().back();
  const int64_t rows = x.numel() / n;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "rms_norm_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        // Widening the (short) weight once up front saves a conversion per element in the kernel.
        const c10::MaybeOwned<at::Tensor> acc_weight =
            contiguous_as(weight, c10::CppTypeToScalarType<acc_t>::value);
        const scalar_t* x_data = data_as<scalar_t>(x);
        const scalar_t* residual_data = kHasResidual ? data_as<scalar_t>(residual) : nullptr;
        const acc_t* weight_data = data_as<acc_t>(*acc_weight);
        scalar_t* out_data = mutable_data_as<scalar_t>(out);
        scalar_t* sum_data = kHasResidual ? mutable_data_as<scalar_t>(sum_out) : nullptr;
        const acc_t acc_eps = static_cast<acc_t>(eps);
        const int64_t rows_per_grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
        parallel_for_work(0, rows, rows_per_grain, rows * n, [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            const int64_t offset = row * n;
            rms_norm_row<scalar_t, kHasResidual>(
                x_data + offset, kHasResidual ? residual_data + offset : nullptr, weight_data,
                out_data + offset, kHasResidual ? sum_data + offset : nullptr, n, acc_eps);
          }
        });
      });
}

// rms_norm into a contiguous `out` of x's shape, the arguments checked.
void rms_norm_into(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  at::Tensor no_sum;
  if (x.numel() != 0) {
    rms_norm_kernel</*kHasResidual=*/false>(*x.expect_contiguous(), at::Tensor(), weight, eps, out,
                                            no_sum);
  }
}

}  // namespace

// The kernels registered at the CPU key, which the C shims also call directly
// (tools/torch/c_shim_call.h): each is named after its op and has its schema's signature.
namespace cpu {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  at::Tensor out = empty_cpu_like(x, x.sizes());
  rms_norm_into(x, weight, eps, out);
  return out;
}

at::Tensor& rms_norm_out(const at::Tensor& x, const at::Tensor& weight, double eps,
                         at::Tensor& out) {
  check_rms_norm_args(x, weight, eps);
  check_out("rms_norm_out", out, x.sizes(), "x", x, {{"x", &x}, {"weight", &weight}});
  return write_out(out, [&](at::Tensor& dst) { rms_norm_into(x, weight, eps, dst); });
}

std::tuple<at::Tensor, at::Tensor> fused_add_rms_norm(const at::Tensor& x,
                                                      const at::Tensor& residual,
                                                      const at::Tensor& weight, double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps);
  at::Tensor out = empty_cpu_like(x, x.sizes());
  at::Tensor sum_out = empty_cpu_like(x, x.sizes());
  if (x.numel() != 0) {
    rms_norm_kernel</*kHasResidual=*/true>(x.contiguous(), residual.contiguous(), weight, eps, out,
                                           sum_out);
  }
  return {out, sum_out};
}

}  // namespace cpu

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("rms_norm", &cpu::rms_norm);
  m.impl("rms_norm_out", &cpu::rms_norm_out);
  m.impl("fused_add_rms_norm", &cpu::fused_add_rms_norm);
}

}  // namespace my_ops
