// kernel_insns OP ROWS K N CALLS: runs one op's CPU kernels CALLS times on fixed inputs, at the
// tier this process runs at (MY_OPS_CPU_ISA caps it), and prints that tier and a checksum.
// //deploy:kernel_insns_aarch64 counts the instructions qemu executes in it with CALLS = 1 and
// CALLS = 3: the difference over two is one call's, start-up and set-up cancelled.
//
// OP: linear_int8, linear_int4 (groups of 32) or linear_packed (N a multiple of 32).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/common/cpu_isa.h"
#include "ops/packed_linear/cpu_vec.h"
#include "ops/quantized_linear/cpu_vec.h"

namespace {

using namespace my_ops;

constexpr int64_t kGroup = 32;
constexpr int64_t kPanel = 32;

int usage(const char* why) {
  std::fprintf(stderr,
               "kernel_insns: %s\n"
               "usage: kernel_insns linear_int8|linear_int4|linear_packed ROWS K N CALLS\n",
               why);
  return 2;
}

bool parse(const char* text, int64_t* value) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > (1 << 20)) return false;
  *value = v;
  return true;
}

// A fixed pseudo-random sequence (the counts must not depend on the run).
struct Lcg {
  uint32_t state = 12345;
  uint32_t next() { return state = state * 1664525u + 1013904223u; }
  float uniform() { return static_cast<float>(next() >> 8) / 16777216.0f * 2.0f - 1.0f; }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) return usage("expected 5 arguments");
  const std::string op = argv[1];
  int64_t rows = 0, k = 0, n = 0, calls = 0;
  if (!parse(argv[2], &rows)) return usage("ROWS: not an integer in [1, 2^20]");
  if (!parse(argv[3], &k)) return usage("K: not an integer in [1, 2^20]");
  if (!parse(argv[4], &n)) return usage("N: not an integer in [1, 2^20]");
  if (!parse(argv[5], &calls)) return usage("CALLS: not an integer in [1, 2^20]");
  if (op != "linear_int8" && op != "linear_int4" && op != "linear_packed") {
    return usage(("OP: unknown op '" + op + "'").c_str());
  }
  if (op == "linear_int4" && k % kGroup != 0) return usage("K: linear_int4 needs a multiple of 32");
  if (op == "linear_packed" && n % kPanel != 0)
    return usage("N: linear_packed needs a multiple of 32");
  if (!cpu::cpu_isa_error().empty()) {
    std::fprintf(stderr, "kernel_insns: %s\n", cpu::cpu_isa_error().c_str());
    return 2;
  }

  Lcg lcg;
  std::vector<float> x(static_cast<size_t>(rows * k));
  for (auto& v : x) v = lcg.uniform();
  std::vector<float> out(static_cast<size_t>(rows * n));
  std::vector<float> bias(static_cast<size_t>(n));
  for (auto& v : bias) v = lcg.uniform();
  const char* tier = nullptr;

  if (op == "linear_packed") {
    const auto& kernels = cpu_vec::packed_linear_kernels();
    tier = cpu::cpu_isa_name(kernels.isa);
    std::vector<float> weight(static_cast<size_t>(k * n));
    for (auto& v : weight) v = lcg.uniform();
    const int64_t panels = n / kPanel;
    for (int64_t c = 0; c < calls; ++c) {
      cpu_vec::linear_packed_with(kernels, x.data(), rows, k, weight.data(), bias.data(),
                                  out.data(), panels, 0, panels);
    }
  } else {
    // One call as the op runs it: the rows quantized, laid out for the tier, then the products.
    const auto& kernels = cpu_vec::quantized_linear_kernels();
    tier = cpu::cpu_isa_name(kernels.isa);
    const bool int4 = op == "linear_int4";
    std::vector<int8_t> w8(static_cast<size_t>(n * k));
    std::vector<uint8_t> w4(static_cast<size_t>(n * k / 2));
    for (auto& v : w8) v = static_cast<int8_t>(lcg.next() >> 24);
    for (auto& v : w4) v = static_cast<uint8_t>(lcg.next() >> 24);
    std::vector<float> scale(static_cast<size_t>(int4 ? n * k / kGroup : n));
    for (auto& v : scale) v = 0.01f + 0.001f * static_cast<float>(lcg.next() % 16);
    std::vector<uint8_t> q(static_cast<size_t>(rows * k));
    std::vector<cpu_vec::QuantizedRow> params(static_cast<size_t>(rows));
    for (int64_t c = 0; c < calls; ++c) {
      kernels.quantize_rows(x.data(), k, 0, rows, q.data(), params.data());
      if (int4) {
        const auto layout = kernels.int4_rows(q.data(), params.data(), rows, k, kGroup);
        kernels.linear_int4(q.data(), layout.empty() ? nullptr : layout.data(), params.data(), rows,
                            k, w4.data(), scale.data(), kGroup, bias.data(), out.data(), n, 0, n);
      } else {
        const auto layout = kernels.int8_rows(q.data(), params.data(), rows, k);
        kernels.linear_int8(q.data(), layout.empty() ? nullptr : layout.data(), params.data(), rows,
                            k, w8.data(), scale.data(), bias.data(), out.data(), n, 0, n);
      }
    }
  }
  double sum = 0.0;
  for (float v : out) sum += v;
  std::printf("tier %s\nchecksum %.6g\n", tier, sum);
  return 0;
}
