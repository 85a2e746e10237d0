// The CPU check on a real (or emulated) CPU, without GoogleTest, so that it cross-compiles with
// nothing but the loader's cpu_check.cpp and runs under qemu-user:
//
//   cpu_check_main [--target T] [--present A,B] [--missing C] [--unknown D]   (or --flag=value)
//
// Each name is checked alone (as a cpu_features entry, or as the "isa" level when it is one).
// Every name of this loader's own table must be known. Prints what this CPU has; exits 1 naming
// each expectation that fails, 2 on bad arguments.

#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "deploy/runtime/src/cpu_check.h"

namespace {

using my_ops::deploy::detail::check_cpu;
using my_ops::deploy::detail::cpu_feature_names;
using my_ops::deploy::detail::CpuCheck;

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v) {
    if (x == s) return true;
  }
  return false;
}

// "present", "missing" or "unknown".
std::string status(const std::string& name) {
  const CpuCheck c = check_cpu("native", {name});
  return contains(c.unknown, name) ? "unknown" : contains(c.missing, name) ? "missing" : "present";
}

}  // namespace

int main(int argc, char** argv) {
  std::string target;
  std::vector<std::pair<std::string, std::string>> expected;  // (name, status)
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (const size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      flag.clear();
    }
    if (flag == "--target") {
      target = value;
    } else if (flag == "--present" || flag == "--missing" || flag == "--unknown") {
      for (const auto& name : split(value)) expected.emplace_back(name, flag.substr(2));
    } else {
      std::cerr << "usage: cpu_check_main [--target T] [--present A,B] [--missing C] "
                   "[--unknown D]\n";
      return 2;
    }
  }

  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::cout << "cpu_check_main: FAIL: " << what << "\n";
    ++failures;
  };
  const std::string here = my_ops::deploy::detail::this_target();
  if (!target.empty() && target != here) fail("this_target() is " + here + ", not " + target);

  std::string has, lacks;
  for (const auto& name : cpu_feature_names()) {
    const std::string s = status(name);
    if (s == "unknown") fail(name + " is in this loader's table but unknown to check_cpu");
    (s == "present" ? has : lacks) += " " + name;
  }
  std::cout << "cpu_check_main: " << here << "\n  has:" << has << "\n  lacks:" << lacks << "\n";

  for (const auto& [name, want] : expected) {
    const std::string got = status(name);
    if (got != want) fail(name + " is " + got + ", expected " + want);
  }
  std::cout << "cpu_check_main: " << (failures ? "FAIL" : "ok") << "\n";
  return failures ? 1 : 0;
}
