#include "ops/rotary_embedding/cpu_vec.h"

#include <ATen/OpMathType.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <type_traits>
#include <utility>

namespace my_ops::cpu_vec {
namespace {

using at::vec::Vectorized;

static_assert(std::is_same_v<acc_type<float>, at::opmath_type<float>> &&
              std::is_same_v<acc_type<double>, at::opmath_type<double>> &&
              std::is_same_v<acc_type<c10::Half>, at::opmath_type<c10::Half>> &&
              std::is_same_v<acc_type<c10::BFloat16>, at::opmath_type<c10::BFloat16>>);

// Two acc_t vectors: 2 * Vectorized<acc_t>::size() consecutive elements, which for a reduced
// precision scalar_t is exactly one Vectorized<scalar_t>. The math runs in acc_t and each output is
// rounded to scalar_t once.
template <typename scalar_t>
using AccPair =
    std::pair<Vectorized<at::opmath_type<scalar_t>>, Vectorized<at::opmath_type<scalar_t>>>;

template <typename scalar_t>
constexpr int64_t kChunk = 2 * Vectorized<at::opmath_type<scalar_t>>::size();

template <typename scalar_t>
AccPair<scalar_t> load_chunk(const scalar_t* p) {
  using acc_t = at::opmath_type<scalar_t>;
  if constexpr (std::is_same_v<scalar_t, acc_t>) {
    return {Vectorized<acc_t>::loadu(p), Vectorized<acc_t>::loadu(p + Vectorized<acc_t>::size())};
  } else {
    auto [lo, hi] = at::vec::convert_to_float<scalar_t>(Vectorized<scalar_t>::loadu(p));
    return {lo, hi};
  }
}

template <typename scalar_t>
void store_chunk(scalar_t* p, const AccPair<scalar_t>& v) {
  using acc_t = at::opmath_type<scalar_t>;
  if constexpr (std::is_same_v<scalar_t, acc_t>) {
    v.first.store(p);
    v.second.store(p + Vectorized<acc_t>::size());
  } else {
    at::vec::convert_from_float<scalar_t>(v.first, v.second).store(p);
  }
}

// (a * c - b * s, b * c + a * s): the rotation of every pair (a, b) by its angle.
template <typename AccVec>
std::pair<AccVec, AccVec> rotate(AccVec a, AccVec b, AccVec c, AccVec s) {
  return {a * c - b * s, b * c + a * s};
}

// kChunk pairs of the half-split layout (NeoX/LLaMA): a from the first half of the row, b from the
// second, the same columns of cos and sin (already widened to acc_t).
template <typename scalar_t>
void rotate_half_split_chunk(const scalar_t* a, const scalar_t* b,
                             const at::opmath_type<scalar_t>* c, const at::opmath_type<scalar_t>* s,
                             scalar_t* out_a, scalar_t* out_b) {
  using AccVec = Vectorized<at::opmath_type<scalar_t>>;
  constexpr int64_t kW = AccVec::size();
  const auto [a_lo, a_hi] = load_chunk(a);
  const auto [b_lo, b_hi] = load_chunk(b);
  const auto lo = rotate(a_lo, b_lo, AccVec::loadu(c), AccVec::loadu(s));
  const auto hi = rotate(a_hi, b_hi, AccVec::loadu(c + kW), AccVec::loadu(s + kW));
  store_chunk<scalar_t>(out_a, {lo.first, hi.first});
  store_chunk<scalar_t>(out_b, {lo.second, hi.second});
}

// kChunk / 2 pairs of the interleaved layout (GPT-J): kChunk consecutive elements, split into the
// even (a) and odd (b) ones and merged back after the rotation.
template <typename scalar_t>
void rotate_interleaved_chunk(const scalar_t* x, const at::opmath_type<scalar_t>* c,
                              const at::opmath_type<scalar_t>* s, scalar_t* out) {
  using AccVec = Vectorized<at::opmath_type<scalar_t>>;
  const auto [lo, hi] = load_chunk(x);
  const auto [a, b] = at::vec::deinterleave2(lo, hi);
  const auto [ra, rb] = rotate(a, b, AccVec::loadu(c), AccVec::loadu(s));
  store_chunk<scalar_t>(out, at::vec::interleave2(ra, rb));
}

// The first 2 * half elements of a row. Tails go through the same vector code via zero-padded
// buffers, so every element gets bit-identical math wherever it sits in the row.
template <typename scalar_t, bool kInterleaved>
void rotate_row(const scalar_t* x, const at::opmath_type<scalar_t>* c,
                const at::opmath_type<scalar_t>* s, scalar_t* out, int64_t half) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int64_t kN = kChunk<scalar_t>;
  if constexpr (kInterleaved) {
    constexpr int64_t kPairs = kN / 2;
    int64_t i = 0;
    for (; i + kPairs <= half; i += kPairs) {
      rotate_interleaved_chunk(x + 2 * i, c + i, s + i, out + 2 * i);
    }
    if (i < half) {
      const int64_t count = half - i;
      scalar_t x_buf[kN] = {};
      acc_t c_buf[kPairs] = {};
      acc_t s_buf[kPairs] = {};
      scalar_t out_buf[kN];
      std::copy_n(x + 2 * i, 2 * count, x_buf);
      std::copy_n(c + i, count, c_buf);
      std::copy_n(s + i, count, s_buf);
      rotate_interleaved_chunk(x_buf, c_buf, s_buf, out_buf);
      std::copy_n(out_buf, 2 * count, out + 2 * i);
    }
  } else {
    int64_t i = 0;
    for (; i + kN <= half; i += kN) {
      rotate_half_split_chunk(x + i, x + half + i, c + i, s + i, out + i, out + half + i);
    }
    if (i < half) {
      const int64_t count = half - i;
      scalar_t a_buf[kN] = {};
      scalar_t b_buf[kN] = {};
      acc_t c_buf[kN] = {};
      acc_t s_buf[kN] = {};
      scalar_t out_a[kN];
      scalar_t out_b[kN];
      std::copy_n(x + i, count, a_buf);
      std::copy_n(x + half + i, count, b_buf);
      std::copy_n(c + i, count, c_buf);
      std::copy_n(s + i, count, s_buf);
      rotate_half_split_chunk(a_buf, b_buf, c_buf, s_buf, out_a, out_b);
      std::copy_n(out_a, count, out + i);
      std::copy_n(out_b, count, out + half + i);
    }
  }
}

template <typename scalar_t, bool kInterleaved>
void rotate_rows(const scalar_t* x, const at::opmath_type<scalar_t>* cos_data,
                 const at::opmath_type<scalar_t>* sin_data, scalar_t* out, int64_t begin,
                 int64_t end, const RotaryRows& rows) {
  const int64_t rotated = 2 * rows.half;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t token = (row / rows.heads) % rows.period;
    const int64_t position = rows.positions == nullptr ? token : rows.positions[token];
    const int64_t offset = position * rows.half;
    const scalar_t* x_row = x + row * rows.head_dim;
    scalar_t* out_row = out + row * rows.head_dim;
    rotate_row<scalar_t, kInterleaved>(x_row, cos_data + offset, sin_data + offset, out_row,
                                       rows.half);
    // A partial rotation passes the other features through.
    if (rotated < rows.head_dim && out_row != x_row) {
      std::copy(x_row + rotated, x_row + rows.head_dim, out_row + rotated);
    }
  }
}

}  // namespace

template <typename scalar_t>
void rotary_embedding(const scalar_t* x, const acc_type<scalar_t>* cos,
                      const acc_type<scalar_t>* sin, scalar_t* out, int64_t begin, int64_t end,
                      const RotaryRows& rows, bool interleaved) {
  if (interleaved) {
    rotate_rows<scalar_t, true>(x, cos, sin, out, begin, end, rows);
  } else {
    rotate_rows<scalar_t, false>(x, cos, sin, out, begin, end, rows);
  }
}

template void rotary_embedding(const float*, const float*, const float*, float*, int64_t, int64_t,
                               const RotaryRows&, bool);
template void rotary_embedding(const double*, const double*, const double*, double*, int64_t,
                               int64_t, const RotaryRows&, bool);
template void rotary_embedding(const c10::Half*, const float*, const float*, c10::Half*, int64_t,
                               int64_t, const RotaryRows&, bool);
template void rotary_embedding(const c10::BFloat16*, const float*, const float*, c10::BFloat16*,
                               int64_t, int64_t, const RotaryRows&, bool);

}  // namespace my_ops::cpu_vec
