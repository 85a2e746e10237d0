#pragma once

// Argument checks shared by every op. Each helper takes the op name and the argument name so that
// a failure message points the caller at the exact argument, e.g.
//   "fused_bias_gelu: expected bias to have size 1024 (the last dim of x), got 3".
// The checks only read tensor metadata, so they are safe to run before any kernel is dispatched.
// They take at::TensorBase, which the CPU kernels' at::Tensor converts to, so that the CUDA kernels
// compile without at::Tensor (see ops/registration.cpp).

#include <ATen/MemoryOverlap.h>
#include <ATen/core/TensorBase.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <initializer_list>
#include <utility>

namespace my_ops {

inline bool is_supported_floating_dtype(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf ||
         dtype == at::kBFloat16;
}

// Each check below tests all its conditions in one inline expression and, only when one fails,
// calls its cold counterpart in `detail`, which tests them again one by one to say which. At the
// sizes edge models run (64 elements) a call costs more than its work, and `perf` put the checks
// at a fifth of a call when each was a function of TORCH_CHECKs, too large to inline.
namespace detail {

C10_NOINLINE inline void fail_primary_input(c10::string_view op, c10::string_view name,
                                            const at::TensorBase& t) {
  TORCH_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  TORCH_CHECK(is_supported_floating_dtype(t.scalar_type()), op, ": expected ", name,
              " to have a floating dtype (float32, float64, float16 or bfloat16), got ",
              t.scalar_type());
  TORCH_CHECK(t.dim() >= 1, op, ": expected ", name,
              " to have at least 1 dimension, got a 0-d tensor");
}

C10_NOINLINE inline void fail_same_device_and_dtype(c10::string_view op, c10::string_view name,
                                                    const at::TensorBase& t,
                                                    c10::string_view primary_name,
                                                    const at::TensorBase& primary) {
  TORCH_CHECK(t.defined(), op, ": expected ", name, " to be a defined tensor");
  TORCH_CHECK(t.device() == primary.device(), op, ": expected ", name,
              " to be on the same device as ", primary_name, " (", primary.device(), "), got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == primary.scalar_type(), op, ": expected ", name,
              " to have the same dtype as ", primary_name, " (", primary.scalar_type(), "), got ",
              t.scalar_type());
}

C10_NOINLINE inline void fail_last_dim_vector(c10::string_view op, c10::string_view name,
                                              const at::TensorBase& t,
                                              c10::string_view primary_name,
                                              const at::TensorBase& primary) {
  fail_same_device_and_dtype(op, name, t, primary_name, primary);
  TORCH_CHECK(t.dim() == 1, op, ": expected ", name, " to be 1-D, got ", t.dim(), "-D with shape ",
              t.sizes());
  TORCH_CHECK(t.size(0) == primary.size(-1), op, ": expected ", name, " to have size ",
              primary.size(-1), " (the last dim of ", primary_name, "), got ", t.size(0));
}

C10_NOINLINE inline void fail_same_shape(c10::string_view op, c10::string_view name,
                                         const at::TensorBase& t, c10::string_view primary_name,
                                         const at::TensorBase& primary) {
  fail_same_device_and_dtype(op, name, t, primary_name, primary);
  TORCH_CHECK(t.sizes() == primary.sizes(), op, ": expected ", name, " to have the same shape as ",
              primary_name, " (", primary.sizes(), "), got ", t.sizes());
}

C10_NOINLINE inline void fail_out(c10::string_view op, const at::TensorBase& out,
                                  at::IntArrayRef sizes, c10::string_view primary_name,
                                  const at::TensorBase& primary) {
  fail_same_device_and_dtype(op, "out", out, primary_name, primary);
  TORCH_CHECK(out.sizes() == sizes, op, ": expected out to have shape ", sizes,
              " (the shape of the result), got ", out.sizes());
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
              ": expected out to have no repeated elements (an expanded tensor cannot be written)");
}

inline bool same_device_and_dtype(const at::TensorBase& t, const at::TensorBase& primary) {
  return t.defined() && t.device() == primary.device() && t.scalar_type() == primary.scalar_type();
}

}  // namespace detail

// The first tensor argument of an op: a floating tensor with at least one dimension.
inline void check_primary_input(c10::string_view op, c10::string_view name,
                                const at::TensorBase& t) {
  if (C10_LIKELY(t.defined() && is_supported_floating_dtype(t.scalar_type()) && t.dim() >= 1)) {
    return;
  }
  detail::fail_primary_input(op, name, t);
}

// A secondary tensor argument must live on the same device and share the dtype of the primary one,
// because the kernels read every operand with a single scalar type and a single device pointer.
inline void check_same_device_and_dtype(c10::string_view op, c10::string_view name,
                                        const at::TensorBase& t, c10::string_view primary_name,
                                        const at::TensorBase& primary) {
  if (C10_LIKELY(detail::same_device_and_dtype(t, primary))) return;
  detail::fail_same_device_and_dtype(op, name, t, primary_name, primary);
}

// A per-feature parameter (bias, weight) broadcast over the last dim of the primary input.
inline void check_last_dim_vector(c10::string_view op, c10::string_view name,
                                  const at::TensorBase& t, c10::string_view primary_name,
                                  const at::TensorBase& primary) {
  if (C10_LIKELY(detail::same_device_and_dtype(t, primary) && t.dim() == 1 && primary.dim() >= 1 &&
                 t.sizes()[0] == primary.sizes().back())) {
    return;
  }
  detail::fail_last_dim_vector(op, name, t, primary_name, primary);
}

inline void check_same_shape(c10::string_view op, c10::string_view name, const at::TensorBase& t,
                             c10::string_view primary_name, const at::TensorBase& primary) {
  if (C10_LIKELY(detail::same_device_and_dtype(t, primary) && t.sizes() == primary.sizes())) {
    return;
  }
  detail::fail_same_shape(op, name, t, primary_name, primary);
}

inline void check_non_negative(c10::string_view op, c10::string_view name, double value) {
  // Phrased as `value >= 0` so that NaN is rejected too.
  TORCH_CHECK(value >= 0.0, op, ": expected ", name, " to be >= 0, got ", value);
}

// The `out` argument of an op's out= companion (<op>_out, see ops/registration.cpp): the tensor
// the op would allocate, of `sizes` and the primary's dtype and device, sharing no memory with
// an input. A strided `out` is fine (the kernels write it through a contiguous temporary); an
// expanded one, whose elements repeat, is not.
inline void check_out(
    c10::string_view op, const at::TensorBase& out, at::IntArrayRef sizes,
    c10::string_view primary_name, const at::TensorBase& primary,
    std::initializer_list<std::pair<c10::string_view, const at::TensorBase*>> inputs) {
  // A contiguous tensor repeats no element, and tensors whose storages' bytes are apart share none:
  // the common cases stay a few pointer comparisons.
  if (C10_UNLIKELY(
          !(detail::same_device_and_dtype(out, primary) && out.sizes() == sizes &&
            (out.is_contiguous() || at::has_internal_overlap(out) != at::MemOverlap::Yes)))) {
    detail::fail_out(op, out, sizes, primary_name, primary);
  }
  for (const auto& [name, input] : inputs) {
    const c10::Storage& out_storage = out.unsafeGetTensorImpl()->unsafe_storage();
    const c10::Storage& input_storage = input->unsafeGetTensorImpl()->unsafe_storage();
    if (!out_storage || !input_storage) continue;  // A tensor without storage holds no bytes.
    const auto* out_bytes = static_cast<const char*>(out_storage.data());
    const auto* input_bytes = static_cast<const char*>(input_storage.data());
    if (out_bytes >= input_bytes + input_storage.nbytes() ||
        input_bytes >= out_bytes + out_storage.nbytes()) {
      continue;
    }
    // Bytes of one storage: only a proof of no overlap lets the call go on (TooHard, which
    // strided views give, does not).
    TORCH_CHECK(at::get_overlap_status(out, *input) == at::MemOverlapStatus::No, op,
                ": expected out to share no memory with ", name);
  }
}

}  // namespace my_ops
