#pragma once

// Text from outside (paths, entry names, manifest values) as it may appear in an error line.

#include <cstddef>
#include <string>
#include <string_view>

#include "my_ops/error.h"

namespace my_ops::deploy::detail {

// At most `max` characters of `s`, each byte outside printable ASCII replaced by '?', and "..."
// when it was longer: for short names inside a message.
std::string printable(std::string_view s, size_t max);

// printable(s, 64) in single quotes.
std::string single_quoted(std::string_view s);

}  // namespace my_ops::deploy::detail
