#include <torch/headeronly/core/Dispatch_v2.h>

#include "ops/common/cpu_kernel.h"
#include "ops/fused_bias_gelu/cpu_vec.h"
#include "ops/fused_bias_gelu/fused_bias_gelu.h"

namespace my_ops {
namespace {

// fused_bias_gelu into a contiguous `out` of x's shape, the arguments checked.
void fused_bias_gelu_into(TensorRef x, TensorRef bias, GeluApproximation approx, TensorRef out) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const ContiguousAs x_contig(x);
  const int64_t row_length = x.sizes().back();
  THO_DISPATCH_V2(x.scalar_type(), "fused_bias_gelu_cpu", AT_WRAP([&] {
                    using acc_t = acc_type<scalar_t>;
                    // Widening the (short) bias once up front saves a conversion per element in the
                    // kernel.
                    const ContiguousAs acc_bias(
                        bias, torch::headeronly::CppTypeToScalarType<acc_t>::value);
                    const scalar_t* x_data = x_contig.ref().data_as<scalar_t>();
                    const acc_t* bias_data = acc_bias.ref().data_as<acc_t>();
                    scalar_t* out_data = out.mutable_data_as<scalar_t>();
                    const auto bias_gelu = approx == GeluApproximation::kNone
                                               ? &cpu_vec::bias_gelu_erf<scalar_t>
                                               : &cpu_vec::bias_gelu_tanh<scalar_t>;
                    // Parallel over the flat range rather than over rows, so that a few long rows
                    // use every thread as well as many short ones do.
                    parallel_for_work(0, numel, kGrainSize, numel, [&](int64_t begin, int64_t end) {
                      bias_gelu(x_data, bias_data, out_data, begin, end, row_length);
                    });
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor fused_bias_gelu(TensorRef x, TensorRef bias, std::string_view approximate) {
  const GeluApproximation approx = check_fused_bias_gelu_args(x, bias, approximate);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  fused_bias_gelu_into(x, bias, approx, out);
  return out;
}

void fused_bias_gelu_out(TensorRef x, TensorRef bias, std::string_view approximate, TensorRef out) {
  const GeluApproximation approx = check_fused_bias_gelu_args(x, bias, approximate);
  check_out("fused_bias_gelu_out", out, x.sizes(), "x", x, {{"x", x}, {"bias", bias}});
  write_out(out, [&](TensorRef dst) { fused_bias_gelu_into(x, bias, approx, dst); });
}

}  // namespace cpu
}  // namespace my_ops
