#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return s.size() > max ? out + "..." : out;
}

std::string single_quoted(std::string_view s) { return "'" + printable(s, 64) + "'"; }

}  // namespace my_ops::deploy::detail
