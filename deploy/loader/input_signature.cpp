#include "deploy/loader/input_signature.h"

#include <charconv>
#include <sstream>

namespace my_ops::loader {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::optional<DimRange> parse_dim(const std::string& d) {
  DimRange r;
  auto dash = d.find('-');
  if (dash == std::string::npos) {
    if (!parse_int(d, r.lo) || r.lo < 0) return std::nullopt;
    r.hi = r.lo;
    return r;
  }
  const std::string hi = d.substr(dash + 1);
  if (!parse_int(d.substr(0, dash), r.lo) || r.lo < 0) return std::nullopt;
  if (hi == "inf") return r;
  if (!parse_int(hi, r.hi) || r.hi < r.lo) return std::nullopt;
  return r;
}

}  // namespace

bool parse_int(const std::string& s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

std::optional<std::vector<InputSpec>> parse_input_signature(const std::string& text) {
  std::vector<InputSpec> specs;
  for (const auto& item : split(text, ';')) {
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0) return std::nullopt;
    InputSpec spec{item.substr(0, colon), {}};
    const std::string dims = item.substr(colon + 1);
    if (!dims.empty()) {
      for (const auto& d : split(dims, ',')) {
        auto r = parse_dim(d);
        if (!r) return std::nullopt;
        spec.dims.push_back(*r);
      }
    }
    specs.push_back(std::move(spec));
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

}  // namespace my_ops::loader
