#pragma once

// The op library's tensors, on LibTorch's stable ABI only (torch/csrc/stable and AOTInductor's C
// shims), so that one build of the library runs under every torch release from the one it targets
// (TORCH_TARGET_VERSION, kernel_flags.bzl) on. Op libraries' kernels and their generated C shims
// (c_shims.py) share it.
//
// TensorRef borrows a tensor handle. An op's C shim receives handles it does not own, and
// torch::stable::Tensor owns its handle: wrapping each argument in one would cost a new handle and
// a shared_ptr per argument and call, a visible part of a call at edge sizes. OwnedTensor owns a
// new handle, and hands it over (release) to a C shim's caller or to a torch::stable::Tensor.

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/HeaderOnlyArrayRef.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace my_ops {

using torch::headeronly::ScalarType;
using IntArrayRef = torch::headeronly::HeaderOnlyArrayRef<int64_t>;

// DeviceType's values, which AOTInductor's C API passes as int32_t (aoti_torch_device_type_cpu()
// and _cuda() return them; they are part of its serialized format and never renumbered).
inline constexpr int32_t kCpu = 0;
inline constexpr int32_t kCuda = 1;

class TensorRef {
 public:
  explicit TensorRef(AtenTensorHandle handle) : handle_(handle) {}
  // NOLINTNEXTLINE(google-explicit-constructor): a borrowed view of the tensor, as a reference.
  TensorRef(const torch::stable::Tensor& tensor) : handle_(tensor.get()) {}

  AtenTensorHandle get() const { return handle_; }

  bool defined() const {
    bool defined = false;
    return handle_ != nullptr && aoti_torch_is_defined(handle_, &defined) == AOTI_TORCH_SUCCESS &&
           defined;
  }
  int64_t dim() const {
    int64_t dim;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dim(handle_, &dim));
    return dim;
  }
  IntArrayRef sizes() const {
    int64_t* sizes;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_sizes(handle_, &sizes));
    return IntArrayRef(sizes, static_cast<size_t>(dim()));
  }
  IntArrayRef strides() const {
    int64_t* strides;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_strides(handle_, &strides));
    return IntArrayRef(strides, static_cast<size_t>(dim()));
  }
  int64_t size(int64_t d) const {
    const IntArrayRef all = sizes();
    return all[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(all.size()) : d)];
  }
  int64_t numel() const {
    int64_t numel;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_numel(handle_, &numel));
    return numel;
  }
  // The enum's values are AOTInductor's int32_t dtype codes (aoti_torch_dtype_float32() returns
  // ScalarType::Float's), for the same reason as the device types above.
  ScalarType scalar_type() const {
    int32_t dtype;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(handle_, &dtype));
    return static_cast<ScalarType>(dtype);
  }
  int32_t device_type() const {
    int32_t type;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(handle_, &type));
    return type;
  }
  int32_t device_index() const {
    int32_t index;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(handle_, &index));
    return index;
  }
  bool is_contiguous() const {
    bool contiguous;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_is_contiguous(handle_, &contiguous));
    return contiguous;
  }
  // The first element's address (storage data plus offset). A kernel reads it as the dtype the
  // op's checks established.
  void* data_ptr() const {
    void* data;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_data_ptr(handle_, &data));
    return data;
  }
  template <class T>
  const T* data_as() const {
    return static_cast<const T*>(data_ptr());
  }
  template <class T>
  T* mutable_data_as() const {
    return static_cast<T*>(data_ptr());
  }

  // A torch::stable::Tensor of its own handle to the same tensor, for torch::stable's operators.
  torch::stable::Tensor to_stable() const {
    AtenTensorHandle handle;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_new_tensor_handle(handle_, &handle));
    return torch::stable::Tensor(handle);
  }

 private:
  AtenTensorHandle handle_;
};

// A result's sizes, inline up to 8 dims: a std::vector would cost a heap allocation on every call,
// a visible part of one on a small tensor.
class Sizes {
 public:
  explicit Sizes(IntArrayRef sizes) : size_(sizes.size()) {
    if (size_ > kInline) heap_.assign(sizes.begin(), sizes.end());
    std::copy(sizes.begin(), sizes.end(), data());
  }
  int64_t* data() { return size_ > kInline ? heap_.data() : inline_; }
  const int64_t* data() const { return size_ > kInline ? heap_.data() : inline_; }
  int64_t& back() { return data()[size_ - 1]; }
  // NOLINTNEXTLINE(google-explicit-constructor): a view, as of a std::vector.
  operator IntArrayRef() const { return IntArrayRef(data(), size_); }

 private:
  static constexpr size_t kInline = 8;
  size_t size_;
  int64_t inline_[kInline];
  std::vector<int64_t> heap_;
};

class OwnedTensor {
 public:
  explicit OwnedTensor(AtenTensorHandle handle) : handle_(handle) {}
  OwnedTensor(OwnedTensor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  OwnedTensor& operator=(OwnedTensor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  ~OwnedTensor() {
    if (handle_ != nullptr) aoti_torch_delete_tensor_object(handle_);
  }

  TensorRef ref() const { return TensorRef(handle_); }
  // NOLINTNEXTLINE(google-explicit-constructor): borrowing, as a reference to it would.
  operator TensorRef() const { return ref(); }

  // The handle, which the caller now owns.
  AtenTensorHandle release() { return std::exchange(handle_, nullptr); }
  torch::stable::Tensor to_stable() && { return torch::stable::Tensor(release()); }

 private:
  AtenTensorHandle handle_;
};

// A borrowed tensor as a contiguous one of `dtype`: `t` itself when it is one already (a float32
// weight of a float32 model always is), otherwise a converted copy that this object holds.
class ContiguousAs {
 public:
  ContiguousAs(TensorRef t, ScalarType dtype) : ref_(t) {
    if (t.scalar_type() != dtype || !t.is_contiguous()) {
      held_ = torch::stable::contiguous(torch::stable::to(t.to_stable(), dtype));
      ref_ = TensorRef(*held_);
    }
  }
  explicit ContiguousAs(TensorRef t) : ContiguousAs(t, t.scalar_type()) {}

  TensorRef ref() const { return ref_; }
  // NOLINTNEXTLINE(google-explicit-constructor): stands for the contiguous tensor.
  operator TensorRef() const { return ref_; }

 private:
  std::optional<torch::stable::Tensor> held_;
  TensorRef ref_;
};

// A new contiguous tensor of `sizes` with `like`'s dtype and device. On CPU, AOTInductor's
// empty_strided allocates without a dispatcher call, as ATen's own CPU kernels allocate outputs.
inline OwnedTensor empty_like_with_sizes(TensorRef like, IntArrayRef sizes) {
  const int64_t dim = static_cast<int64_t>(sizes.size());
  int64_t inline_strides[8];
  std::vector<int64_t> heap_strides;
  int64_t* strides = inline_strides;
  if (dim > 8) {
    heap_strides.resize(static_cast<size_t>(dim));
    strides = heap_strides.data();
  }
  int64_t stride = 1;
  for (int64_t d = dim - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[static_cast<size_t>(d)] > 1 ? sizes[static_cast<size_t>(d)] : 1;
  }
  AtenTensorHandle handle;
  STABLE_TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(dim, sizes.data(), strides, static_cast<int32_t>(like.scalar_type()),
                               like.device_type(), like.device_index(), &handle));
  return OwnedTensor(handle);
}

// Copies `src` into `dst` (same shape), whatever their layouts: results made apart and then
// written into the tensor the caller gave.
inline void copy_into(TensorRef dst, OwnedTensor src) {
  torch::stable::Tensor target = dst.to_stable();
  torch::stable::copy_(target, std::move(src).to_stable());
}

// Has `write` fill `out` (checked by check_out) and returns nothing: the body of an out=
// companion. `write` takes a contiguous tensor; a strided `out` (a slice of a larger buffer, which
// Inductor may plan an output into) is written through a contiguous temporary and copied.
template <class Write>
void write_out(TensorRef out, const Write& write) {
  if (out.numel() == 0) return;
  if (out.is_contiguous()) {
    write(out);
    return;
  }
  OwnedTensor contiguous = empty_like_with_sizes(out, out.sizes());
  write(contiguous.ref());
  copy_into(out, std::move(contiguous));
}

}  // namespace my_ops
