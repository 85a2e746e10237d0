#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "ops/common/cpu_kernel.h"
#include "ops/silu_and_mul/silu_and_mul.h"

namespace my_ops {
namespace {

using at::vec::Vectorized;

template <typename AccVec>
AccVec silu_mul(AccVec a, AccVec b) {
  using acc_t = typename AccVec::value_type;
  const AccVec kOne(acc_t(1));
  if constexpr (std::is_same_v<acc_t, float>) {
    // exp_u20 is ATen's inline float exp (within 20 ulp, about 1e-6 relative): Sleef's exp is an
    // out-of-line call per vector, and this kernel's time is memory traffic plus exactly this math.
    // It clamps its argument, so a / (1 + exp(-a)) tends to 0 for very negative a, never NaN.
    return a / (kOne + a.neg().exp_u20()) * b;
  } else {
    return a / (kOne + a.neg().exp()) * b;
  }
}

// Exactly Vectorized<scalar_t>::size() outputs. Reduced-precision inputs are widened to float, and
// silu(a) is never rounded to scalar_t before the multiply.
template <typename scalar_t>
void silu_mul_vector(const scalar_t* a, const scalar_t* b, scalar_t* out) {
  using acc_t = at::opmath_type<scalar_t>;
  using Vec = Vectorized<scalar_t>;
  if constexpr (std::is_same_v<scalar_t, acc_t>) {
    silu_mul(Vec::loadu(a), Vec::loadu(b)).store(out);
  } else {
    auto [a_lo, a_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(a));
    auto [b_lo, b_hi] = at::vec::convert_to_float<scalar_t>(Vec::loadu(b));
    at::vec::convert_from_float<scalar_t>(silu_mul(a_lo, b_lo), silu_mul(a_hi, b_hi)).store(out);
  }
}

// `length` consecutive outputs of one row: a and b are the matching runs of its two halves.
template <typename scalar_t>
void silu_mul_segment(const scalar_t* a, const scalar_t* b, scalar_t* out, int64_t length) {
  constexpr int64_t kWidth = Vectorized<scalar_t>::size();
  int64_t i = 0;
  for (; i + kWidth <= length; i += kWidth) {
    silu_mul_vector(a + i, b + i, out + i);
  }
  if (i < length) {
    // The tail goes through the same vector code via zero-padded buffers, so every element gets
    // bit-identical math wherever it sits in the row.
    const int64_t count = length - i;
    scalar_t a_buf[kWidth] = {};
    scalar_t b_buf[kWidth] = {};
    scalar_t out_buf[kWidth];
    std::copy_n(a + i, count, a_buf);
    std::copy_n(b + i, count, b_buf);
    silu_mul_vector(a_buf, b_buf, out_buf);
    std::copy_n(out_buf, count, out + i);
  }
}

template <typename scalar_t>
void silu_and_mul_kernel(const at::Tensor& x, at::Tensor& out) {
  const scalar_t* x_data = data_as<scalar_t>(x);
  scalar_t* out_data = mutable_data_as<scalar_t>(out);
  const int64_t d = out.sizes().back();
  // Parallel over the flat output rather than over rows, so that a few long rows use every thread
  // as well as many short ones do; each chunk walks the row pieces it covers.
  const int64_t numel = out.numel();
  parallel_for_work(0, numel, at::internal::GRAIN_SIZE, numel, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end;) {
      const int64_t row = i / d;
      const int64_t col = i - row * d;
      const int64_t length = std::min(d - col, end - i);
      const scalar_t* a = x_data + row * 2 * d + col;
      silu_mul_segment(a, a + d, out_data + i, length);
      i += length;
    }
  });
}

// silu_and_mul into a contiguous `out` of the result's shape, the argument checked.
void silu_and_mul_into(const at::Tensor& x, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const c10::MaybeOwned<at::Tensor> x_contig = x.expect_contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(),
                                  "silu_and_mul_cpu",
                                  [&] { silu_and_mul_kernel<scalar_t>(*x_contig, out); });
}

}  // namespace

// The kernels registered at the CPU key, which the C shims also call directly
// (tools/torch/c_shim_call.h): each is named after its op and has its schema's signature.
namespace cpu {

at::Tensor silu_and_mul(const at::Tensor& x) {
  const c10::DimVector out_sizes = check_silu_and_mul_args(x);
  at::Tensor out = empty_cpu_like(x, out_sizes);
  silu_and_mul_into(x, out);
  return out;
}

at::Tensor& silu_and_mul_out(const at::Tensor& x, at::Tensor& out) {
  const c10::DimVector out_sizes = check_silu_and_mul_args(x);
  check_out("silu_and_mul_out", out, out_sizes, "x", x, {{"x", &x}});
  return write_out(out, [&](at::Tensor& dst) { silu_and_mul_into(x, dst); });
}

}  // namespace cpu

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("silu_and_mul", &cpu::silu_and_mul);
  m.impl("silu_and_mul_out", &cpu::silu_and_mul_out);
}

}  // namespace my_ops
