#pragma once

// How the runtime's units fail: by throwing the API's one exception type (my_ops/error.h), with
// one of its codes. No LibTorch here, so the parsers that use it build and test without it.

#include <string>
#include <utility>

#include "my_ops/error.h"

namespace my_ops::deploy::detail {

// `code` is an ExitCode; an int, since a file's role (file_io.h) carries its codes as data.
[[noreturn]] inline void fail(int code, std::string message) {
  throw Error(static_cast<ExitCode>(code), std::move(message));
}

}  // namespace my_ops::deploy::detail
