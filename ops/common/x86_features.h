#pragma once

// What this x86-64 CPU and its OS support, from CPUID and XCR0 directly: __builtin_cpu_supports
// would tie the library to libgcc's CPU model data. Each answer is computed once.

#if defined(__x86_64__)
#include <cpuid.h>

namespace my_ops {

// AVX-512 F, BW and VL, with the OS saving the AVX-512 registers (OSXSAVE, then XCR0's SSE, AVX,
// opmask and ZMM bits).
inline bool has_avx512() {
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    const bool avx512f = (ebx >> 16) & 1;
    const bool avx512bw = (ebx >> 30) & 1;
    const bool avx512vl = (ebx >> 31) & 1;
    if (!(avx512f && avx512bw && avx512vl)) return false;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || ((ecx >> 27) & 1) == 0) return false;
    unsigned xcr0_low, xcr0_high;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    (void)xcr0_high;
    return (xcr0_low & 0xE6) == 0xE6;
  }();
  return has;
}

// has_avx512() and VNNI (vpdpbusd).
inline bool has_avx512_vnni() {
  static const bool has = [] {
    if (!has_avx512()) return false;
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return ((ecx >> 11) & 1) != 0;
  }();
  return has;
}

}  // namespace my_ops
#endif
