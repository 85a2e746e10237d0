#include "deploy/loader/cpu_check.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace my_ops::loader {
namespace {

struct Row {
  std::string target;
  std::string name;
  bool level;
};

// Every row of the table, both targets: the other target's constants are never expanded.
#define MY_OPS_X86_LEVEL(n) {"linux-x86_64", n, true},
#define MY_OPS_X86_FEATURE(n, macro) {"linux-x86_64", n, false},
#define MY_OPS_AARCH64_LEVEL(n, type, bits) {"linux-aarch64", n, true},
#define MY_OPS_AARCH64_FEATURE(n, macro, type, bits) {"linux-aarch64", n, false},
const Row kRows[] = {
#include "deploy/loader/cpu_features.inc"
};
#undef MY_OPS_X86_LEVEL
#undef MY_OPS_X86_FEATURE
#undef MY_OPS_AARCH64_LEVEL
#undef MY_OPS_AARCH64_FEATURE

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
}  // namespace my_ops::loader
