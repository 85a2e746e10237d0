#pragma once

// The quantized linear layers' CPU math on raw pointers (cpu_vec.cpp), apart from the tensor code
// (cpu.cpp); quantized_linear.h defines the math. Everything is float32 and row-major.

#include <cstdint>
#include <vector>

namespace my_ops::cpu_vec {

// One row of x, quantized: q = clamp(round(x * inverse_scale) + zero_point, 0, 255).
struct QuantizedRow {
  float scale;
  int32_t zero_point;  // in [0, 255]
  bool finite;         // false when the row holds an infinity or a NaN: its outputs are NaN
};

// Quantizes rows [begin, end) of x [rows, k] into q [rows, k] and params[rows].
void quantize_rows(const float* x, int64_t k, int64_t begin, int64_t end, uint8_t* q,
                   QuantizedRow* params);

// q's rows laid out for the products at several rows, where this CPU's kernels use that layout
// (AVX-512 VNNI, 8 rows and more, k a multiple of 4); empty where they do not. Made once per call,
// before the threads split the channels, and handed to linear_int8 / linear_int4 as `tiles`.
std::vector<uint8_t> tile_rows(const uint8_t* q, int64_t rows, int64_t k);

// out[m, n] for every row m < rows and n in [n_begin, n_end), out being [rows, n_total]; `bias`
// may be null, `tiles` is tile_rows' layout of q or null when it is empty. linear_int8: weight
// int8 [n_total, k], weight_scale [n_total].
void linear_int8(const uint8_t* q, const uint8_t* tiles, const QuantizedRow* params, int64_t rows,
                 int64_t k, const int8_t* weight, const float* weight_scale, const float* bias,
                 float* out, int64_t n_total, int64_t n_begin, int64_t n_end);

// float16 values (IEEE half bits) as float32, sixteen at a time where the CPU has AVX-512.
void halves_to_floats(const uint16_t* bits, int64_t count, float* out);

// linear_int4: weight uint8 [n_total, k / 2] (two values a byte, low four bits first, each stored
// as w + 8), weight_scale [n_total, k / group_size]; group_size a multiple of 32 dividing k.
void linear_int4(const uint8_t* q, const uint8_t* tiles, const QuantizedRow* params, int64_t rows,
                 int64_t k, const uint8_t* weight, const float* weight_scale, int64_t group_size,
                 const float* bias, float* out, int64_t n_total, int64_t n_begin, int64_t n_end);

}  // namespace my_ops::cpu_vec
