#pragma once

// What every CPU kernel does around its loop, kept cheap for the smallest tensors an edge model
// passes (a 1 x 64 activation is 64 elements, well under a microsecond of work): at::empty and
// Tensor::to are dispatcher calls (through the autograd keys, since a kernel runs without their
// exclusion), and at::parallel_for sets up OpenMP state, each a fixed cost per call. These helpers
// skip whatever has nothing to do. The argument checks stay.

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/MaybeOwned.h>

#include <cstdint>

namespace my_ops {

// Below this many elements of work a kernel runs on the calling thread. at::parallel_for also
// stays on one thread below its grain, but only after initialising OpenMP's thread count and
// setting its thread-local guards; this skips those too. Measured on a 2-core x86-64 machine
// (fused_bias_gelu, float32, 1,000 calls, median of 9 interleaved rounds): at 65,536 elements
// two threads took 0.71x of one thread's 43 us, so a split costs about 9 us over half the work;
// at 0.8 ns an element, splitting loses below about 2 x 9 us of work, 22,000 elements. torch's
// own grain (at::internal::GRAIN_SIZE) sits just above that, and the kernels keep it.
constexpr int64_t kSerialBelowElements = 32768;

// at::parallel_for(begin, end, grain, f), or f(begin, end) here when `elements` (the work the
// whole range stands for) is below kSerialBelowElements.
template <class F>
void parallel_for_work(int64_t begin, int64_t end, int64_t grain, int64_t elements, const F& f) {
  if (elements < kSerialBelowElements) {
    if (begin < end) f(begin, end);
    return;
  }
  at::parallel_for(begin, end, grain, f);
}

// A contiguous CPU tensor of `sizes` with x's dtype, allocated without a dispatcher call (as
// ATen's own CPU kernels allocate their outputs).
inline at::Tensor empty_cpu_like(const at::TensorBase& x, at::IntArrayRef sizes) {
  return at::Tensor(at::detail::empty_cpu(sizes, x.scalar_type(), /*pin_memory=*/false,
                                          at::MemoryFormat::Contiguous));
}

// `t` as a contiguous tensor of `dtype`: `t` itself, borrowed, when it is one already, which a
// parameter of the accumulation type (a float32 weight of a float32 model) always is. Borrowing
// (as Tensor::expect_contiguous does) saves a reference count update on each side of the call.
inline c10::MaybeOwned<at::Tensor> contiguous_as(const at::Tensor& t, at::ScalarType dtype) {
  if (t.scalar_type() == dtype && t.is_contiguous())
    return c10::MaybeOwned<at::Tensor>::borrowed(t);
  return c10::MaybeOwned<at::Tensor>::owned(t.to(dtype).contiguous());
}

// A kernel's pointers to the data of a tensor whose dtype the op's checks established, as T:
// Tensor::const_data_ptr<T> and mutable_data_ptr<T> check the dtype again, out of line.
template <class T>
const T* data_as(const at::TensorBase& t) {
  return static_cast<const T*>(t.const_data_ptr());
}
template <class T>
T* mutable_data_as(const at::TensorBase& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

// Has `write` fill `out` (checked by check_out) and returns it: the body of an out= companion.
// `write` takes a contiguous tensor; a strided `out` (a slice of a larger buffer, which Inductor
// may plan an output into) is written through a contiguous temporary and copied.
template <class Write>
at::Tensor& write_out(at::Tensor& out, const Write& write) {
  if (out.numel() == 0) return out;
  if (out.is_contiguous()) {
    write(out);
    return out;
  }
  at::Tensor contiguous = empty_cpu_like(out, out.sizes());
  write(contiguous);
  out.copy_(contiguous);
  return out;
}

}  // namespace my_ops
