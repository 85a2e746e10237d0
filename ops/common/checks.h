#pragma once

// Argument checks shared by every op. Each helper takes the op name and the argument name so that
// a failure message points the caller at the exact argument, e.g.
//   "fused_bias_gelu: expected bias to have size 1024 (the last dim of x), got 3".
// The checks only read tensor metadata, so they are safe to run before any kernel is dispatched.
// A failure throws std::runtime_error with the message alone (torch turns it into a RuntimeError);
// STD_TORCH_CHECK would prefix the C++ function, file and line.

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "tools/torch/stable_tensor.h"

namespace my_ops {

inline bool is_supported_floating_dtype(ScalarType dtype) {
  return dtype == ScalarType::Float || dtype == ScalarType::Double || dtype == ScalarType::Half ||
         dtype == ScalarType::BFloat16;
}

namespace detail {

// How torch prints these in its own messages: "cpu", "cuda:0"; "[2, 3]". (A dtype prints as
// "Float" through the headers' own operator<<.)
struct DeviceName {
  int32_t type;
  int32_t index;
};
inline std::ostream& operator<<(std::ostream& os, DeviceName device) {
  if (device.type == kCpu) return os << "cpu";
  if (device.type == kCuda) return os << "cuda:" << device.index;
  return os << "device type " << device.type << ":" << device.index;
}
inline DeviceName device_of(TensorRef t) { return {t.device_type(), t.device_index()}; }

struct Shape {
  IntArrayRef sizes;
};
inline std::ostream& operator<<(std::ostream& os, Shape shape) {
  os << "[";
  for (size_t i = 0; i < shape.sizes.size(); ++i) os << (i ? ", " : "") << shape.sizes[i];
  return os << "]";
}

template <class... Args>
[[noreturn]] __attribute__((noinline, cold)) void fail(const Args&... args) {
  std::ostringstream message;
  (message << ... << args);
  throw std::runtime_error(message.str());
}

#define MY_OPS_CHECK(cond, ...)                                            \
  do {                                                                     \
    if (__builtin_expect(!(cond), 0)) ::my_ops::detail::fail(__VA_ARGS__); \
  } while (false)

// Each check below tests all its conditions in one inline expression and, only when one fails,
// calls its cold counterpart here, which tests them again one by one to say which. At the sizes
// edge models run (64 elements) a call costs more than its work, and `perf` put the checks at a
// fifth of a call when each was a function of separate checks, too large to inline.

__attribute__((noinline, cold)) inline void fail_primary_input(std::string_view op,
                                                               std::string_view name, TensorRef t) {
  MY_OPS_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  MY_OPS_CHECK(is_supported_floating_dtype(t.scalar_type()), op, ": expected ", name,
               " to have a floating dtype (float32, float64, float16 or bfloat16), got ",
               t.scalar_type());
  MY_OPS_CHECK(t.dim() >= 1, op, ": expected ", name,
               " to have at least 1 dimension, got a 0-d tensor");
}

// Fails unless `t` is defined and on `primary`'s device; returns otherwise.
__attribute__((noinline, cold)) inline void fail_same_device(std::string_view op,
                                                             std::string_view name, TensorRef t,
                                                             std::string_view primary_name,
                                                             TensorRef primary) {
  MY_OPS_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  MY_OPS_CHECK(
      t.device_type() == primary.device_type() && t.device_index() == primary.device_index(), op,
      ": expected ", name, " to be on the same device as ", primary_name, " (", device_of(primary),
      "), got ", device_of(t));
}

__attribute__((noinline, cold)) inline void fail_same_device_and_dtype(
    std::string_view op, std::string_view name, TensorRef t, std::string_view primary_name,
    TensorRef primary) {
  fail_same_device(op, name, t, primary_name, primary);
  MY_OPS_CHECK(t.scalar_type() == primary.scalar_type(), op, ": expected ", name,
               " to have the same dtype as ", primary_name, " (", primary.scalar_type(), "), got ",
               t.scalar_type());
}

__attribute__((noinline, cold)) inline void fail_last_dim_vector(std::string_view op,
                                                                 std::string_view name, TensorRef t,
                                                                 std::string_view primary_name,
                                                                 TensorRef primary) {
  fail_same_device_and_dtype(op, name, t, primary_name, primary);
  MY_OPS_CHECK(t.dim() == 1, op, ": expected ", name, " to be 1-D, got ", t.dim(), "-D with shape ",
               Shape{t.sizes()});
  MY_OPS_CHECK(t.size(0) == primary.size(-1), op, ": expected ", name, " to have size ",
               primary.size(-1), " (the last dim of ", primary_name, "), got ", t.size(0));
}

__attribute__((noinline, cold)) inline void fail_same_shape(std::string_view op,
                                                            std::string_view name, TensorRef t,
                                                            std::string_view primary_name,
                                                            TensorRef primary) {
  fail_same_device_and_dtype(op, name, t, primary_name, primary);
  MY_OPS_CHECK(t.sizes() == primary.sizes(), op, ": expected ", name, " to have the same shape as ",
               primary_name, " (", Shape{primary.sizes()}, "), got ", Shape{t.sizes()});
}

// Whether some element of `t` is stored twice: a dimension of size > 1 with stride 0, which is
// what expanded tensors have. (The cases ATen's has_internal_overlap answers Yes to.)
inline bool repeats_elements(TensorRef t) {
  const IntArrayRef sizes = t.sizes();
  const IntArrayRef strides = t.strides();
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && strides[d] == 0) return true;
  }
  return false;
}

__attribute__((noinline, cold)) inline void fail_out(std::string_view op, TensorRef out,
                                                     IntArrayRef sizes,
                                                     std::string_view primary_name,
                                                     TensorRef primary) {
  fail_same_device_and_dtype(op, "out", out, primary_name, primary);
  MY_OPS_CHECK(out.sizes() == sizes, op, ": expected out to have shape ", Shape{sizes},
               " (the shape of the result), got ", Shape{out.sizes()});
  MY_OPS_CHECK(!repeats_elements(out), op,
               ": expected out to have no repeated elements (an expanded tensor cannot be "
               "written)");
}

inline bool same_device_and_dtype(TensorRef t, TensorRef primary) {
  return t.defined() && t.device_type() == primary.device_type() &&
         t.device_index() == primary.device_index() && t.scalar_type() == primary.scalar_type();
}

// The bytes a tensor's elements span, from its lowest to past its highest element: two tensors
// whose spans are apart share no memory.
struct ByteSpan {
  const char* begin;
  const char* end;
};
inline ByteSpan byte_span(TensorRef t, int64_t element_size) {
  const IntArrayRef sizes = t.sizes();
  const IntArrayRef strides = t.strides();
  int64_t low = 0;
  int64_t high = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t reach = (sizes[d] - 1) * strides[d];
    (reach < 0 ? low : high) += reach;
  }
  const char* data = static_cast<const char*>(t.data_ptr());
  return {data + low * element_size, data + (high + 1) * element_size};
}

inline int64_t element_size(ScalarType dtype) {
  switch (dtype) {
    case ScalarType::Double:
    case ScalarType::Long:
      return 8;
    case ScalarType::Float:
    case ScalarType::Int:
      return 4;
    default:
      return 2;  // the half-precision types
  }
}

}  // namespace detail

// The first tensor argument of an op: a floating tensor with at least one dimension.
inline void check_primary_input(std::string_view op, std::string_view name, TensorRef t) {
  if (__builtin_expect(t.defined() && is_supported_floating_dtype(t.scalar_type()) && t.dim() >= 1,
                       1)) {
    return;
  }
  detail::fail_primary_input(op, name, t);
}

// A secondary tensor argument must live on the same device and share the dtype of the primary one,
// because the kernels read every operand with a single scalar type and a single device pointer.
inline void check_same_device_and_dtype(std::string_view op, std::string_view name, TensorRef t,
                                        std::string_view primary_name, TensorRef primary) {
  if (__builtin_expect(detail::same_device_and_dtype(t, primary), 1)) return;
  detail::fail_same_device_and_dtype(op, name, t, primary_name, primary);
}

// A per-feature parameter (bias, weight) broadcast over the last dim of the primary input.
inline void check_last_dim_vector(std::string_view op, std::string_view name, TensorRef t,
                                  std::string_view primary_name, TensorRef primary) {
  if (__builtin_expect(detail::same_device_and_dtype(t, primary) && t.dim() == 1 &&
                           primary.dim() >= 1 && t.sizes()[0] == primary.sizes().back(),
                       1)) {
    return;
  }
  detail::fail_last_dim_vector(op, name, t, primary_name, primary);
}

inline void check_same_shape(std::string_view op, std::string_view name, TensorRef t,
                             std::string_view primary_name, TensorRef primary) {
  if (__builtin_expect(detail::same_device_and_dtype(t, primary) && t.sizes() == primary.sizes(),
                       1)) {
    return;
  }
  detail::fail_same_shape(op, name, t, primary_name, primary);
}

inline void check_non_negative(std::string_view op, std::string_view name, double value) {
  // Phrased as `value >= 0` so that NaN is rejected too.
  MY_OPS_CHECK(value >= 0.0, op, ": expected ", name, " to be >= 0, got ", value);
}

// A tensor an in-place op writes: one whose elements each have their own memory (not expanded).
inline void check_writable_in_place(std::string_view op, std::string_view name, TensorRef t) {
  MY_OPS_CHECK(t.is_contiguous() || !detail::repeats_elements(t), op, ": expected ", name,
               " to have no repeated elements (an expanded tensor cannot be written in place)");
}

// Two arguments of which one is written: their bytes may not overlap.
inline void check_no_shared_memory(std::string_view op, std::string_view name, TensorRef t,
                                   std::string_view other_name, TensorRef other) {
  if (t.numel() == 0 || other.numel() == 0) return;
  const detail::ByteSpan a = detail::byte_span(t, detail::element_size(t.scalar_type()));
  const detail::ByteSpan b = detail::byte_span(other, detail::element_size(other.scalar_type()));
  MY_OPS_CHECK(a.begin >= b.end || b.begin >= a.end, op, ": expected ", name,
               " to share no memory with ", other_name);
}

// The `out` argument of an op's out= companion (<op>_out, see ops/registration.cpp): the tensor
// the op would allocate, of `sizes` and the primary's dtype and device, sharing no memory with
// an input. A strided `out` is fine (the kernels write it through a contiguous temporary); an
// expanded one, whose elements repeat, is not.
inline void check_out(std::string_view op, TensorRef out, IntArrayRef sizes,
                      std::string_view primary_name, TensorRef primary,
                      std::initializer_list<std::pair<std::string_view, TensorRef>> inputs) {
  if (__builtin_expect(!(detail::same_device_and_dtype(out, primary) && out.sizes() == sizes &&
                         (out.is_contiguous() || !detail::repeats_elements(out))),
                       0)) {
    detail::fail_out(op, out, sizes, primary_name, primary);
  }
  if (out.numel() == 0) return;  // No bytes to share.
  const int64_t element_size = detail::element_size(out.scalar_type());
  const detail::ByteSpan out_span = detail::byte_span(out, element_size);
  for (const auto& [name, input] : inputs) {
    if (!input.defined() || input.numel() == 0) continue;  // An optional input given as None.
    const detail::ByteSpan input_span =
        detail::byte_span(input, detail::element_size(input.scalar_type()));
    MY_OPS_CHECK(out_span.begin >= input_span.end || input_span.begin >= out_span.end, op,
                 ": expected out to share no memory with ", name);
  }
}

}  // namespace my_ops
