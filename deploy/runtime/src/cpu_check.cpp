#include "deploy/runtime/src/cpu_check.h"

#include "deploy/runtime/src/package_contract.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace my_ops::deploy::detail {
namespace {

// Each target expands only its own rows of the contract; the other target's rows stay an
// unexpanded macro, so their constants need not exist here.
#if defined(__x86_64__)

constexpr const char* kThisTarget = MY_OPS_TARGET_LINUX_X86_64;

struct CpuFeature {
  const char* name;
  // __builtin_cpu_supports takes a string literal only, hence a function per name.
  bool (*supported)();
};

#define MY_OPS_ROW(n, is_level) {n, [] { return __builtin_cpu_supports(n) != 0; }},
const CpuFeature kCpuFeatures[] = {MY_OPS_CPU_FEATURES_LINUX_X86_64(MY_OPS_ROW)};
#undef MY_OPS_ROW

// What this CPU has, as libgcc reads it from cpuid.
class CpuProbe {
 public:
  CpuProbe() { __builtin_cpu_init(); }
  bool has(const CpuFeature& f) const { return f.supported(); }
};

#elif defined(__aarch64__)

constexpr const char* kThisTarget = MY_OPS_TARGET_LINUX_AARCH64;

struct CpuFeature {
  const char* name;
  unsigned long type;  // AT_HWCAP or AT_HWCAP2
  unsigned long bits;  // all of them required
};

#define MY_OPS_ROW(n, is_level, type, bits) {n, type, bits},
const CpuFeature kCpuFeatures[] = {MY_OPS_CPU_FEATURES_LINUX_AARCH64(MY_OPS_ROW)};
#undef MY_OPS_ROW

// What this CPU has as the kernel reports it: only features it also lets user code use. aarch64
// has no cpuid for user code, and libgcc's __builtin_cpu_supports is x86-only in gcc 12.
class CpuProbe {
 public:
  CpuProbe() : hwcap_(getauxval(AT_HWCAP)), hwcap2_(getauxval(AT_HWCAP2)) {}
  bool has(const CpuFeature& f) const {
    const unsigned long have = f.type == AT_HWCAP2 ? hwcap2_ : hwcap_;
    return (have & f.bits) == f.bits;
  }

 private:
  unsigned long hwcap_;
  unsigned long hwcap2_;
};

#else
#error "the loader checks x86_64 and aarch64 CPUs only; add the target to package_contract.json"
#endif

const CpuFeature* find_feature(const std::string& name) {
  for (const auto& f : kCpuFeatures) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

}  // namespace

const char* this_target() { return kThisTarget; }

CpuCheck check_cpu(const std::string& isa, const std::vector<std::string>& features) {
  const CpuProbe cpu;
  std::vector<std::string> needed = features;
  if (isa != "native") needed.insert(needed.begin(), isa);
  CpuCheck result;
  for (const auto& name : needed) {
    const CpuFeature* f = find_feature(name);
    if (f == nullptr) {
      result.unknown.push_back(name);
    } else if (!cpu.has(*f)) {
      result.missing.push_back(name);
    }
  }
  return result;
}

std::vector<std::string> cpu_feature_names() {
  std::vector<std::string> names;
  for (const auto& f : kCpuFeatures) names.emplace_back(f.name);
  return names;
}

}  // namespace my_ops::deploy::detail
