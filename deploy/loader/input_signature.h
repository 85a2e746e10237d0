#pragma once

// The input signature export.py stores in the package metadata under "my_ops.inputs": one entry
// per input separated by ';', each "Dtype:d0,d1,..." where a dim is "N" (static) or "LO-HI"
// (dynamic; HI may be "inf"). Dtype names are c10::toString's ("Float", "Half", ...).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace my_ops::loader {

constexpr const char* kInputSignatureKey = "my_ops.inputs";

struct DimRange {
  int64_t lo = 0;
  int64_t hi = -1;  // < 0: unbounded
};

struct InputSpec {
  std::string dtype;
  std::vector<DimRange> dims;
};

// nullopt when the text is not a signature this loader understands.
std::optional<std::vector<InputSpec>> parse_input_signature(const std::string& text);

// Why an input of this dtype and these sizes does not fit `spec` ("dtype Half, expected Float"),
// or nullopt when it fits.
std::optional<std::string> input_mismatch(const std::string& dtype,
                                          const std::vector<int64_t>& sizes, const InputSpec& spec);

// "3..inf", "1..8" or "4".
std::string describe(const DimRange& r);

// std::from_chars rather than strtol: glibc >= 2.38 headers redirect strtol to __isoc23_strtol,
// which would raise the binary's minimum glibc for nothing.
bool parse_int(const std::string& s, int64_t& out);

}  // namespace my_ops::loader
