#pragma once

#include "ops/common/checks.h"

namespace my_ops {

inline void check_identity_conv_args(TensorRef x) {
  check_primary_input("identity_conv_op", "x", x);
}

}  // namespace my_ops
