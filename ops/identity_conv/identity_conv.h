#pragma once

#include <ATen/core/TensorBase.h>

#include "ops/common/checks.h"

namespace my_ops {

inline void check_identity_conv_args(const at::TensorBase& x) {
  check_primary_input("identity_conv_op", "x", x);
}

// The CUDA kernels (cuda.cu), registered in ops/registration.cpp.
at::TensorBase identity_conv_cuda(const at::TensorBase& x);

}  // namespace my_ops
