#pragma once

// Launch configuration and host helpers shared by the CUDA kernels.

#include <cuda_runtime.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/macros.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#if TORCH_FEATURE_VERSION < TORCH_VERSION_2_13_0
// libtorch_cuda's (see current_stream); torch's shim.h declares it only under USE_CUDA.
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index,
                                                             void** ret_stream);
#endif

namespace my_ops {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
static_assert(kThreads % kWarpSize == 0, "block reductions assume whole warps");

// Grids are capped because every kernel uses grid-stride loops: past a few blocks per SM, extra
// blocks only add scheduling overhead. 65536 still oversubscribes any current GPU many times.
constexpr int64_t kMaxBlocks = 65536;

inline unsigned int num_blocks_for(int64_t work_items, int64_t items_per_block = kThreads) {
  const int64_t blocks = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<unsigned int>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// Grid-stride indices are 64-bit: tensors may hold more than 2^31 elements.
__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// Makes a device current for its scope, as c10::cuda::CUDAGuard did: kernels launch on the
// current device, so an op on cuda:1 called while cuda:0 is current needs it.
using DeviceGuard = torch::stable::accelerator::DeviceGuard;

// The current stream of the device: the op's work is ordered with the caller's on it, and is
// captured with it into a CUDA graph. Through LibTorch's device-generic C functions (in
// libtorch_cpu, which the library needs anyway): the library then needs nothing of LibTorch's CUDA
// libraries and loads under a CPU-only torch too. The stream handle torch returns is a new object
// of its own, deleted here; the CUDA stream it names lives on in torch's pool. A build for a torch
// older than 2.13 (tools/gpu_check on a machine with one) has no torch_stream_native_handle and
// asks libtorch_cuda instead.
inline cudaStream_t current_stream(int32_t device_index) {
#if TORCH_FEATURE_VERSION >= TORCH_VERSION_2_13_0
  StreamHandle stream;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_stream(device_index, &stream));
  void* native = nullptr;
  const AOTITorchError error = torch_stream_native_handle(stream, &native);
  aoti_torch_delete_stream(stream);
  STABLE_TORCH_ERROR_CODE_CHECK(error);
  return static_cast<cudaStream_t>(native);
#else
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device_index, &stream));
  return static_cast<cudaStream_t>(stream);
#endif
}

[[noreturn]] __attribute__((noinline, cold)) inline void fail_cuda(cudaError_t error) {
  throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(error));
}

// Throws on a failed CUDA runtime call, as C10_CUDA_CHECK did.
inline void check_cuda(cudaError_t error) {
  if (__builtin_expect(error != cudaSuccess, 0)) fail_cuda(error);
}

// After a launch: a launch that failed (a bad configuration, say) throws here, as
// C10_CUDA_KERNEL_LAUNCH_CHECK did, rather than at some later, unrelated CUDA call.
inline void check_kernel_launch() { check_cuda(cudaGetLastError()); }

}  // namespace my_ops
