#include <torch/headeronly/core/Dispatch_v2.h>

#include "ops/common/cpu_kernel.h"
#include "ops/silu_and_mul/cpu_vec.h"
#include "ops/silu_and_mul/silu_and_mul.h"

namespace my_ops {
namespace {

// silu_and_mul into a contiguous `out` of the result's shape, the argument checked.
void silu_and_mul_into(TensorRef x, TensorRef out) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const ContiguousAs x_contig(x);
  const int64_t d = out.sizes().back();
  THO_DISPATCH_V2(x.scalar_type(), "silu_and_mul_cpu", AT_WRAP([&] {
                    const scalar_t* x_data = x_contig.ref().data_as<scalar_t>();
                    scalar_t* out_data = out.mutable_data_as<scalar_t>();
                    // Parallel over the flat output rather than over rows, so that a few long rows
                    // use every thread as well as many short ones do.
                    parallel_for_work(0, numel, kGrainSize, numel, [&](int64_t begin, int64_t end) {
                      cpu_vec::silu_and_mul(x_data, out_data, begin, end, d);
                    });
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor silu_and_mul(TensorRef x) {
  const Sizes out_sizes = check_silu_and_mul_args(x);
  OwnedTensor out = empty_like_with_sizes(x, out_sizes);
  silu_and_mul_into(x, out);
  return out;
}

void silu_and_mul_out(TensorRef x, TensorRef out) {
  const Sizes out_sizes = check_silu_and_mul_args(x);
  check_out("silu_and_mul_out", out, out_sizes, "x", x, {{"x", x}});
  write_out(out, [&](TensorRef dst) { silu_and_mul_into(x, dst); });
}

}  // namespace cpu
}  // namespace my_ops
