#pragma once

// Block-wide sum built from warp shuffles plus one shared-memory exchange.

#include "ops/common/launch.cuh"

namespace my_ops {

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T value) {
  // Butterfly (xor) shuffles leave the full sum in every lane, so no broadcast step is needed.
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Returns the sum of `value` over the block to every thread. Must be reached by all threads of the
// block (it synchronizes) and blockDim.x must be a multiple of the warp size. `scratch` needs room
// for one T per warp; it may be reused by consecutive calls.
template <typename T>
__device__ __forceinline__ T block_reduce_sum(T value, T* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = warp_reduce_sum(value);
  // Keeps this call's writes from racing with a previous call's reads of the same scratch.
  __syncthreads();
  if (lane == 0) {
    scratch[warp] = value;
  }
  __syncthreads();
  // Every warp folds the per-warp partials itself, which hands all threads the total at once.
  value = lane < num_warps ? scratch[lane] : T(0);
  return warp_reduce_sum(value);
}

}  // namespace my_ops
