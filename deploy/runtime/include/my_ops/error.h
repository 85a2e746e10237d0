#pragma once

// The one exception type of the my_ops deploy API (my_ops/model.h). Every failure of the API is a
// my_ops::deploy::Error: a code saying what kind of thing went wrong, and one printable line
// naming the file, argument or op at fault. LibTorch's own exceptions never escape the API; they
// arrive translated into one of these.
//
// The codes are the exit codes of the `loader` program, which is built on this API and exits
// with error.code() after printing "loader: error: " + error.what().

#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace my_ops::deploy {

// One meaning per number across every program of the project (package_contract.json's
// exit_codes, which the library checks this list against when it compiles).
enum ExitCode : int {
  kOk = 0,
  kOther = 1,                 // anything else: a kernel failed, the machine lacks something
  kUsage = 2,                 // a bad option or argument
  kOpsLibrary = 3,            // an op library cannot be loaded, or lacks an op the package calls
  kPackageMissing = 4,        // the package file does not exist or cannot be read
  kPackageCorrupt = 5,        // the package is not a package this runtime can load
  kInputUnreadable = 6,       // an input file cannot be read (the loader's --input)
  kInputMismatch = 7,         // inputs do not fit the package's input signature
  kOutputUnwritable = 8,      // an output file cannot be written (the loader's --output)
  kExpectMismatch = 9,        // outputs differ from the expected ones (the loader's --expect)
  kIntegrity = 10,            // the package or a library does not match its manifest or signature
  kNotBaseArchitecture = 11,  // the exporter's alone: a model for another package's weights
  kAccuracy = 12,             // the exporter's alone: a quantized model too far from the float one
  kNoCudaBackend = 13,        // a CUDA package on a LibTorch without its CUDA backend
  kNotDecoder = 14,           // generate on a package that is not a decoder with a KV cache
};

class Error : public std::exception {
 public:
  Error(ExitCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ExitCode code() const noexcept { return code_; }
  // One line, without "loader: error: " or a trailing newline. Names and paths from outside
  // appear as they were given, so print it escaped where that matters.
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  ExitCode code_;
  std::string message_;
};

// Every code with what it means, in order of code: what a program's --help lists.
struct ExitCodeMeaning {
  ExitCode code;
  const char* meaning;
};
std::span<const ExitCodeMeaning> exit_code_meanings();

// The whole of `s` on one line, as an Error's text should be printed: control characters, DEL
// and backslash as C escapes (\n, \t, \\, \x1b), other bytes as they are. A path that holds a
// newline then cannot forge a second line, nor an escape sequence drive the terminal.
std::string escape_line(std::string_view s);

}  // namespace my_ops::deploy
