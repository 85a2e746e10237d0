#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "ops/common/cpu_kernel.h"
#include "ops/rotary_embedding/rotary_embedding.h"

namespace my_ops {
namespace {

using at::vec::Vectorized;

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

// One row of head_dim = 2 * half elements. Tails go through the same vector code via zero-padded
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
void rotary_kernel(const at::Tensor& x, const at::Tensor& acc_cos, const at::Tensor& acc_sin,
                   at::Tensor& out, const RotaryShape& shape) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* x_data = data_as<scalar_t>(x);
  const acc_t* cos_data = data_as<acc_t>(acc_cos);
  const acc_t* sin_data = data_as<acc_t>(acc_sin);
  scalar_t* out_data = mutable_data_as<scalar_t>(out);
  const int64_t row_length = 2 * shape.half;
  const int64_t rows = x.numel() / row_length;
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / row_length);
  parallel_for_work(0, rows, grain, rows * row_length, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      // Rows run over [..., seq, heads]: the position is the seq index.
      const int64_t offset = ((row / shape.heads) % shape.seq) * shape.half;
      rotate_row<scalar_t, kInterleaved>(x_data + row * row_length, cos_data + offset,
                                         sin_data + offset, out_data + row * row_length,
                                         shape.half);
    }
  });
}

// rotary_embedding into a contiguous `out` of x's shape, the arguments checked.
void rotary_embedding_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                           bool interleaved, const RotaryShape& shape, at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const c10::MaybeOwned<at::Tensor> x_contig = x.expect_contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "rotary_embedding_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        // The tables are read once per head and leading index: widening them once up front saves
        // a conversion per element in the kernel.
        const auto acc_type = c10::CppTypeToScalarType<acc_t>::value;
        const c10::MaybeOwned<at::Tensor> acc_cos = contiguous_as(cos, acc_type);
        const c10::MaybeOwned<at::Tensor> acc_sin = contiguous_as(sin, acc_type);
        if (interleaved) {
          rotary_kernel<scalar_t, true>(*x_contig, *acc_cos, *acc_sin, out, shape);
        } else {
          rotary_kernel<scalar_t, false>(*x_contig, *acc_cos, *acc_sin, out, shape);
        }
      });
}

}  // namespace

// The kernels registered at the CPU key, which the C shims also call directly
// (tools/torch/c_shim_call.h): each is named after its op and has its schema's signature.
namespace cpu {

at::Tensor rotary_embedding(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                            bool interleaved) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin);
  at::Tensor out = empty_cpu_like(x, x.sizes());
  rotary_embedding_into(x, cos, sin, interleaved, shape, out);
  return out;
}

at::Tensor& rotary_embedding_out(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 bool interleaved, at::Tensor& out) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin);
  check_out("rotary_embedding_out", out, x.sizes(), "x", x,
            {{"x", &x}, {"cos", &cos}, {"sin", &sin}});
  return write_out(
      out, [&](at::Tensor& dst) { rotary_embedding_into(x, cos, sin, interleaved, shape, dst); });
}

}  // namespace cpu

TORCH_LIBRARY_IMPL(my_ops, CPU, m) {
  m.impl("rotary_embedding", &cpu::rotary_embedding);
  m.impl("rotary_embedding_out", &cpu::rotary_embedding_out);
}

}  // namespace my_ops
