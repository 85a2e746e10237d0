#pragma once

// Launch configuration shared by the CUDA kernels.

#include <algorithm>
#include <cstdint>

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

}  // namespace my_ops
