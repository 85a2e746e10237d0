#pragma once

// What the loader is doing, so that every way out prints one line with the right exit code.
//
// LibTorch and the code it loads can end the process where no catch reaches: an exception from
// a library's static initialiser calls std::terminate (a second TORCH_LIBRARY for a namespace,
// say), c10's registries call exit(1) on a duplicate key, and AOTInductor's runtime prints its
// own "Error: ..." line on stderr before it throws an exception that says only "API call
// failed". While a Stage is active, stderr goes to an anonymous file; a fatal end
// (terminate, exit) prints "loader: error: <what>: <first line written meanwhile>", removes the
// private folder and exits with the stage's code.

#include <string>

namespace my_ops::loader {

class Stage {
 public:
  // Installs the std::terminate and exit handlers and the capture file (an anonymous one, in
  // memory); a program calls it once, first thing. Without it a Stage captures nothing and
  // handles no fatal end: a library embedding the runtime leaves those to its application.
  static void install();

  // `code` and `what` ("cannot load op library X") describe a fatal end while this lives.
  Stage(int code, std::string what);
  // Restores stderr and writes what was captured to it (warnings), unless taken or unless an
  // exception is leaving the stage: its one line says what went wrong.
  ~Stage();
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  // The first non-empty line written to stderr since the active stage began, or "" when no
  // stage captures stderr (the rest is dropped: the caller reports it in its own line instead).
  static std::string take_first_line();

 private:
  int uncaught_at_start_;
};

}  // namespace my_ops::loader
