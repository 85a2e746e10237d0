#pragma once

// The target this loader was compiled for, and whether this CPU has the instruction sets a
// package was compiled for. The names come from deploy/contract/package_contract.json, which the
// exporter reads too. Needs neither LibTorch nor the manifest parser, so it builds and runs alone,
// under qemu for another architecture (tests/cpu_check_main.cpp).

#include <string>
#include <vector>

namespace my_ops::deploy::detail {

// How manifest.json names the target this loader runs on: "linux-x86_64" or "linux-aarch64".
const char* this_target();

// The CPU features asked for that this CPU lacks, and those this loader cannot check, in the
// order asked.
struct CpuCheck {
  std::vector<std::string> missing;
  std::vector<std::string> unknown;
};

// `isa` is a -march level ("x86-64-v3", "armv8-a") checked as a whole, or "native", which is
// not checked: `features` then lists everything the compiler could use.
CpuCheck check_cpu(const std::string& isa, const std::vector<std::string>& features);

// The names this loader can check (levels and features of its own target), in table order.
std::vector<std::string> cpu_feature_names();

}  // namespace my_ops::deploy::detail
