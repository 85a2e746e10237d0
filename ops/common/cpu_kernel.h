#pragma once

// What every CPU kernel does around its loop, kept cheap for the smallest tensors an edge model
// passes (a 1 x 64 activation is 64 elements, well under a microsecond of work).

#include <torch/csrc/stable/ops.h>

#include <cstdint>

namespace my_ops {

// torch's own grain for parallel loops (at::internal::GRAIN_SIZE), in elements.
inline constexpr int64_t kGrainSize = 32768;

// Below this many elements of work a kernel runs on the calling thread. torch's parallel_for also
// stays on one thread below its grain, but only after a call into LibTorch that initialises
// OpenMP's thread count and sets its thread-local guards; this skips those too. Measured on a
// 2-core x86-64 machine (fused_bias_gelu, float32, 1,000 calls, median of 9 interleaved rounds):
// at 65,536 elements two threads took 0.71x of one thread's 43 us, so a split costs about 9 us
// over half the work; at 0.8 ns an element, splitting loses below about 2 x 9 us of work, 22,000
// elements. torch's own grain sits just above that, and the kernels keep it.
inline constexpr int64_t kSerialBelowElements = 32768;

// torch::stable::parallel_for(begin, end, grain, f), or f(begin, end) here when `elements` (the
// work the whole range stands for) is below kSerialBelowElements.
template <class F>
void parallel_for_work(int64_t begin, int64_t end, int64_t grain, int64_t elements, const F& f) {
  if (elements < kSerialBelowElements) {
    if (begin < end) f(begin, end);
    return;
  }
  torch::stable::parallel_for(begin, end, grain, f);
}

}  // namespace my_ops
