#pragma once

#include "ops/common/checks.h"

namespace my_ops {

// rotary_embedding(x, cos, sin, positions, interleaved): rotary position embedding (RoPE) as
// LLaMA-family models apply it to queries and keys. x is [..., seq, heads, head_dim]; cos and sin
// are [positions, rotary_dim / 2] tables, one angle per position and pair of features, shared by
// every head. A token's row of the tables is its seq index when `positions` is undefined (then the
// tables have seq rows), else positions[token]: positions is int64, [seq] (shared by every
// leading index, a decode step at position p is [p]) or x's [..., seq] (one per token). Each pair
// (a, b) of the first rotary_dim features of a row at position p becomes
//   (a * cos[p, i] - b * sin[p, i], b * cos[p, i] + a * sin[p, i]),
// the pairs being (2i, 2i + 1) when interleaved (GPT-J) and (i, i + rotary_dim / 2) otherwise
// (GPT-NeoX, LLaMA); the features past rotary_dim (at most head_dim) are copied (a partial
// rotation, as GPT-NeoX's rotary_pct and Phi's partial_rotary_factor give).

// The sizes the kernels need, once the arguments are checked.
struct RotaryShape {
  int64_t seq;
  int64_t heads;
  int64_t head_dim;    // a row's length
  int64_t half;        // rotary_dim / 2: pairs rotated per row, and the tables' row length
  int64_t table_rows;  // positions the tables hold
  // The tokens a position is given for, when positions is defined: a token's position is
  // positions[token % position_period] (seq, or every token of x). 0 without positions.
  int64_t position_period;
};

namespace detail {

__attribute__((noinline, cold)) inline void fail_rotary_table(std::string_view op,
                                                              std::string_view name, TensorRef t,
                                                              TensorRef x, bool has_positions) {
  fail_same_device_and_dtype(op, name, t, "x", x);
  MY_OPS_CHECK(t.dim() == 2, op, ": expected ", name,
               " to be 2-D [positions, rotary_dim / 2], got ", t.dim(), "-D with shape ",
               Shape{t.sizes()});
  MY_OPS_CHECK(t.size(1) <= x.size(-1) / 2, op, ": expected ", name, " to have at most ",
               x.size(-1) / 2, " columns (head_dim / 2, or fewer for a partial rotation), got ",
               t.size(1));
  MY_OPS_CHECK(has_positions || t.size(0) == x.size(-3), op, ": expected ", name, " to have ",
               x.size(-3), " rows (x's seq dim) when positions is None, got ", t.size(0));
}

__attribute__((noinline, cold)) inline void fail_positions(std::string_view op, TensorRef p,
                                                           TensorRef x) {
  fail_same_device(op, "positions", p, "x", x);
  MY_OPS_CHECK(p.scalar_type() == ScalarType::Long, op,
               ": expected positions to have dtype int64, got ", p.scalar_type());
  const IntArrayRef tokens = x.sizes().slice(0, x.dim() - 2);
  MY_OPS_CHECK(false, op, ": expected positions to have shape [", x.size(-3), "] (x's seq dim) or ",
               Shape{tokens}, " (x's dims before heads), got ", Shape{p.sizes()});
}

}  // namespace detail

// A cos or sin table: x's dtype and device, one row per position, one column per rotated pair.
inline void check_rotary_table(std::string_view op, std::string_view name, TensorRef t, TensorRef x,
                               bool has_positions) {
  if (__builtin_expect(detail::same_device_and_dtype(t, x) && t.dim() == 2 &&
                           t.size(1) <= x.size(-1) / 2 &&
                           (has_positions || t.size(0) == x.size(-3)),
                       1)) {
    return;
  }
  detail::fail_rotary_table(op, name, t, x, has_positions);
}

// positions, when defined: int64 on x's device, [seq] or x's [..., seq]. Its values are checked
// against the tables by the CPU kernel (check_positions_in_range); the CUDA kernel asserts them.
inline void check_positions(std::string_view op, TensorRef p, TensorRef x) {
  const IntArrayRef tokens = x.sizes().slice(0, x.dim() - 2);
  const bool shape_ok = (p.dim() == 1 && p.size(0) == x.size(-3)) || p.sizes() == tokens;
  if (__builtin_expect(p.device_type() == x.device_type() && p.device_index() == x.device_index() &&
                           p.scalar_type() == ScalarType::Long && shape_ok,
                       1)) {
    return;
  }
  detail::fail_positions(op, p, x);
}

inline RotaryShape check_rotary_embedding_args(TensorRef x, TensorRef cos, TensorRef sin,
                                               TensorRef positions) {
  constexpr std::string_view kOp = "rotary_embedding";
  check_primary_input(kOp, "x", x);
  MY_OPS_CHECK(x.dim() >= 3, kOp, ": expected x to have at least 3 dimensions, got ", x.dim());
  MY_OPS_CHECK(x.size(-1) % 2 == 0, kOp,
               ": expected x to have a last dimension divisible by 2, got ", x.size(-1));
  const bool has_positions = positions.defined();
  check_rotary_table(kOp, "cos", cos, x, has_positions);
  check_rotary_table(kOp, "sin", sin, x, has_positions);
  MY_OPS_CHECK(sin.sizes() == cos.sizes(), kOp, ": expected sin to have the shape of cos (",
               detail::Shape{cos.sizes()}, "), got ", detail::Shape{sin.sizes()});
  if (has_positions) check_positions(kOp, positions, x);
  return {x.size(-3),  x.size(-2),  x.size(-1),
          cos.size(1), cos.size(0), has_positions ? positions.numel() : 0};
}

}  // namespace my_ops
