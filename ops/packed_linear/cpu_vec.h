#pragma once

// linear_packed's CPU math on raw pointers (cpu_vec.cpp), apart from the tensor code (cpu.cpp);
// packed_linear.h defines the layout and the math. Everything is float32 and row-major.

#include <cstdint>

namespace my_ops::cpu_vec {

// out[m, n] for every row m < rows of x [rows, k] and every channel n of the panels
// [panel_begin, panel_end) of weight [panels, k, 32], out being [rows, 32 * panels]; `bias`
// ([32 * panels]) may be null.
void linear_packed(const float* x, int64_t rows, int64_t k, const float* weight, const float* bias,
                   float* out, int64_t panels, int64_t panel_begin, int64_t panel_end);

}  // namespace my_ops::cpu_vec
