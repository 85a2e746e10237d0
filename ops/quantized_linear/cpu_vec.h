#pragma once

// The quantized linear layers' CPU math on raw pointers, apart from the tensor code (cpu.cpp);
// quantized_linear.h defines the math. Everything is float32 and row-major.
//
// Each instruction-set tier has its kernels in a file of its own (cpu_<tier>.cpp), as one table;
// cpu_vec.cpp picks the table once from the tier this process runs at (ops/common/cpu_isa.h).
// Every table computes the same exact integer sums; only the float epilogue's order may differ.

#include <cstdint>
#include <vector>

#include "ops/common/cpu_isa.h"

namespace my_ops::cpu_vec {

// One row of x, quantized: q = clamp(round(x * inverse_scale) + zero_point, 0, 255).
struct QuantizedRow {
  float scale;
  int32_t zero_point;  // in [0, 255]
  bool finite;         // false when the row holds an infinity or a NaN: its outputs are NaN
};

struct QuantizedLinearKernels {
  cpu::CpuIsa isa;  // the tier these kernels were written for

  // Quantizes rows [begin, end) of x [rows, k] into q [rows, k] and params[rows]. Every tier gives
  // the same q and params.
  void (*quantize_rows)(const float* x, int64_t k, int64_t begin, int64_t end, uint8_t* q,
                        QuantizedRow* params);

  // q's rows in the layout this tier's products read (per op: int8_rows for linear_int8,
  // int4_rows for linear_int4), made once per call before the threads split the channels; empty
  // where the products read q as it is. Handed to the products as `rows_layout` (null if empty).
  std::vector<uint8_t> (*int8_rows)(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                                    int64_t k);
  std::vector<uint8_t> (*int4_rows)(const uint8_t* q, const QuantizedRow* params, int64_t rows,
                                    int64_t k, int64_t group_size);

  // out[m, n] for every row m < rows and n in [n_begin, n_end), out being [rows, n_total]; `bias`
  // may be null. linear_int8: weight int8 [n_total, k], weight_scale [n_total].
  void (*linear_int8)(const uint8_t* q, const uint8_t* rows_layout, const QuantizedRow* params,
                      int64_t rows, int64_t k, const int8_t* weight, const float* weight_scale,
                      const float* bias, float* out, int64_t n_total, int64_t n_begin,
                      int64_t n_end);

  // linear_int4: weight uint8 [n_total, k / 2] (two values a byte, low four bits first, each
  // stored as w + 8), weight_scale [n_total, k / group_size]; group_size a multiple of 32 dividing
  // k.
  void (*linear_int4)(const uint8_t* q, const uint8_t* rows_layout, const QuantizedRow* params,
                      int64_t rows, int64_t k, const uint8_t* weight, const float* weight_scale,
                      int64_t group_size, const float* bias, float* out, int64_t n_total,
                      int64_t n_begin, int64_t n_end);

  // float16 values (IEEE half bits) as float32.
  void (*halves_to_floats)(const uint16_t* bits, int64_t count, float* out);
};

// The kernels of the tier this process runs at, picked once.
const QuantizedLinearKernels& quantized_linear_kernels();

// The kernels a process capped at `isa` would run (the highest tier at or below it that has
// kernels of its own), for tests and benchmarks that compare tiers; null when the CPU lacks it.
const QuantizedLinearKernels* quantized_linear_kernels_at(cpu::CpuIsa isa);

// Each tier's table (cpu_<tier>.cpp); null where this build has none for the tier's
// architecture.
const QuantizedLinearKernels* scalar_quantized_linear_kernels();
const QuantizedLinearKernels* avx2_quantized_linear_kernels();
const QuantizedLinearKernels* avx512_vnni_quantized_linear_kernels();
const QuantizedLinearKernels* amx_quantized_linear_kernels();
const QuantizedLinearKernels* neon_dot_quantized_linear_kernels();
const QuantizedLinearKernels* neon_i8mm_quantized_linear_kernels();

}  // namespace my_ops::cpu_vec
