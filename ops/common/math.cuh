#pragma once

// Precision-matched device math: float and double overloads that map to the intrinsics of the same
// precision, so float code never silently promotes to the slow double path.

namespace my_ops {

__device__ __forceinline__ float device_erf(float v) { return erff(v); }
__device__ __forceinline__ double device_erf(double v) { return erf(v); }

__device__ __forceinline__ float device_tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double device_tanh(double v) { return tanh(v); }

__device__ __forceinline__ float device_rsqrt(float v) { return rsqrtf(v); }
__device__ __forceinline__ double device_rsqrt(double v) { return rsqrt(v); }

}  // namespace my_ops
