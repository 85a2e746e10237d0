#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "ops/identity_conv/identity_conv.h"

namespace my_ops {
namespace {

at::Tensor identity_conv_cpu(const at::Tensor& x) {
  check_identity_conv_args(x);
  // ATen's copy kernel is already vectorized and parallel for every stride pattern, and a
  // hand-written loop could not beat a plain memcpy-bound copy.
  return x.clone(at::MemoryFormat::Contiguous);
}

}  // namespace

TORCH_LIBRARY_IMPL(my_ops, CPU, m) { m.impl("identity_conv_op", &identity_conv_cpu); }

}  // namespace my_ops
