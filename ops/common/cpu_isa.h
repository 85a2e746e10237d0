#pragma once

// The CPU kernels' variant layer: which instruction-set tier this process runs its kernels at.
//
// The CPU's features are probed once (CPUID and XCR0 on x86-64, getauxval on aarch64) and give
// the highest tier it has; MY_OPS_CPU_ISA caps it, so that a test, a bench or a user can run any
// variant the CPU has. Each op's config (its cpu_vec.cpp) fills its table of kernels once from
// active_cpu_isa(); each variant lives in a file of its own, <op>/cpu_<tier>.cpp.
//
// Tiers, lowest first. x86-64 (the library's baseline is x86-64-v3, so its portable loops are
// already compiled for AVX2 and FMA):
//   scalar       the portable loops
//   avx2         AVX2 + FMA + F16C kernels
//   avx512       AVX-512 F, BW, VL
//   avx512_vnni  + AVX-512 VNNI (vpdpbusd)
//   amx          + AMX-INT8, with Linux's permission for the tile state
// aarch64 (baseline armv8-a, where ASIMD is mandatory):
//   scalar, neon, neon_dot (sdot/udot), neon_i8mm (smmla/usmmla)
// A cap names a tier; it must be one this CPU has, and the kernels of that tier and below run.

#include <cstdint>
#include <string>
#include <vector>

namespace my_ops::cpu {

enum class CpuIsa : int {
  kScalar = 0,
  kAvx2,
  kAvx512,
  kAvx512Vnni,
  kAmx,
  kNeon,
  kNeonDot,
  kNeonI8mm,
};

// The environment variable that caps the tier.
inline constexpr const char* kCpuIsaEnv = "MY_OPS_CPU_ISA";

// "scalar", "avx2", ...: the names the cap takes.
const char* cpu_isa_name(CpuIsa isa);

// The tiers' names joined by `separator`: "scalar, avx2".
std::string cpu_isa_names(const std::vector<CpuIsa>& tiers, const char* separator = ", ");

// The tiers this CPU has, lowest first (scalar is always one).
const std::vector<CpuIsa>& available_cpu_isas();

bool cpu_has_isa(CpuIsa isa);

// The tier the kernels run at: the CPU's highest, or the cap. Throws std::runtime_error, with
// one line naming MY_OPS_CPU_ISA, when the cap names an unknown tier or one this CPU lacks.
CpuIsa active_cpu_isa();

// The cap's problem as that line, or "" when there is none (no cap, or a usable one).
const std::string& cpu_isa_error();

}  // namespace my_ops::cpu
