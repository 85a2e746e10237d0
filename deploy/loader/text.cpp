#include "deploy/loader/text.h"

#include <cstdio>

namespace my_ops::loader {

std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return s.size() > max ? out + "..." : out;
}

std::string single_quoted(std::string_view s) { return "'" + printable(s, 64) + "'"; }

std::string escape_line(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char hex[5];
          std::snprintf(hex, sizeof(hex), "\\x%02x", c);
          out += hex;
        } else {
          out.push_back(ch);
        }
    }
  }
  return out;
}

}  // namespace my_ops::loader
