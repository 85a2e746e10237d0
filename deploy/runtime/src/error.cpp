#include "my_ops/error.h"

#include <cstdio>

#include "deploy/runtime/src/package_contract.h"

namespace my_ops::deploy {
namespace {

// ExitCode must say what the contract says, row for row.
#define MY_OPS_CHECK_EXIT_CODE(name, value, meaning)              \
  static_assert(name == value, "my_ops/error.h: " #name           \
                               " is not package_contract.json's " \
                               "exit code " #value);
MY_OPS_EXIT_CODES(MY_OPS_CHECK_EXIT_CODE)
#undef MY_OPS_CHECK_EXIT_CODE

#define MY_OPS_EXIT_CODE_MEANING(name, value, meaning) ExitCodeMeaning{name, meaning},
constexpr ExitCodeMeaning kMeanings[] = {MY_OPS_EXIT_CODES(MY_OPS_EXIT_CODE_MEANING)};
#undef MY_OPS_EXIT_CODE_MEANING

}  // namespace

std::span<const ExitCodeMeaning> exit_code_meanings() { return kMeanings; }

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
