#include "deploy/runtime/src/cpu_check.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "deploy/runtime/src/package_contract.h"

namespace my_ops::deploy::detail {
namespace {

struct Row {
  std::string target;
  std::string name;
  bool level;
};

// Every row of the contract, both targets: the other target's constants are never expanded.
#define MY_OPS_X86_ROW(n, is_level) {MY_OPS_TARGET_LINUX_X86_64, n, is_level},
#define MY_OPS_AARCH64_ROW(n, is_level, type, bits) {MY_OPS_TARGET_LINUX_AARCH64, n, is_level},
const Row kRows[] = {MY_OPS_CPU_FEATURES_LINUX_X86_64(MY_OPS_X86_ROW)
                         MY_OPS_CPU_FEATURES_LINUX_AARCH64(MY_OPS_AARCH64_ROW)};
#undef MY_OPS_X86_ROW
#undef MY_OPS_AARCH64_ROW

std::vector<std::string> names_of(const std::string& target) {
  std::vector<std::string> names;
  for (const auto& row : kRows) {
    if (row.target == target) names.push_back(row.name);
  }
  return names;
}

TEST(CpuFeatureTable, HasNoDuplicateNamesWithinATarget) {
  // A second row of a name would check the same manifest entry two ways.
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& row : kRows) {
    EXPECT_TRUE(seen.insert({row.target, row.name}).second) << row.target << " " << row.name;
  }
}

TEST(CpuFeatureTable, NoLevelOfOneTargetIsKnownToTheOther) {
  // The level in "isa" is always checked, so a package for the other architecture is refused
  // as unknown even if its target were never compared.
  for (const auto& row : kRows) {
    if (!row.level) continue;
    for (const auto& other : kRows) {
      if (other.target != row.target) {
        EXPECT_NE(other.name, row.name) << row.name;
      }
    }
  }
}

TEST(CpuCheck, KnowsExactlyThisTargetsRowsOfTheTable) {
  EXPECT_EQ(cpu_feature_names(), names_of(this_target()));
  EXPECT_FALSE(cpu_feature_names().empty());
  EXPECT_EQ(check_cpu("native", cpu_feature_names()).unknown, std::vector<std::string>{});
}

TEST(CpuCheck, ThisTargetIsTheArchitectureCompiledFor) {
#if defined(__x86_64__)
  EXPECT_STREQ(this_target(), "linux-x86_64");
#elif defined(__aarch64__)
  EXPECT_STREQ(this_target(), "linux-aarch64");
#endif
}

TEST(CpuCheck, AnotherArchitecturesNamesAreUnknown) {
#if defined(__x86_64__)
  const CpuCheck c = check_cpu("armv8-a", {"asimd", "fp"});
  EXPECT_EQ(c.unknown, (std::vector<std::string>{"armv8-a", "asimd", "fp"}));
#elif defined(__aarch64__)
  const CpuCheck c = check_cpu("x86-64-v3", {"avx2", "fma"});
  EXPECT_EQ(c.unknown, (std::vector<std::string>{"x86-64-v3", "avx2", "fma"}));
#endif
  EXPECT_EQ(c.missing, std::vector<std::string>{});
}

TEST(CpuCheck, NativeIsNotALevel) {
  EXPECT_EQ(check_cpu("native", {}).unknown, std::vector<std::string>{});
  EXPECT_EQ(check_cpu("native", {}).missing, std::vector<std::string>{});
}

}  // namespace
}  // namespace my_ops::deploy::detail
