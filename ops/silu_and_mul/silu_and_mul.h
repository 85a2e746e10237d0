#pragma once

#include "ops/common/checks.h"

namespace my_ops {

// silu_and_mul(x) = silu(x[..., :d]) * x[..., d:], the gated activation of SwiGLU MLPs: the up
// and gate projections arrive as one [..., 2d] tensor, and the output is [..., d].
// Returns the output's sizes.
inline Sizes check_silu_and_mul_args(TensorRef x) {
  constexpr std::string_view kOp = "silu_and_mul";
  check_primary_input(kOp, "x", x);
  MY_OPS_CHECK(x.sizes().back() % 2 == 0, kOp,
               ": expected x to have a last dimension divisible by 2, got ", x.size(-1));
  Sizes out_sizes(x.sizes());
  out_sizes.back() /= 2;
  return out_sizes;
}

}  // namespace my_ops
