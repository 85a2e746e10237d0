#include "ops/silu_and_mul/cpu_vec.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <type_traits>

#include "ops/common/cpu_vec_segment.h"

namespace my_ops::cpu_vec {
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
  for_each_vector<Vectorized<scalar_t>::size()>(
      a, b, out, length,
      [](const scalar_t* a, const scalar_t* b, scalar_t* out) { silu_mul_vector(a, b, out); });
}

}  // namespace

template <typename scalar_t>
void silu_and_mul(const scalar_t* x, scalar_t* out, int64_t begin, int64_t end, int64_t d) {
  // A chunk of the flat output walks the row pieces it covers, so that a few long rows split
  // across threads as well as many short ones do.
  for (int64_t i = begin; i < end;) {
    const int64_t row = i / d;
    const int64_t col = i - row * d;
    const int64_t length = std::min(d - col, end - i);
    const scalar_t* a = x + row * 2 * d + col;
    silu_mul_segment(a, a + d, out + i, length);
    i += length;
  }
}

template void silu_and_mul(const float*, float*, int64_t, int64_t, int64_t);
template void silu_and_mul(const double*, double*, int64_t, int64_t, int64_t);
template void silu_and_mul(const c10::Half*, c10::Half*, int64_t, int64_t, int64_t);
template void silu_and_mul(const c10::BFloat16*, c10::BFloat16*, int64_t, int64_t, int64_t);

}  // namespace my_ops::cpu_vec
