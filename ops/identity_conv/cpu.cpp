#include <torch/csrc/stable/ops.h>

#include "ops/identity_conv/identity_conv.h"

namespace my_ops {

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor identity_conv_op(TensorRef x) {
  check_identity_conv_args(x);
  // ATen's copy kernel is already vectorized and parallel for every stride pattern, and a
  // hand-written loop could not beat a plain memcpy-bound copy.
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  if (out.ref().numel() != 0) {
    torch::stable::Tensor dst = out.ref().to_stable();
    torch::stable::copy_(dst, x.to_stable());
  }
  return out;
}

}  // namespace cpu
}  // namespace my_ops
