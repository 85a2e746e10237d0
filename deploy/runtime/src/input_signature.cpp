#include "deploy/runtime/src/input_signature.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <limits>

#include "deploy/runtime/src/json_fields.h"

namespace my_ops::deploy::detail {
namespace {

// A signature is four levels deep: [ {"sizes": [ {"min": ...} ] } ]. Copying or destroying a
// parsed value recurses once per level, so deeper text is refused while it is parsed; and a model
// has a few inputs of a few dims each, so 2^16 values are far more than any signature holds.
constexpr JsonLimits kSignatureJsonLimits{4, 1 << 16};

// A JSON integer that fits int64_t and is >= 0 (a bool is not an integer here).
std::optional<int64_t> size_value(const Json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  return std::nullopt;
}

// An object with exactly these members, no others.
bool has_exactly(const Json& obj, std::initializer_list<const char*> keys) {
  if (!obj.is_object() || obj.size() != keys.size()) return false;
  return std::all_of(keys.begin(), keys.end(), [&](const char* k) { return obj.contains(k); });
}

std::optional<DimRange> parse_dim(const Json& d) {
  if (!has_exactly(d, {"min", "max"})) return std::nullopt;
  DimRange r;
  auto lo = size_value(d["min"]);
  if (!lo) return std::nullopt;
  r.lo = *lo;
  if (d["max"].is_null()) return r;
  auto hi = size_value(d["max"]);
  if (!hi || *hi < r.lo) return std::nullopt;
  r.hi = *hi;
  return r;
}

bool known_dtype(const std::string& dtype) {
  return std::find(std::begin(contract::kInputDtypes), std::end(contract::kInputDtypes), dtype) !=
         std::end(contract::kInputDtypes);
}

std::optional<InputSpec> parse_input(const Json& item) {
  if (!has_exactly(item, {"dtype", "sizes"})) return std::nullopt;
  const Json& dtype = item["dtype"];
  const Json& sizes = item["sizes"];
  if (!dtype.is_string() || !known_dtype(dtype.get<std::string>()) || !sizes.is_array()) {
    return std::nullopt;
  }
  InputSpec spec{dtype.get<std::string>(), {}};
  for (const auto& d : sizes) {
    auto r = parse_dim(d);
    if (!r) return std::nullopt;
    spec.dims.push_back(*r);
  }
  return spec;
}

}  // namespace

std::optional<std::vector<InputSpec>> parse_input_signature(const std::string& text) {
  Json root;
  try {
    root = parse_strict_json(text, kSignatureJsonLimits);
  } catch (const ManifestError&) {
    return std::nullopt;
  }
  if (!root.is_array()) return std::nullopt;
  std::vector<InputSpec> specs;
  for (const auto& item : root) {
    auto spec = parse_input(item);
    if (!spec) return std::nullopt;
    specs.push_back(std::move(*spec));
  }
  return specs;
}

std::string describe(const DimRange& r) {
  if (r.lo == r.hi) return std::to_string(r.lo);
  return std::to_string(r.lo) + ".." + (r.hi < 0 ? "inf" : std::to_string(r.hi));
}

std::optional<std::string> input_mismatch(const std::string& dtype,
                                          const std::vector<int64_t>& sizes,
                                          const InputSpec& spec) {
  if (dtype != spec.dtype) return "dtype " + dtype + ", expected " + spec.dtype;
  if (sizes.size() != spec.dims.size()) {
    return "rank " + std::to_string(sizes.size()) + ", expected " +
           std::to_string(spec.dims.size());
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    const auto& r = spec.dims[d];
    if (sizes[d] < r.lo || (r.hi >= 0 && sizes[d] > r.hi)) {
      return "dim " + std::to_string(d) + " is " + std::to_string(sizes[d]) + ", must be " +
             describe(r);
    }
  }
  return std::nullopt;
}

}  // namespace my_ops::deploy::detail
