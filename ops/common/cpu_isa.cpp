#include "ops/common/cpu_isa.h"

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace my_ops::cpu {
namespace {

#if defined(__x86_64__)
constexpr CpuIsa kTiers[] = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                             CpuIsa::kAmx};

uint64_t xcr0() {
  unsigned low, high;
  __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  return (uint64_t{high} << 32) | low;
}

// Linux (5.16 and later) gives a process the AMX tile state only when it asks; the answer is the
// process's. ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA.
bool amx_permitted() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::vector<CpuIsa> probe() {
  std::vector<CpuIsa> tiers = {CpuIsa::kScalar};
  unsigned eax, ebx, ecx, edx;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return tiers;
  const bool fma = (ecx >> 12) & 1;
  const bool osxsave = (ecx >> 27) & 1;
  const bool avx = (ecx >> 28) & 1;
  const bool f16c = (ecx >> 29) & 1;
  if (!osxsave || !avx) return tiers;
  const uint64_t os_state = xcr0();
  if ((os_state & 0x6) != 0x6) return tiers;  // XMM and YMM state
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return tiers;
  const bool avx2 = (ebx >> 5) & 1;
  if (!(avx2 && fma && f16c)) return tiers;
  tiers.push_back(CpuIsa::kAvx2);
  const bool avx512 = ((ebx >> 16) & 1) && ((ebx >> 30) & 1) && ((ebx >> 31) & 1);  // F, BW, VL
  if (!avx512 || (os_state & 0xE0) != 0xE0) return tiers;  // opmask, ZMM_Hi256, Hi16_ZMM
  tiers.push_back(CpuIsa::kAvx512);
  if (((ecx >> 11) & 1) == 0) return tiers;
  tiers.push_back(CpuIsa::kAvx512Vnni);
  const bool amx_tile = (edx >> 24) & 1;
  const bool amx_int8 = (edx >> 25) & 1;
  const bool tile_state = (os_state & (uint64_t{3} << 17)) == (uint64_t{3} << 17);
  if (amx_tile && amx_int8 && tile_state && amx_permitted()) tiers.push_back(CpuIsa::kAmx);
  return tiers;
}
#elif defined(__aarch64__)
constexpr CpuIsa kTiers[] = {CpuIsa::kScalar, CpuIsa::kNeon, CpuIsa::kNeonDot, CpuIsa::kNeonI8mm};

// The kernel's hwcap bits (asm/hwcap.h), spelled out for sysroots whose headers predate them.
constexpr unsigned long kHwcapAsimd = 1ul << 1;
constexpr unsigned long kHwcapAsimddp = 1ul << 20;
constexpr unsigned long kHwcap2I8mm = 1ul << 13;

std::vector<CpuIsa> probe() {
  std::vector<CpuIsa> tiers = {CpuIsa::kScalar};
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  if ((hwcap & kHwcapAsimd) == 0) return tiers;
  tiers.push_back(CpuIsa::kNeon);
  if ((hwcap & kHwcapAsimddp) == 0) return tiers;
  tiers.push_back(CpuIsa::kNeonDot);
  if ((hwcap2 & kHwcap2I8mm) != 0) tiers.push_back(CpuIsa::kNeonI8mm);
  return tiers;
}
#else
constexpr CpuIsa kTiers[] = {CpuIsa::kScalar};
std::vector<CpuIsa> probe() { return {CpuIsa::kScalar}; }
#endif

struct Resolved {
  CpuIsa isa;
  std::string error;
};

Resolved resolve() {
  const std::vector<CpuIsa>& have = available_cpu_isas();
  const char* cap = std::getenv(kCpuIsaEnv);
  if (cap == nullptr || *cap == '\0') return {have.back(), ""};
  const std::string wanted(cap);
  std::vector<CpuIsa> known(std::begin(kTiers), std::end(kTiers));
  for (CpuIsa isa : known) {
    if (wanted != cpu_isa_name(isa)) continue;
    if (cpu_has_isa(isa)) return {isa, ""};
    return {have.back(), std::string(kCpuIsaEnv) + "=" + wanted +
                             ": this CPU lacks that tier (it has " + cpu_isa_names(have) + ")"};
  }
  return {have.back(), std::string(kCpuIsaEnv) + "=" + wanted + ": unknown tier (tiers on this " +
                           "architecture: " + cpu_isa_names(known) + ")"};
}

const Resolved& resolved() {
  static const Resolved r = resolve();
  return r;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Vnni:
      return "avx512_vnni";
    case CpuIsa::kAmx:
      return "amx";
    case CpuIsa::kNeon:
      return "neon";
    case CpuIsa::kNeonDot:
      return "neon_dot";
    case CpuIsa::kNeonI8mm:
      return "neon_i8mm";
  }
  return "unknown";
}

std::string cpu_isa_names(const std::vector<CpuIsa>& tiers, const char* separator) {
  std::string out;
  for (CpuIsa isa : tiers) out += (out.empty() ? "" : separator) + std::string(cpu_isa_name(isa));
  return out;
}

const std::vector<CpuIsa>& available_cpu_isas() {
  static const std::vector<CpuIsa> tiers = probe();
  return tiers;
}

bool cpu_has_isa(CpuIsa isa) {
  for (CpuIsa have : available_cpu_isas()) {
    if (have == isa) return true;
  }
  return false;
}

CpuIsa active_cpu_isa() {
  const Resolved& r = resolved();
  if (!r.error.empty()) throw std::runtime_error(r.error);
  return r.isa;
}

const std::string& cpu_isa_error() { return resolved().error; }

}  // namespace my_ops::cpu

// For the Python package and the loader, which read the tier without the C++ ABI (ctypes,
// dlsym): the active tier's name, or null when the cap is refused; the refusal's line, or null;
// the tiers this CPU has, comma-separated.
extern "C" {

__attribute__((visibility("default"))) const char* my_ops_cpu_isa() {
  const std::string& error = my_ops::cpu::cpu_isa_error();
  return error.empty() ? my_ops::cpu::cpu_isa_name(my_ops::cpu::active_cpu_isa()) : nullptr;
}

__attribute__((visibility("default"))) const char* my_ops_cpu_isa_error() {
  const std::string& error = my_ops::cpu::cpu_isa_error();
  return error.empty() ? nullptr : error.c_str();
}

__attribute__((visibility("default"))) const char* my_ops_cpu_isas() {
  static const std::string list =
      my_ops::cpu::cpu_isa_names(my_ops::cpu::available_cpu_isas(), ",");
  return list.c_str();
}
}
