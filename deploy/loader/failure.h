#pragma once

// The loader's exit codes and the one exception type that carries them to main(). Every error is
// one line on stderr and one of these codes, as `loader --help` lists them.

#include <string>
#include <utility>

namespace my_ops::loader {

enum ExitCode : int {
  kOk = 0,
  kOther = 1,
  kUsage = 2,
  kOpsLibrary = 3,
  kPackageMissing = 4,
  kPackageCorrupt = 5,
  kInputUnreadable = 6,
  kInputMismatch = 7,
  kOutputUnwritable = 8,
  kExpectMismatch = 9,
  kIntegrity = 10,
};

struct Failure {
  int code;
  std::string message;
};

[[noreturn]] inline void fail(int code, std::string message) {
  throw Failure{code, std::move(message)};
}

}  // namespace my_ops::loader
