// Every kernel tier this CPU has, against the portable kernels and an independent reference, on
// the same inputs. The integer products are checked exactly: the inputs are chosen so that every
// float step is exact (power-of-two scales, integer-valued x), so any tier that loses or
// saturates a sum differs in the output bits. Random inputs then bound the float epilogues.
// A tier the CPU lacks is skipped, naming it.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "ops/common/cpu_isa.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/packed_linear/panel.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace my_ops {
namespace cpu {
// gtest names a failing case's tier by this.
void PrintTo(CpuIsa isa, std::ostream* os) { *os << cpu_isa_name(isa); }
}  // namespace cpu

namespace {

using cpu::CpuIsa;
using cpu_vec::PackedLinearKernels;
using cpu_vec::QuantizedLinearKernels;
using cpu_vec::QuantizedRow;

#if defined(__x86_64__)
const CpuIsa kArchTiers[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                             CpuIsa::kAmx};
#elif defined(__aarch64__)
const CpuIsa kArchTiers[] = {CpuIsa::kScalar, CpuIsa::kNeon, CpuIsa::kNeonDot, CpuIsa::kNeonI8mm};
#else
const CpuIsa kArchTiers[] = {CpuIsa::kScalar};
#endif

class CpuTier : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_has_isa(GetParam())) {
      GTEST_SKIP() << "this CPU lacks the " << cpu::cpu_isa_name(GetParam()) << " tier";
    }
    quantized_ = cpu_vec::quantized_linear_kernels_at(GetParam());
    packed_ = cpu_vec::packed_linear_kernels_at(GetParam());
    scalar_q_ = cpu_vec::scalar_quantized_linear_kernels();
    scalar_p_ = cpu_vec::scalar_packed_linear_kernels();
    ASSERT_NE(quantized_, nullptr);
    ASSERT_NE(packed_, nullptr);
  }
  const QuantizedLinearKernels* quantized_ = nullptr;
  const PackedLinearKernels* packed_ = nullptr;
  const QuantizedLinearKernels* scalar_q_ = nullptr;
  const PackedLinearKernels* scalar_p_ = nullptr;
};

std::string tier_name(const ::testing::TestParamInfo<CpuIsa>& info) {
  return cpu::cpu_isa_name(info.param);
}

// x rows whose quantization is exact: row r has scale 2^-e_r and zero point z_r, and holds
// (q - z_r) * 2^-e_r for q in [0, 255], q = 0 and q = 255 both present (they set min and max).
struct ExactRows {
  std::vector<float> x;
  std::vector<int32_t> q;  // the expected q, independent of the kernels
  std::vector<int32_t> zero;
  std::vector<float> scale;
};

ExactRows exact_rows(int64_t rows, int64_t k, std::mt19937& rng) {
  ExactRows e;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> exponent(0, 6);
  for (int64_t r = 0; r < rows; ++r) {
    // A zero point in [1, 254] keeps both 0 and 255 reachable with min <= 0 <= max.
    const int32_t z = 1 + byte(rng) % 254;
    const float s = std::ldexp(1.0f, -exponent(rng));
    e.zero.push_back(z);
    e.scale.push_back(s);
    for (int64_t i = 0; i < k; ++i) {
      int32_t q = byte(rng);
      if (i == 0) q = 0;
      if (i == k - 1 && k > 1) q = 255;
      if (k == 1) q = z;  // one value: the row is 0, its q the zero point
      e.q.push_back(q);
      e.x.push_back(static_cast<float>(q - z) * s);
    }
  }
  return e;
}

std::vector<QuantizedRow> quantize(const QuantizedLinearKernels& kernels, const float* x,
                                   int64_t rows, int64_t k, std::vector<uint8_t>& q) {
  q.assign(static_cast<size_t>(rows * k), 0);
  std::vector<QuantizedRow> params(static_cast<size_t>(rows));
  kernels.quantize_rows(x, k, 0, rows, q.data(), params.data());
  return params;
}

std::vector<float> run_int8(const QuantizedLinearKernels& kernels, const std::vector<float>& x,
                            int64_t rows, int64_t k, const std::vector<int8_t>& w,
                            const std::vector<float>& w_scale, const float* bias, int64_t n,
                            int64_t n_begin, int64_t n_end) {
  std::vector<uint8_t> q;
  const std::vector<QuantizedRow> params = quantize(kernels, x.data(), rows, k, q);
  const std::vector<uint8_t> layout = kernels.int8_rows(q.data(), params.data(), rows, k);
  std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
  kernels.linear_int8(q.data(), layout.empty() ? nullptr : layout.data(), params.data(), rows, k,
                      w.data(), w_scale.data(), bias, out.data(), n, n_begin, n_end);
  return out;
}

std::vector<float> run_int4(const QuantizedLinearKernels& kernels, const std::vector<float>& x,
                            int64_t rows, int64_t k, const std::vector<uint8_t>& w,
                            const std::vector<float>& w_scale, int64_t group_size,
                            const float* bias, int64_t n, int64_t n_begin, int64_t n_end) {
  std::vector<uint8_t> q;
  const std::vector<QuantizedRow> params = quantize(kernels, x.data(), rows, k, q);
  const std::vector<uint8_t> layout =
      kernels.int4_rows(q.data(), params.data(), rows, k, group_size);
  std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
  kernels.linear_int4(q.data(), layout.empty() ? nullptr : layout.data(), params.data(), rows, k,
                      w.data(), w_scale.data(), group_size, bias, out.data(), n, n_begin, n_end);
  return out;
}

// Row counts that reach every block shape: the per-row blocks (1-7), the AVX-512 tiles (8 and
// more, one and two tiles, partial), AMX's two tiles of 16.
const int64_t kRows[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33};

TEST_P(CpuTier, QuantizeRowsMatchesPortableAndExpected) {
  std::mt19937 rng(1);
  for (int64_t k : {1, 7, 8, 31, 32, 33, 64, 257}) {
    const ExactRows e = exact_rows(5, k, rng);
    std::vector<uint8_t> q;
    std::vector<uint8_t> q_scalar;
    const auto params = quantize(*quantized_, e.x.data(), 5, k, q);
    const auto expected = quantize(*scalar_q_, e.x.data(), 5, k, q_scalar);
    ASSERT_EQ(q, q_scalar) << "k " << k;
    for (int64_t r = 0; r < 5; ++r) {
      EXPECT_EQ(params[r].scale, expected[r].scale);
      EXPECT_EQ(params[r].zero_point, expected[r].zero_point);
      EXPECT_EQ(params[r].finite, expected[r].finite);
      if (k > 1) {
        EXPECT_EQ(params[r].zero_point, e.zero[r]) << "k " << k << " row " << r;
        EXPECT_EQ(params[r].scale, e.scale[r]) << "k " << k << " row " << r;
      }
      for (int64_t i = 0; i < k && k > 1; ++i) ASSERT_EQ(q[r * k + i], e.q[r * k + i]);
    }
  }
  // Non-finite rows: every tier marks them, wherever the value sits (vector body or tail).
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (int64_t at : {0, 5, 16, 36}) {
      std::vector<float> x(37, 0.5f);
      x[at] = bad;
      std::vector<uint8_t> q;
      const auto params = quantize(*quantized_, x.data(), 1, 37, q);
      EXPECT_FALSE(params[0].finite) << bad << " at " << at;
    }
  }
}

TEST_P(CpuTier, Int8ProductsAreExact) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> weight(-128, 127);
  std::uniform_int_distribution<int> exponent(-3, 3);
  for (int64_t k : {4, 15, 16, 17, 64, 100, 257, 576}) {
    for (int64_t rows : kRows) {
      for (int64_t n : {1, 13, 33}) {
        const ExactRows e = exact_rows(rows, k, rng);
        std::vector<int8_t> w(static_cast<size_t>(n * k));
        for (auto& v : w) v = static_cast<int8_t>(weight(rng));
        // Extreme weights somewhere in every channel: the products a saturating step would clip.
        for (int64_t c = 0; c < n; ++c) w[c * k] = (c % 2 == 0) ? -128 : 127;
        std::vector<float> w_scale(static_cast<size_t>(n));
        std::vector<float> bias(static_cast<size_t>(n));
        for (int64_t c = 0; c < n; ++c) {
          w_scale[c] = std::ldexp(1.0f, exponent(rng));
          bias[c] = static_cast<float>(weight(rng));
        }
        const std::vector<float> out =
            run_int8(*quantized_, e.x, rows, k, w, w_scale, bias.data(), n, 0, n);
        for (int64_t m = 0; m < rows; ++m) {
          for (int64_t c = 0; c < n; ++c) {
            int64_t centered = 0;
            for (int64_t i = 0; i < k; ++i) {
              centered += int64_t{e.q[m * k + i] - e.zero[m]} * w[c * k + i];
            }
            const double expected =
                static_cast<double>(e.scale[m]) * w_scale[c] * static_cast<double>(centered) +
                bias[c];
            ASSERT_EQ(out[m * n + c], static_cast<float>(expected))
                << "k " << k << " rows " << rows << " n " << n << " at " << m << ", " << c;
          }
        }
      }
    }
  }
}

TEST_P(CpuTier, Int8ChannelRangesWriteOnlyTheirChannels) {
  std::mt19937 rng(3);
  const int64_t k = 64, n = 40;
  for (int64_t rows : {1, 3, 8, 17}) {
    const ExactRows e = exact_rows(rows, k, rng);
    std::vector<int8_t> w(static_cast<size_t>(n * k));
    for (auto& v : w) v = static_cast<int8_t>(rng() % 256 - 128);
    const std::vector<float> w_scale(static_cast<size_t>(n), 0.25f);
    const std::vector<float> whole =
        run_int8(*scalar_q_, e.x, rows, k, w, w_scale, nullptr, n, 0, n);
    const std::vector<float> part =
        run_int8(*quantized_, e.x, rows, k, w, w_scale, nullptr, n, 5, 38);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < n; ++c) {
        const float expected = (c >= 5 && c < 38) ? whole[m * n + c] : -1.0f;
        ASSERT_EQ(part[m * n + c], expected) << "rows " << rows << " at " << m << ", " << c;
      }
    }
  }
}

TEST_P(CpuTier, Int4ProductsAreExact) {
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> exponent(-3, 3);
  // K = 32 (mod 64) reaches the AVX-512 kernels' half step; groups of 32, 64 and 128.
  for (int64_t k : {32, 96, 128, 160, 576}) {
    for (int64_t group_size : {32, 64, 128}) {
      if (k % group_size != 0) continue;
      const int64_t groups = k / group_size;
      for (int64_t rows : kRows) {
        for (int64_t n : {1, 5, 13}) {
          const ExactRows e = exact_rows(rows, k, rng);
          std::vector<uint8_t> w(static_cast<size_t>(n * k / 2));
          for (auto& v : w) v = static_cast<uint8_t>(rng() % 256);
          for (int64_t c = 0; c < n; ++c) w[c * k / 2] = (c % 2 == 0) ? 0x00 : 0xFF;  // -8, 7
          std::vector<float> w_scale(static_cast<size_t>(n * groups));
          for (auto& s : w_scale) s = std::ldexp(1.0f, exponent(rng));
          std::vector<float> bias(static_cast<size_t>(n));
          for (auto& b : bias) b = static_cast<float>(static_cast<int>(rng() % 64) - 32);
          const std::vector<float> out =
              run_int4(*quantized_, e.x, rows, k, w, w_scale, group_size, bias.data(), n, 0, n);
          for (int64_t m = 0; m < rows; ++m) {
            for (int64_t c = 0; c < n; ++c) {
              double total = 0.0;
              for (int64_t g = 0; g < groups; ++g) {
                int64_t centered = 0;
                for (int64_t i = g * group_size; i < (g + 1) * group_size; ++i) {
                  const uint8_t byte = w[(c * k + i) / 2];
                  const int32_t v = ((i % 2 == 0) ? (byte & 15) : (byte >> 4)) - 8;
                  centered += int64_t{e.q[m * k + i] - e.zero[m]} * v;
                }
                total += static_cast<double>(w_scale[c * groups + g]) * centered;
              }
              const double expected = static_cast<double>(e.scale[m]) * total + bias[c];
              ASSERT_EQ(out[m * n + c], static_cast<float>(expected))
                  << "k " << k << " group " << group_size << " rows " << rows << " n " << n
                  << " at " << m << ", " << c;
            }
          }
        }
      }
    }
  }
}

// Random x, weights and scales: each tier within the float epilogue's rounding of the portable
// kernels. A group's sum is exact; what differs is the order of the float sums over groups
// and of the scale products, a few roundings of float32 (2^-24) per group at most, bounded here
// by 8 * groups * eps times the sum of the terms' magnitudes.
TEST_P(CpuTier, RandomInputsWithinEpilogueRounding) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t k = 4160, n = 11, group_size = 32, groups = k / group_size;
  for (int64_t rows : {1, 3, 9, 20}) {
    std::vector<float> x(static_cast<size_t>(rows * k));
    for (auto& v : x) v = normal(rng);
    std::vector<int8_t> w8(static_cast<size_t>(n * k));
    for (auto& v : w8) v = static_cast<int8_t>(rng() % 256 - 128);
    std::vector<uint8_t> w4(static_cast<size_t>(n * k / 2));
    for (auto& v : w4) v = static_cast<uint8_t>(rng() % 256);
    std::vector<float> s8(static_cast<size_t>(n));
    for (auto& s : s8) s = 0.01f + std::abs(normal(rng)) * 0.01f;
    std::vector<float> s4(static_cast<size_t>(n * groups));
    for (auto& s : s4) s = 0.01f + std::abs(normal(rng)) * 0.01f;
    std::vector<float> bias(static_cast<size_t>(n));
    for (auto& b : bias) b = normal(rng);
    const auto got8 = run_int8(*quantized_, x, rows, k, w8, s8, bias.data(), n, 0, n);
    const auto ref8 = run_int8(*scalar_q_, x, rows, k, w8, s8, bias.data(), n, 0, n);
    const auto got4 = run_int4(*quantized_, x, rows, k, w4, s4, group_size, bias.data(), n, 0, n);
    const auto ref4 = run_int4(*scalar_q_, x, rows, k, w4, s4, group_size, bias.data(), n, 0, n);
    std::vector<uint8_t> q;
    const auto params = quantize(*scalar_q_, x.data(), rows, k, q);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t c = 0; c < n; ++c) {
        double magnitude8 = 0.0;
        double magnitude4 = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double xc = static_cast<double>(q[m * k + i]) - params[m].zero_point;
          magnitude8 += std::abs(xc * w8[c * k + i]);
          const uint8_t byte = w4[(c * k + i) / 2];
          const int v = ((i % 2 == 0) ? (byte & 15) : (byte >> 4)) - 8;
          magnitude4 += std::abs(xc * v) * s4[c * groups + i / group_size];
        }
        magnitude8 = magnitude8 * params[m].scale * s8[c] + std::abs(bias[c]);
        magnitude4 = magnitude4 * params[m].scale + std::abs(bias[c]);
        const double eps = std::numeric_limits<float>::epsilon();
        EXPECT_NEAR(got8[m * n + c], ref8[m * n + c], 8 * eps * magnitude8)
            << "int8 rows " << rows << " at " << m << ", " << c;
        EXPECT_NEAR(got4[m * n + c], ref4[m * n + c], 8 * groups * eps * magnitude4)
            << "int4 rows " << rows << " at " << m << ", " << c;
      }
    }
  }
}

TEST_P(CpuTier, HalvesToFloatsMatchesPortable) {
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  std::vector<float> got(bits.size());
  std::vector<float> expected(bits.size());
  // An odd count: the vector body and the tail.
  quantized_->halves_to_floats(bits.data(), 65535, got.data());
  scalar_q_->halves_to_floats(bits.data(), 65535, expected.data());
  for (size_t i = 0; i < 65535; ++i) {
    if (std::isnan(expected[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << i;
    } else {
      ASSERT_EQ(got[i], expected[i]) << i;
    }
  }
}

// linear_packed on small integers: every product and sum is exact in float32, so each tier must
// give the float64 reference's bits. Then random values within the sums' rounding.
TEST_P(CpuTier, PackedLinearMatchesReference) {
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> small(-8, 8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (bool exact : {true, false}) {
    for (int64_t k : {1, 2, 3, 17, 64, 131}) {
      for (int64_t rows : {1, 2, 3, 4, 5, 12, 13, 16, 25}) {
        const int64_t panels = 2;
        const int64_t n = panels * kPanelChannels;
        std::vector<float> x(static_cast<size_t>(rows * k));
        std::vector<float> w(static_cast<size_t>(panels * k * kPanelChannels));
        std::vector<float> bias(static_cast<size_t>(n));
        for (auto* v : {&x, &w, &bias}) {
          for (auto& e : *v) e = exact ? static_cast<float>(small(rng)) : normal(rng);
        }
        std::vector<float> out(static_cast<size_t>(rows * n), -1.0f);
        cpu_vec::linear_packed_with(*packed_, x.data(), rows, k, w.data(), bias.data(), out.data(),
                                    panels, 0, panels);
        for (int64_t m = 0; m < rows; ++m) {
          for (int64_t c = 0; c < n; ++c) {
            const int64_t p = c / kPanelChannels, j = c % kPanelChannels;
            double sum = bias[c];
            double magnitude = std::abs(bias[c]);
            for (int64_t i = 0; i < k; ++i) {
              const double term =
                  static_cast<double>(x[m * k + i]) * w[(p * k + i) * kPanelChannels + j];
              sum += term;
              magnitude += std::abs(term);
            }
            const float got = out[m * n + c];
            if (exact) {
              ASSERT_EQ(got, static_cast<float>(sum))
                  << "k " << k << " rows " << rows << " at " << m << ", " << c;
            } else {
              // k + 1 roundings of float32 at most, each below eps times the running magnitude.
              ASSERT_NEAR(got, sum, (k + 1) * std::numeric_limits<float>::epsilon() * magnitude)
                  << "k " << k << " rows " << rows << " at " << m << ", " << c;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, CpuTier, ::testing::ValuesIn(kArchTiers), tier_name);

// The tier the process runs at is the CPU's highest without a cap (this test runs without one),
// and the tables it picks are that tier's or the nearest below with kernels of its own.
TEST(CpuIsa, UncappedRunsAtTheHighestTier) {
  const std::vector<CpuIsa>& have = cpu::available_cpu_isas();
  ASSERT_FALSE(have.empty());
  EXPECT_EQ(have.front(), CpuIsa::kScalar);
  EXPECT_EQ(cpu::active_cpu_isa(), have.back());
  EXPECT_EQ(cpu::cpu_isa_error(), "");
  EXPECT_EQ(&cpu_vec::quantized_linear_kernels(),
            cpu_vec::quantized_linear_kernels_at(have.back()));
}

}  // namespace
}  // namespace my_ops
