#pragma once

// The input signature the exporter stores in the package metadata under kInputSignatureKey, as
// JSON: one object per input, [{"dtype": "Float", "sizes": [{"min": 1, "max": 16}, ...]}, ...],
// where a static dim has min == max and an unbounded one "max": null. Dtype names are
// c10::toString's
// ("Float", "Half", ...), one of contract::kInputDtypes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deploy/runtime/src/package_contract.h"

namespace my_ops::deploy::detail {

using contract::kInputSignatureKey;

struct DimRange {
  int64_t lo = 0;
  int64_t hi = -1;  // < 0: unbounded
};

struct InputSpec {
  std::string dtype;
  std::vector<DimRange> dims;
};

// nullopt when the text is not a signature this loader understands: not JSON, a member missing,
// unknown or of the wrong type, a size negative or out of order, or a dtype it does not know.
std::optional<std::vector<InputSpec>> parse_input_signature(const std::string& text);

// Why an input of this dtype and these sizes does not fit `spec` ("dtype Half, expected Float"),
// or nullopt when it fits.
std::optional<std::string> input_mismatch(const std::string& dtype,
                                          const std::vector<int64_t>& sizes, const InputSpec& spec);

// "3..inf", "1..8" or "4".
std::string describe(const DimRange& r);

}  // namespace my_ops::deploy::detail
