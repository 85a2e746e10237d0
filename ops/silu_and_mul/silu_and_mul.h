#pragma once

#include <ATen/core/TensorBase.h>
#include <c10/util/DimVector.h>
#include <c10/util/Exception.h>

#include "ops/common/checks.h"

namespace my_ops {

// silu_and_mul(x) = silu(x[..., :d]) * x[..., d:], the gated activation of SwiGLU MLPs: the up
// and gate projections arrive as one [..., 2d] tensor, and the output is [..., d].
// Returns the output's sizes, inline up to 5 dims (a std::vector would cost a heap allocation on
// every call, a visible part of one on a small tensor).
inline c10::DimVector check_silu_and_mul_args(const at::TensorBase& x) {
  constexpr c10::string_view kOp = "silu_and_mul";
  check_primary_input(kOp, "x", x);
  TORCH_CHECK(x.sizes().back() % 2 == 0, kOp,
              ": expected x to have a last dimension divisible by 2, got ", x.size(-1));
  c10::DimVector out_sizes(x.sizes());
  out_sizes.back() /= 2;
  return out_sizes;
}

// The CUDA kernels (cuda.cu), registered in ops/registration.cpp.
at::TensorBase silu_and_mul_cuda(const at::TensorBase& x);

}  // namespace my_ops
