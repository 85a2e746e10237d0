// The quantized linear layers' config: which tier's kernels run, picked once.

#include "ops/quantized_linear/cpu_vec.h"

#include "ops/common/cpu_isa.h"

namespace my_ops::cpu_vec {
namespace {

// The table of the highest tier at or below `isa` that has kernels of its own: avx512 (without
// VNNI) runs the AVX2 products and neon (without the dot product) the portable ones.
const QuantizedLinearKernels* kernels_for(cpu::CpuIsa isa) {
  using cpu::CpuIsa;
  const QuantizedLinearKernels* picked = nullptr;
  switch (isa) {
    case CpuIsa::kAmx:
      picked = amx_quantized_linear_kernels();
      break;
    case CpuIsa::kAvx512Vnni:
      picked = avx512_vnni_quantized_linear_kernels();
      break;
    case CpuIsa::kAvx512:
    case CpuIsa::kAvx2:
      picked = avx2_quantized_linear_kernels();
      break;
    case CpuIsa::kNeonI8mm:
      picked = neon_i8mm_quantized_linear_kernels();
      break;
    case CpuIsa::kNeonDot:
      picked = neon_dot_quantized_linear_kernels();
      break;
    case CpuIsa::kNeon:
    case CpuIsa::kScalar:
      break;
  }
  return picked != nullptr ? picked : scalar_quantized_linear_kernels();
}

}  // namespace

const QuantizedLinearKernels& quantized_linear_kernels() {
  static const QuantizedLinearKernels* const kernels = kernels_for(cpu::active_cpu_isa());
  return *kernels;
}

const QuantizedLinearKernels* quantized_linear_kernels_at(cpu::CpuIsa isa) {
  return cpu::cpu_has_isa(isa) ? kernels_for(isa) : nullptr;
}

}  // namespace my_ops::cpu_vec
