#pragma once

// The loader's exit codes and the one exception type that carries them to main(). Every error is
// one line on stderr and one of these codes, as `loader --help` lists them.

#include <string>
#include <utility>

#include "my_ops/error.h"

namespace my_ops::loader {

// The codes are the deploy API's (my_ops/error.h): the loader is built on that API and exits
// with the code of the error that ended it.
using deploy::ExitCode;
using enum deploy::ExitCode;

struct Failure {
  int code;
  std::string message;
};

[[noreturn]] inline void fail(int code, std::string message) {
  throw Failure{code, std::move(message)};
}

}  // namespace my_ops::loader
