#pragma once
// The walk along a run of consecutive elements that the two-input CPU kernels share: their vector
// code, kWidth elements at a time, and the tail through the same vector code on zero-padded
// buffers, so that every element gets bit-identical math wherever it sits in the row.

#include <algorithm>
#include <cstdint>

namespace my_ops::cpu_vec {

// vector(a, b, out) computes kWidth outputs from kWidth elements of each input.
template <int64_t kWidth, typename A, typename B, typename Out, typename Vector>
inline void for_each_vector(const A* a, const B* b, Out* out, int64_t length,
                            const Vector& vector) {
  int64_t i = 0;
  for (; i + kWidth <= length; i += kWidth) {
    vector(a + i, b + i, out + i);
  }
  if (i < length) {
    const int64_t count = length - i;
    A a_buf[kWidth] = {};
    B b_buf[kWidth] = {};
    Out out_buf[kWidth];
    std::copy_n(a + i, count, a_buf);
    std::copy_n(b + i, count, b_buf);
    vector(a_buf, b_buf, out_buf);
    std::copy_n(out_buf, count, out + i);
  }
}

}  // namespace my_ops::cpu_vec
