#pragma once

// Text from outside (paths, entry names, manifest values) as it may appear in an error line.

#include <cstddef>
#include <string>
#include <string_view>

namespace my_ops::loader {

// At most `max` characters of `s`, each byte outside printable ASCII replaced by '?', and "..."
// when it was longer: for short names inside a message.
std::string printable(std::string_view s, size_t max);

// printable(s, 64) in single quotes.
std::string single_quoted(std::string_view s);

// The whole of `s` on one line: control characters, DEL and backslash as C escapes (\n, \t,
// \\, \x1b), other bytes as they are. Every error line passes through it, so a path that holds
// a newline cannot forge a second line, nor an escape sequence drive the terminal.
std::string escape_line(std::string_view s);

}  // namespace my_ops::loader
