#include "deploy/runtime/src/text.h"

#include <gtest/gtest.h>

#include <string>

namespace my_ops::deploy::detail {
namespace {

TEST(Text, PrintableKeepsNamesShortAndAscii) {
  EXPECT_EQ(printable(std::string("a\nb\x01") + "c", 10), "a?b?c");
  EXPECT_EQ(printable(std::string(100, 'x'), 3), "xxx...");
  EXPECT_EQ(single_quoted("model/a.so"), "'model/a.so'");
}

TEST(Text, EscapeLineKeepsOneLine) {
  // A caller-chosen path cannot start a second "loader: error:" line.
  EXPECT_EQ(escape_line("x\nloader: error: forged"), "x\\nloader: error: forged");
  EXPECT_EQ(escape_line("a\rb\tc\\d"), "a\\rb\\tc\\\\d");
  EXPECT_EQ(escape_line(std::string("\x1b[31m\x7f\0", 7)), "\\x1b[31m\\x7f\\x00");
  // UTF-8 names stay readable.
  EXPECT_EQ(escape_line("caf\xc3\xa9.pt"), "caf\xc3\xa9.pt");
}

}  // namespace
}  // namespace my_ops::deploy::detail
