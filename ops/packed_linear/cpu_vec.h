#pragma once

// linear_packed's CPU math on raw pointers, apart from the tensor code (cpu.cpp); packed_linear.h
// defines the layout and the math. Everything is float32 and row-major.
//
// Each instruction-set tier has its blocks in a file of its own (cpu_<tier>.cpp); cpu_vec.cpp
// picks them once from the tier this process runs at (ops/common/cpu_isa.h) and walks the
// panels with them.

#include <array>
#include <cstdint>

#include "ops/common/cpu_isa.h"

namespace my_ops::cpu_vec {

// out[m, n] for every row m < rows of x [rows, k] and every channel n of the panels
// [panel_begin, panel_end) of weight [panels, k, 32], out being [rows, 32 * panels]; `bias`
// ([32 * panels]) may be null.
void linear_packed(const float* x, int64_t rows, int64_t k, const float* weight, const float* bias,
                   float* out, int64_t panels, int64_t panel_begin, int64_t panel_end);

// A block of R rows of x (k apart) by one panel (k steps of 32 channels), written to out's rows
// (out_stride apart), bias (32 channels) added where it is not null.
using PanelBlock = void (*)(const float* x, int64_t k, const float* panel, const float* bias,
                            float* out, int64_t out_stride);

inline constexpr int kMaxPanelBlockRows = 12;

struct PackedLinearKernels {
  cpu::CpuIsa isa;     // the tier these kernels were written for
  int max_block_rows;  // at most kMaxPanelBlockRows: what the tier's registers hold
  // blocks[R - 1] multiplies R rows, for R up to max_block_rows.
  std::array<PanelBlock, kMaxPanelBlockRows> blocks;
};

// linear_packed with the given tier's kernels (linear_packed uses packed_linear_kernels()).
void linear_packed_with(const PackedLinearKernels& kernels, const float* x, int64_t rows, int64_t k,
                        const float* weight, const float* bias, float* out, int64_t panels,
                        int64_t panel_begin, int64_t panel_end);

// The kernels of the tier this process runs at, picked once.
const PackedLinearKernels& packed_linear_kernels();

// The kernels a process capped at `isa` would run; null when the CPU lacks it.
const PackedLinearKernels* packed_linear_kernels_at(cpu::CpuIsa isa);

// Each tier's blocks (cpu_<tier>.cpp); null where this build has none for the tier's
// architecture.
const PackedLinearKernels* scalar_packed_linear_kernels();
const PackedLinearKernels* avx2_packed_linear_kernels();
const PackedLinearKernels* avx512_packed_linear_kernels();
const PackedLinearKernels* neon_packed_linear_kernels();

}  // namespace my_ops::cpu_vec
