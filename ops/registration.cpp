// The single schema block of the my_ops library: every op schema is defined here, on LibTorch's
// stable ABI. The kernels' registrations and AOTInductor C shims are generated from the schemas
// (tools/torch/c_shims.py); each op folder defines its kernels as my_ops::cpu::<op> (cpu.cpp) and
// my_ops::cuda::<op> (cuda.cu). The RMSNorm class and the C++ autograd entries, which the stable
// ABI cannot express, are in the companion library (ops/cxx/).

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/version.h>

#include <stdexcept>
#include <string>

namespace {

// The op namespace, read by tools/torch/c_shims.py too.
constexpr char kNamespace[] = "my_ops";

// One schema per line so that each stays greppable as a whole. The registrations and C shims of
// every op (aoti_torch_cpu_<op>, aoti_torch_cuda_<op>) are generated from this array at build
// time (tools/torch/c_shims.py), which reads it as plain string literals: keep it so.
//
// <op>_out is the out= companion of <op>: the same arguments and a caller's `out`, which it
// fills and returns. An exporter lowers each call of <op> in a package to its companion
// (deploy/exporter/c_shims.py), so that Inductor allocates the output and reuses the buffer from
// call to call, as it does for its own kernels, instead of the op allocating a fresh one each
// time. The companion is a separate op rather than an ".out" overload because AOTInductor names
// a C shim after the op alone: an overload would share <op>'s shim name. Companions have CPU
// kernels; the exporter leaves a call on a device without one as it is. An op with a companion
// lists its tensor arguments (optional ones included) before the others: Inductor's lowering to
// the companion passes the tensors first, then the rest, whatever the schema's order.
//
// <op>_ is the in-place form of <op> (vLLM's): the same arguments, the results written into the
// mutable ones (Tensor(a!)), returning nothing.
// clang-format off
constexpr const char* kOpSchemas[] = {
    "identity_conv_op(Tensor x) -> Tensor",
    "fused_bias_gelu(Tensor x, Tensor bias, str approximate=\"none\") -> Tensor",
    "fused_bias_gelu_out(Tensor x, Tensor bias, str approximate=\"none\", *, Tensor(a!) out) -> Tensor(a!)",
    "rms_norm(Tensor x, Tensor weight, float eps=1e-6) -> Tensor",
    "rms_norm_out(Tensor x, Tensor weight, float eps=1e-6, *, Tensor(a!) out) -> Tensor(a!)",
    "fused_add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-6) -> (Tensor, Tensor)",
    "fused_add_rms_norm_(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps=1e-6) -> ()",
    "silu_and_mul(Tensor x) -> Tensor",
    "silu_and_mul_out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
    "rotary_embedding(Tensor x, Tensor cos, Tensor sin, Tensor? positions=None, bool interleaved=False) -> Tensor",
    "rotary_embedding_out(Tensor x, Tensor cos, Tensor sin, Tensor? positions=None, bool interleaved=False, *, Tensor(a!) out) -> Tensor(a!)",
    "linear_int8(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None) -> Tensor",
    "linear_int4(Tensor x, Tensor weight, Tensor weight_scale, int group_size=32, Tensor? bias=None) -> Tensor",
    "linear_packed(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor",
};
// clang-format on

// The namespace's schema block: STABLE_TORCH_LIBRARY, written out so that each call's
// result is checked. torch's macro ignores a failure to claim the namespace, which a second copy
// of this library in the process meets, and then crashes on its first def; this throws torch's
// message instead, which reaches whoever opened the copy (a static initialiser runs inside
// dlopen). It is the first static object of the library's first unit, so that a copy throws
// before any of its kernels is registered.
class SchemaBlock {
 public:
  SchemaBlock() {
    check(aoti_torch_library_init_def(kNamespace, __FILE__, __LINE__, &library_));
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0
    // First, so that errors on a missing fake say "import my_ops". (tools/gpu_check builds the
    // library for an older torch when its machine has one.)
    check(torch_library_set_python_module(library_, kNamespace, ""));
#endif
    for (const char* schema : kOpSchemas) check(aoti_torch_library_def(library_, schema));
  }
  SchemaBlock(const SchemaBlock&) = delete;
  SchemaBlock& operator=(const SchemaBlock&) = delete;
  ~SchemaBlock() { aoti_torch_delete_library_object(library_); }

 private:
  void check(AOTITorchError error) {
    if (error == AOTI_TORCH_SUCCESS) return;
    std::string message =
        std::string("libmy_ops.so: registering the ") + kNamespace + " schemas failed";
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0
    message += std::string(": ") + torch_exception_get_what_without_backtrace();
#endif
    if (library_ != nullptr) aoti_torch_delete_library_object(library_);
    throw std::runtime_error(message);
  }

  TorchLibraryHandle library_ = nullptr;
};

const SchemaBlock kSchemaBlock;

}  // namespace
