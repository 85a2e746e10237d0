#pragma once

// The loader's private temporary folder (mode 0700) and the cleanup that runs on every exit path.
//
// It holds the verified copies of the package and the op libraries, and is $TMPDIR for
// AOTIModelPackageLoader, which extracts the package into it. CUDA packages load their kernels
// lazily from those extracted files, so the folder lives until the process ends.
//
// A folder outlives a loader that was killed (SIGKILL, a crash): each holds a lock file that its
// loader keeps locked until it ends, and every loader removes, at start, the folders of this
// user whose lock nobody holds, so a crash loop cannot fill the disk.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are blocked in every thread and taken by one
// thread that waits for them with sigwait(), removes the folder (and any output file being
// written) in ordinary thread context, and _exit()s with 128 + the signal. A signal handler could
// only call async-signal-safe functions, and removing a folder tree is not one.

#include <string>

namespace my_ops::loader {

class PrivateDir {
 public:
  // Blocks the signals above in the calling thread, which every later thread inherits; call it
  // first in main(), before anything starts a thread.
  static void block_signals();

  // Removes stale folders, creates the folder under $TMPDIR (or /tmp), starts the signal
  // thread, and points $TMPDIR at the folder. Fails with kOther, also when the folder is on a
  // file system mounted noexec, where no library or model could be loaded from it.
  static PrivateDir& create();

  // Removes the folders "my_ops_loader.*" in `base` that belong to this user and whose loader
  // has ended; returns how many. Errors are ignored: this is housekeeping.
  static int remove_stale(const std::string& base);

  const std::string& path() const { return path_; }

  // A file being written outside the folder (the output's temporary file) that a signal must
  // remove too; nullptr when there is none.
  static void set_pending_file(const std::string* path);

  // Removes the folder and any pending file. Safe to call more than once, from any thread.
  static void remove_all();

 private:
  explicit PrivateDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace my_ops::loader
