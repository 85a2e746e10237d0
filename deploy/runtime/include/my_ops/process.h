#pragma once

// What a program built on the deploy API opts into, so that every way it ends prints one line
// with the right exit code and leaves no private folder behind (the `loader` program does). A
// library that embeds the API leaves signals and fatal ends to its application and calls none of
// this; its Models work the same without it.
//
// Why stages: LibTorch and the code it loads can end the process where no catch reaches. An
// exception from a library's static initialiser calls std::terminate (a second TORCH_LIBRARY for
// a namespace, say), c10's registries call exit(1) on a duplicate key, and AOTInductor's runtime
// prints its own "Error: ..." line on stderr before it throws an exception that says only "API
// call failed". While a Stage is active, stderr goes to an anonymous in-memory file; a fatal end
// prints "<program>: error: <what>: <first line written meanwhile>", removes the private folders
// and exits with the stage's code. The API's loads run in stages of their own.
//
// Why a thread for signals: removing a folder tree is not async-signal-safe, so SIGINT, SIGTERM,
// SIGHUP and SIGQUIT are blocked in every thread and taken by one thread that waits for them
// with sigwait(), removes the folders (and a tensor file being written) in ordinary thread
// context, and _exit()s with 128 + the signal.

#include <string>

#include "my_ops/error.h"

namespace my_ops::deploy {

// Call once, first thing in main(), before anything starts a thread (every later thread
// inherits the blocked signals). `program` names the program in a fatal end's line.
void install_process_handlers(std::string program);

// Removes every private folder still there (of a Model or CheckedPackage not yet destroyed) and
// any tensor file being written; for the end of main(), on every path. Safe to call more than
// once, from any thread.
void remove_private_folders();

// One step of a program (loading a package, running it) whose fatal end is reported with `code`
// and `what` ("model run failed"). Stages do not nest across threads: a program runs one at a
// time (its runs may use many threads inside one). Without install_process_handlers() a Stage
// captures nothing and handles no fatal end.
class Stage {
 public:
  Stage(ExitCode code, std::string what);
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

}  // namespace my_ops::deploy
