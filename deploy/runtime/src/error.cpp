#include "my_ops/error.h"

#include <cstdio>

namespace my_ops::deploy {

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

}  // namespace my_ops::deploy
