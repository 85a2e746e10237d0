// linear_packed's config: which tier's blocks run, picked once, and the walk over the panels.

#include "ops/packed_linear/cpu_vec.h"

#include <algorithm>

#include "ops/packed_linear/panel.h"

namespace my_ops::cpu_vec {
namespace {

const PackedLinearKernels* kernels_for(cpu::CpuIsa isa) {
  using cpu::CpuIsa;
  const PackedLinearKernels* picked = nullptr;
  switch (isa) {
    case CpuIsa::kAmx:
    case CpuIsa::kAvx512Vnni:
    case CpuIsa::kAvx512:
      picked = avx512_packed_linear_kernels();
      break;
    case CpuIsa::kAvx2:
      picked = avx2_packed_linear_kernels();
      break;
    case CpuIsa::kNeon:
    case CpuIsa::kNeonDot:
    case CpuIsa::kNeonI8mm:
      picked = neon_packed_linear_kernels();
      break;
    case CpuIsa::kScalar:
      break;
  }
  return picked != nullptr ? picked : scalar_packed_linear_kernels();
}

// The rows split into blocks of at most `most` rows, as even as they come (16 rows at 12: 8 and 8,
// not 12 and 4), so that every block keeps enough sums in flight to hide the FMA latency.
int64_t block_rows(int64_t rows, int64_t most) {
  const int64_t blocks = (rows + most - 1) / most;
  return (rows + blocks - 1) / blocks;
}

}  // namespace

void linear_packed_with(const PackedLinearKernels& kernels, const float* x, int64_t rows, int64_t k,
                        const float* weight, const float* bias, float* out, int64_t panels,
                        int64_t panel_begin, int64_t panel_end) {
  if (rows == 0) return;
  const int64_t n = panels * kPanelChannels;
  const int64_t step = block_rows(rows, kernels.max_block_rows);
  // Panel by panel, every block of rows: a panel (k * 128 bytes) is read from memory once and
  // from cache by the blocks after the first.
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const float* panel = weight + p * k * kPanelChannels;
    const float* panel_bias = bias != nullptr ? bias + p * kPanelChannels : nullptr;
    for (int64_t m = 0; m < rows; m += step) {
      const int64_t r = std::min(step, rows - m);
      kernels.blocks[r - 1](x + m * k, k, panel, panel_bias, out + m * n + p * kPanelChannels, n);
    }
  }
}

void linear_packed(const float* x, int64_t rows, int64_t k, const float* weight, const float* bias,
                   float* out, int64_t panels, int64_t panel_begin, int64_t panel_end) {
  linear_packed_with(packed_linear_kernels(), x, rows, k, weight, bias, out, panels, panel_begin,
                     panel_end);
}

const PackedLinearKernels& packed_linear_kernels() {
  static const PackedLinearKernels* const kernels = kernels_for(cpu::active_cpu_isa());
  return *kernels;
}

const PackedLinearKernels* packed_linear_kernels_at(cpu::CpuIsa isa) {
  return cpu::cpu_has_isa(isa) ? kernels_for(isa) : nullptr;
}

}  // namespace my_ops::cpu_vec
