#include <torch/headeronly/core/Dispatch_v2.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "ops/common/cpu_kernel.h"
#include "ops/rms_norm/cpu_vec.h"
#include "ops/rms_norm/rms_norm.h"

namespace my_ops {

// Shared with the CUDA kernel's comment: eps is rounded to the accumulation type (float for
// float/half/bfloat16), as eager's float computation rounds it. An eps below float's smallest
// subnormal (5e-324, say) is then 0, and an all-zero row gives NaN there, as in eager and as with
// eps = 0. Adding eps in double would not rescue that row: rsqrt(5e-324) overflows float.

namespace {

// Runs kernel(scalar_t{}, weight, eps, begin, end, n) over ranges of x's rows [rows, n] in
// parallel, scalar_t being x's dtype; the weight is widened to acc_type<scalar_t> once up front,
// which saves a conversion per element in the kernels (for every form of the op).
template <class RowKernel>
void for_row_ranges(TensorRef x, TensorRef weight, double eps, const RowKernel& kernel) {
  const int64_t n = x.sizes().back();
  const int64_t rows = x.numel() / n;
  THO_DISPATCH_V2(
      x.scalar_type(), "rms_norm_cpu", AT_WRAP([&] {
        using acc_t = acc_type<scalar_t>;
        const ContiguousAs acc_weight(weight, torch::headeronly::CppTypeToScalarType<acc_t>::value);
        const acc_t* weight_data = acc_weight.ref().data_as<acc_t>();
        const acc_t acc_eps = static_cast<acc_t>(eps);
        const int64_t rows_per_grain = std::max<int64_t>(1, kGrainSize / n);
        parallel_for_work(0, rows, rows_per_grain, rows * n, [&](int64_t begin, int64_t end) {
          kernel(scalar_t{}, weight_data, acc_eps, begin, end, n);
        });
      }),
      AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
      torch::headeronly::ScalarType::BFloat16);
}

// `residual` and `sum_out` are unused when kHasResidual is false; x and residual are contiguous.
template <bool kHasResidual>
void rms_norm_kernel(TensorRef x, TensorRef residual, TensorRef weight, double eps, TensorRef out,
                     TensorRef sum_out) {
  for_row_ranges(
      x, weight, eps,
      [&](auto type, const auto* w, auto acc_eps, int64_t begin, int64_t end, int64_t n) {
        using scalar_t = decltype(type);
        if constexpr (kHasResidual) {
          cpu_vec::fused_add_rms_norm(x.data_as<scalar_t>(), residual.data_as<scalar_t>(), w,
                                      out.mutable_data_as<scalar_t>(),
                                      sum_out.mutable_data_as<scalar_t>(), begin, end, n, acc_eps);
        } else {
          cpu_vec::rms_norm(x.data_as<scalar_t>(), w, out.mutable_data_as<scalar_t>(), begin, end,
                            n, acc_eps);
        }
      });
}

// rms_norm into a contiguous `out` of x's shape, the arguments checked.
void rms_norm_into(TensorRef x, TensorRef weight, double eps, TensorRef out) {
  if (x.numel() != 0) {
    rms_norm_kernel</*kHasResidual=*/false>(ContiguousAs(x), TensorRef(nullptr), weight, eps, out,
                                            TensorRef(nullptr));
  }
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor rms_norm(TensorRef x, TensorRef weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  rms_norm_into(x, weight, eps, out);
  return out;
}

void rms_norm_out(TensorRef x, TensorRef weight, double eps, TensorRef out) {
  check_rms_norm_args(x, weight, eps);
  check_out("rms_norm_out", out, x.sizes(), "x", x, {{"x", x}, {"weight", weight}});
  write_out(out, [&](TensorRef dst) { rms_norm_into(x, weight, eps, dst); });
}

std::tuple<OwnedTensor, OwnedTensor> fused_add_rms_norm(TensorRef x, TensorRef residual,
                                                        TensorRef weight, double eps) {
  check_fused_add_rms_norm_args(x, residual, weight, eps);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  OwnedTensor sum_out = empty_like_with_sizes(x, x.sizes());
  if (x.numel() != 0) {
    rms_norm_kernel</*kHasResidual=*/true>(ContiguousAs(x), ContiguousAs(residual), weight, eps,
                                           out, sum_out);
  }
  return {std::move(out), std::move(sum_out)};
}

void fused_add_rms_norm_(TensorRef x, TensorRef residual, TensorRef weight, double eps) {
  check_fused_add_rms_norm_in_place_args(x, residual, weight, eps);
  if (x.numel() == 0) return;
  if (!x.is_contiguous() || !residual.is_contiguous()) {
    // A strided x or residual: computed apart, then copied in.
    auto [out, sum_out] = fused_add_rms_norm(x, residual, weight, eps);
    copy_into(x, std::move(out));
    copy_into(residual, std::move(sum_out));
    return;
  }
  for_row_ranges(
      x, weight, eps,
      [&](auto type, const auto* w, auto acc_eps, int64_t begin, int64_t end, int64_t n) {
        using scalar_t = decltype(type);
        cpu_vec::fused_add_rms_norm_in_place(x.mutable_data_as<scalar_t>(),
                                             residual.mutable_data_as<scalar_t>(), w, begin, end, n,
                                             acc_eps);
      });
}

}  // namespace cpu
}  // namespace my_ops
