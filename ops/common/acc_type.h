#pragma once

// The type the kernels compute in for each element type, as ATen's at::opmath_type chooses it
// for the types the ops take: float for Half and BFloat16, whose own arithmetic would round after
// every step, and the type itself for float and double. (at::opmath_type is not among the stable
// headers; the CPU kernels' cpu_vec.cpp units, which see ATen's, check that the two agree.)

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

namespace my_ops {

template <typename scalar_t>
struct AccType {
  using type = scalar_t;
};
template <>
struct AccType<c10::Half> {
  using type = float;
};
template <>
struct AccType<c10::BFloat16> {
  using type = float;
};

template <typename scalar_t>
using acc_type = typename AccType<scalar_t>::type;

}  // namespace my_ops
