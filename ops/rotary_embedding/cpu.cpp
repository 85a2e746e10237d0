#include <torch/headeronly/core/Dispatch_v2.h>

#include <algorithm>

#include "ops/common/cpu_kernel.h"
#include "ops/rotary_embedding/cpu_vec.h"
#include "ops/rotary_embedding/rotary_embedding.h"

namespace my_ops {
namespace {

template <typename scalar_t>
void rotary_kernel(TensorRef x, TensorRef cos, TensorRef sin, bool interleaved,
                   const RotaryShape& shape, TensorRef out) {
  using acc_t = acc_type<scalar_t>;
  // The tables are read once per head and leading index: widening them once up front saves a
  // conversion per element in the kernel.
  constexpr ScalarType acc_type = torch::headeronly::CppTypeToScalarType<acc_t>::value;
  const ContiguousAs acc_cos(cos, acc_type);
  const ContiguousAs acc_sin(sin, acc_type);
  const scalar_t* x_data = x.data_as<scalar_t>();
  const acc_t* cos_data = acc_cos.ref().data_as<acc_t>();
  const acc_t* sin_data = acc_sin.ref().data_as<acc_t>();
  scalar_t* out_data = out.mutable_data_as<scalar_t>();
  const int64_t row_length = 2 * shape.half;
  const int64_t rows = x.numel() / row_length;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / row_length);
  parallel_for_work(0, rows, grain, rows * row_length, [&](int64_t begin, int64_t end) {
    cpu_vec::rotary_embedding(x_data, cos_data, sin_data, out_data, begin, end, shape.seq,
                              shape.heads, shape.half, interleaved);
  });
}

// rotary_embedding into a contiguous `out` of x's shape, the arguments checked.
void rotary_embedding_into(TensorRef x, TensorRef cos, TensorRef sin, bool interleaved,
                           const RotaryShape& shape, TensorRef out) {
  if (out.numel() == 0) return;
  const ContiguousAs x_contig(x);
  THO_DISPATCH_V2(x.scalar_type(), "rotary_embedding_cpu", AT_WRAP([&] {
                    rotary_kernel<scalar_t>(x_contig, cos, sin, interleaved, shape, out);
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor rotary_embedding(TensorRef x, TensorRef cos, TensorRef sin, bool interleaved) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  rotary_embedding_into(x, cos, sin, interleaved, shape, out);
  return out;
}

void rotary_embedding_out(TensorRef x, TensorRef cos, TensorRef sin, bool interleaved,
                          TensorRef out) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin);
  check_out("rotary_embedding_out", out, x.sizes(), "x", x, {{"x", x}, {"cos", cos}, {"sin", sin}});
  write_out(out,
            [&](TensorRef dst) { rotary_embedding_into(x, cos, sin, interleaved, shape, dst); });
}

}  // namespace cpu
}  // namespace my_ops
