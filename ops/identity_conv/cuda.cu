#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/core/Dispatch_v2.h>

#include <cstdint>
#include <limits>

#include "ops/common/launch.cuh"
#include "ops/identity_conv/identity_conv.h"

namespace my_ops {
namespace {

// torch's own limit for the dims of its CUDA offset calculator (MAX_DIMS in
// ATen/cuda/detail/OffsetCalculator.cuh): what ATen's copy kernels handle without a fallback.
constexpr int kMaxDims = 25;

// Elements each thread moves per iteration: all of their loads are issued before the first store,
// so a thread keeps this many independent loads in flight instead of one.
constexpr int kElementsPerThread = 4;
constexpr int kElementsPerBlock = kThreads * kElementsPerThread;

// The source layout after merging dims, innermost dim first, strides in elements.
//
// It is passed to the kernel by value, so it lands in the kernel's constant parameter bank. Pinned
// memory + a non_blocking copy would also avoid the host sync, but would still need an allocation,
// a copy, and an event keeping the pinned buffer alive until that copy has run; by value there is
// none of that, and a CUDA graph records the parameters by value at capture, so the op is
// capturable (a copy from pageable memory synchronizes the host and is illegal during capture).
// At most 2 * 25 * 8 + 8 = 408 bytes, far below the 4 KiB kernel parameter limit.
template <typename index_t>
struct StridedLayout {
  int ndim;
  index_t sizes[kMaxDims];
  index_t strides[kMaxDims];
};

// One dim of the merged layout, as the host builds it (outermost first).
struct MergedDim {
  int64_t size;
  int64_t stride;
};

// The merged layout, outermost dim first, held inline: the op's path allocates nothing for it.
struct MergedDims {
  // kMaxDims + 1 for a layout of more merged dims than the kernel takes (dims then incomplete).
  int count = 0;
  MergedDim dims[kMaxDims];
};

// Merges dims that are contiguous with each other, so a strided tensor is walked with as few
// div/mod steps per element as its layout allows: size-1 dims are dropped, and a dim merges into
// the one outside it when stride[outer] == stride[inner] * size[inner]. A contiguous tensor (at
// any storage offset) comes out as one dim of stride 1; a tensor of one element as no dims.
MergedDims merge_dims(TensorRef x) {
  MergedDims merged;
  const IntArrayRef sizes = x.sizes();
  const IntArrayRef strides = x.strides();
  for (size_t d = 0; d < sizes.size(); ++d) {
    const int64_t size = sizes[d];
    const int64_t stride = strides[d];
    if (size == 1) {
      continue;
    }
    if (merged.count > 0 && merged.dims[merged.count - 1].stride == stride * size) {
      merged.dims[merged.count - 1].size *= size;
      merged.dims[merged.count - 1].stride = stride;
    } else if (merged.count == kMaxDims) {
      // Merging never removes a dim, so the layout stays too large for the kernel.
      merged.count = kMaxDims + 1;
      return merged;
    } else {
      merged.dims[merged.count++] = {size, stride};
    }
  }
  return merged;
}

// The offset, in elements from the source's first element, of element `index` of the contiguous
// (row-major) output. The loop runs over the fixed capacity and stops at `ndim`, so it is fully
// unrolled and every size and stride is read from the parameter bank at a static offset (as in
// torch's OffsetCalculator), never through local memory.
template <typename index_t>
__device__ __forceinline__ index_t source_offset(const StridedLayout<index_t>& layout,
                                                 index_t index) {
  index_t offset = 0;
#pragma unroll
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == layout.ndim) {
      break;
    }
    const index_t next = index / layout.sizes[d];
    offset += (index - next * layout.sizes[d]) * layout.strides[d];
    index = next;
  }
  return offset;
}

// Copies a strided tensor into a contiguous one. Each block takes chunks of kElementsPerBlock
// output elements (grid-stride over chunks); within a chunk a thread handles kElementsPerThread
// elements spaced blockDim.x apart, so every load and store instruction of a warp covers
// consecutive outputs (coalesced stores, and coalesced loads wherever the innermost source
// stride is small). index_t is the type of the div/mod math: unsigned, since sizes, strides and
// offsets never are negative and unsigned division is the cheaper one, and 32-bit wherever the
// host found that numel and every source offset fit in int32. The chunk loop stays 64-bit so that
// its last step past numel cannot overflow.
template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads)
    strided_to_contiguous_kernel(const scalar_t* __restrict__ src, scalar_t* __restrict__ dst,
                                 const StridedLayout<index_t> layout, int64_t numel) {
  const int64_t chunk_stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kElementsPerThread;
  for (int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x * kElementsPerThread;
       chunk < numel; chunk += chunk_stride) {
    const int64_t first = chunk + threadIdx.x;
    bool in_range[kElementsPerThread];
    index_t offsets[kElementsPerThread];
#pragma unroll
    for (int k = 0; k < kElementsPerThread; ++k) {
      const int64_t i = first + static_cast<int64_t>(k) * blockDim.x;
      in_range[k] = i < numel;
      offsets[k] = in_range[k] ? source_offset(layout, static_cast<index_t>(i)) : index_t(0);
    }
    scalar_t values[kElementsPerThread];
#pragma unroll
    for (int k = 0; k < kElementsPerThread; ++k) {
      if (in_range[k]) {
        values[k] = src[offsets[k]];
      }
    }
#pragma unroll
    for (int k = 0; k < kElementsPerThread; ++k) {
      if (in_range[k]) {
        dst[first + static_cast<int64_t>(k) * blockDim.x] = values[k];
      }
    }
  }
}

template <typename scalar_t, typename index_t>
void launch_strided_to_contiguous(const scalar_t* src, scalar_t* dst, const MergedDims& merged,
                                  int64_t numel, cudaStream_t stream) {
  StridedLayout<index_t> layout{};
  layout.ndim = merged.count;
  for (int d = 0; d < layout.ndim; ++d) {
    const MergedDim& dim = merged.dims[merged.count - 1 - d];
    layout.sizes[d] = static_cast<index_t>(dim.size);
    layout.strides[d] = static_cast<index_t>(dim.stride);
  }
  strided_to_contiguous_kernel<scalar_t, index_t>
      <<<num_blocks_for(numel, kElementsPerBlock), kThreads, 0, stream>>>(src, dst, layout, numel);
  check_kernel_launch();
}

}  // namespace

// The CUDA kernels, which the library's generated code registers at the CUDA key and its C shims
// call (tools/torch/c_shims.py): each is named after its op, with its schema's arguments.
namespace cuda {

OwnedTensor identity_conv_op(TensorRef x) {
  check_identity_conv_args(x);
  const DeviceGuard device_guard(x.device_index());
  const int64_t numel = x.numel();
  if (numel == 0) {
    return empty_like_with_sizes(x, x.sizes());
  }
  const MergedDims merged = merge_dims(x);
  OwnedTensor out = empty_like_with_sizes(x, x.sizes());
  if (merged.count > kMaxDims) {
    // More non-mergeable dims than the kernel's parameters hold: ATen's CUDA copy handles any
    // count (it splits the work itself) and is capturable too. No real model gets here.
    torch::stable::Tensor dst = out.ref().to_stable();
    torch::stable::copy_(dst, x.to_stable());
    return out;
  }
  const cudaStream_t stream = current_stream(x.device_index());
  if (merged.count == 0 || (merged.count == 1 && merged.dims[0].stride == 1)) {
    // The elements are one dense run (from the storage offset on): a device-to-device copy moves
    // them at full bandwidth, and is as capturable as a kernel.
    const size_t element_size =
        aoti_torch_dtype_element_size(static_cast<int32_t>(x.scalar_type()));
    check_cuda(cudaMemcpyAsync(out.ref().data_ptr(), x.data_ptr(),
                               static_cast<size_t>(numel) * element_size, cudaMemcpyDeviceToDevice,
                               stream));
    return out;
  }
  // Strides are never negative, so the largest source offset is the sum of (size - 1) * stride.
  int64_t max_offset = 0;
  for (int d = 0; d < merged.count; ++d) {
    max_offset += (merged.dims[d].size - 1) * merged.dims[d].stride;
  }
  // torch's own bound for 32-bit indexing (can_use_32bit_indexing): int32, not uint32.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  const bool use_32_bit_index = numel <= kInt32Max && max_offset <= kInt32Max;
  // The body is parenthesized, not AT_WRAP'd: THO_DISPATCH_V2 hands it through one macro more
  // than ATen's AT_DISPATCH_V2, and there AT_WRAP no longer keeps its template arguments' commas
  // from splitting it.
  THO_DISPATCH_V2(
      x.scalar_type(), "identity_conv_cuda", ([&] {
        const scalar_t* src = x.data_as<scalar_t>();
        scalar_t* dst = out.ref().mutable_data_as<scalar_t>();
        if (use_32_bit_index) {
          launch_strided_to_contiguous<scalar_t, uint32_t>(src, dst, merged, numel, stream);
        } else {
          launch_strided_to_contiguous<scalar_t, uint64_t>(src, dst, merged, numel, stream);
        }
      }),
      AT_FLOATING_TYPES, torch::headeronly::ScalarType::Half,
      torch::headeronly::ScalarType::BFloat16);
  return out;
}

}  // namespace cuda
}  // namespace my_ops
