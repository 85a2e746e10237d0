#include <torch/headeronly/core/Dispatch_v2.h>

#include <algorithm>
#include <optional>

#include "ops/common/cpu_kernel.h"
#include "ops/rotary_embedding/cpu_vec.h"
#include "ops/rotary_embedding/rotary_embedding.h"

namespace my_ops {
namespace {

// The tables' row of every token, each checked to be one of them: a position the tables do not
// hold would read past them.
void check_positions_in_range(const int64_t* positions, int64_t count, int64_t table_rows) {
  for (int64_t i = 0; i < count; ++i) {
    MY_OPS_CHECK(positions[i] >= 0 && positions[i] < table_rows, "rotary_embedding: expected ",
                 "positions to be in [0, ", table_rows, ") (the rows of cos and sin), got ",
                 positions[i], " at index ", i);
  }
}

template <typename scalar_t>
void rotary_kernel(TensorRef x, TensorRef cos, TensorRef sin, const int64_t* positions,
                   bool interleaved, const RotaryShape& shape, TensorRef out) {
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
  const cpu_vec::RotaryRows rows{shape.heads, shape.head_dim, shape.half,
                                 positions == nullptr ? shape.seq : shape.position_period,
                                 positions};
  const int64_t rows_count = x.numel() / shape.head_dim;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / shape.head_dim);
  parallel_for_work(0, rows_count, grain, rows_count * shape.head_dim,
                    [&](int64_t begin, int64_t end) {
                      cpu_vec::rotary_embedding(x_data, cos_data, sin_data, out_data, begin, end,
                                                rows, interleaved);
                    });
}

// rotary_embedding into a contiguous `out` of x's shape, the arguments checked.
void rotary_embedding_into(TensorRef x, TensorRef cos, TensorRef sin, bool interleaved,
                           TensorRef positions, const RotaryShape& shape, TensorRef out) {
  std::optional<ContiguousAs> positions_contig;
  const int64_t* positions_data = nullptr;
  if (positions.defined()) {
    positions_contig.emplace(positions);
    positions_data = positions_contig->ref().data_as<int64_t>();
    // Before anything else, so that an empty x does not make a bad position good.
    check_positions_in_range(positions_data, shape.position_period, shape.table_rows);
  }
  if (out.numel() == 0) return;
  const ContiguousAs x_contig(x);
  THO_DISPATCH_V2(x.scalar_type(), "rotary_embedding_cpu", AT_WRAP([&] {
                    rotary_kernel<scalar_t>(x_contig, cos, sin, positions_data, interleaved, shape,
                                            out);
                  }),
                  AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
                  torch::headeronly::ScalarType::BFloat16);
}

}  // namespace

// The CPU kernels, which the library's generated code registers at the CPU key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cpu {

OwnedTensor rotary_embedding(TensorRef x, TensorRef cos, TensorRef sin, TensorRef positions,
                             bool interleaved) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin, positions);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  rotary_embedding_into(x, cos, sin, interleaved, positions, shape, out);
  return out;
}

void rotary_embedding_out(TensorRef x, TensorRef cos, TensorRef sin, TensorRef positions,
                          bool interleaved, TensorRef out) {
  const RotaryShape shape = check_rotary_embedding_args(x, cos, sin, positions);
  check_out("rotary_embedding_out", out, x.sizes(), "x", x,
            {{"x", x}, {"cos", cos}, {"sin", sin}, {"positions", positions}});
  write_out(out, [&](TensorRef dst) {
    rotary_embedding_into(x, cos, sin, interleaved, positions, shape, dst);
  });
}

}  // namespace cpu
}  // namespace my_ops
