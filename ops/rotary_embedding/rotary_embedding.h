#pragma once

#include "ops/common/checks.h"

namespace my_ops {

// rotary_embedding(x, cos, sin, interleaved): rotary position embedding (RoPE) as LLaMA-family
// models apply it to queries and keys. x is [..., seq, heads, head_dim]; cos and sin are
// [seq, head_dim / 2], one angle per position and pair of features, shared by every head and every
// leading index. Each pair (a, b) of a row at position p becomes
//   (a * cos[p, i] - b * sin[p, i], b * cos[p, i] + a * sin[p, i]),
// the pairs being (2i, 2i + 1) when interleaved (GPT-J) and (i, i + head_dim / 2) otherwise
// (GPT-NeoX, LLaMA).

// The sizes the kernels need, once the arguments are checked.
struct RotaryShape {
  int64_t seq;
  int64_t heads;
  int64_t half;  // head_dim / 2: pairs per row, and the tables' row length
};

// A cos or sin table: one row per position of x's seq dim, one column per pair.
inline void check_rotary_table(std::string_view op, std::string_view name, TensorRef t,
                               TensorRef x) {
  check_same_device_and_dtype(op, name, t, "x", x);
  MY_OPS_CHECK(t.dim() == 2, op, ": expected ", name, " to be 2-D [seq, head_dim / 2], got ",
               t.dim(), "-D with shape ", detail::Shape{t.sizes()});
  const int64_t seq = x.size(-3);
  const int64_t half = x.size(-1) / 2;
  MY_OPS_CHECK(t.size(0) == seq && t.size(1) == half, op, ": expected ", name, " to have shape [",
               seq, ", ", half, "] (x's seq dim, head_dim / 2), got ", detail::Shape{t.sizes()});
}

inline RotaryShape check_rotary_embedding_args(TensorRef x, TensorRef cos, TensorRef sin) {
  constexpr std::string_view kOp = "rotary_embedding";
  check_primary_input(kOp, "x", x);
  MY_OPS_CHECK(x.dim() >= 3, kOp, ": expected x to have at least 3 dimensions, got ", x.dim());
  MY_OPS_CHECK(x.size(-1) % 2 == 0, kOp,
               ": expected x to have a last dimension divisible by 2, got ", x.size(-1));
  check_rotary_table(kOp, "cos", cos, x);
  check_rotary_table(kOp, "sin", sin, x);
  return {x.size(-3), x.size(-2), x.size(-1) / 2};
}

}  // namespace my_ops
