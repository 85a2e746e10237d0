// A cuda_library that includes ATen's and c10's CUDA headers and launches a
// kernel on the current stream: what every op library needs from the rules.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>  // pulls in cublas_v2.h and cusparse.h
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>

namespace {

__global__ void add_one_kernel(float* data, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] += 1.0f;
}

}  // namespace

// Exported with C linkage so the test can find it with dlsym.
extern "C" int cuda_smoke_device_count() { return static_cast<int>(c10::cuda::device_count()); }

// Adds one to every element of a float CUDA tensor, in place; returns the
// number of elements that came out wrong.
extern "C" int64_t cuda_smoke_add_one_errors(int64_t n) {
  at::Tensor t = at::arange(n, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>((n + kThreads - 1) / kThreads);
  add_one_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(t.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  at::Tensor expected = at::arange(n, at::kFloat) + 1;
  return (t.cpu() != expected).sum().item<int64_t>();
}
