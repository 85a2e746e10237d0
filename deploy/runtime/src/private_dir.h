#pragma once

// The loader's private temporary folder (mode 0700) and the cleanup that runs on every exit path.
//
// It holds the verified copies of the package and the op libraries, and the package extracted
// (load_package points AOTIModelPackageLoader at it). CUDA packages load their kernels lazily from
// those extracted files, so a folder lives as long as the model loaded from it.
//
// A folder outlives a process that was killed (SIGKILL, a crash): each holds a lock file that its
// process keeps locked until the folder is removed or the process ends, and every new folder's
// creator first removes the folders of this user whose lock nobody holds, so a crash loop cannot
// fill the disk.
//
// Signals, in a program that asks (handle_signals): SIGINT, SIGTERM, SIGHUP and SIGQUIT are
// blocked in every thread and taken by one thread that waits for them with sigwait(), removes the
// folders (and any output file being written) in ordinary thread context, and _exit()s with 128 +
// the signal. A signal handler could
// only call async-signal-safe functions, and removing a folder tree is not one.

#include <memory>
#include <string>

namespace my_ops::deploy::detail {

class PrivateDir {
 public:
  // Blocks the signals above in the calling thread, which every later thread inherits; call it
  // first in main(), before anything starts a thread.
  static void block_signals();

  // Starts the thread that takes those signals, removes every folder and the pending file, and
  // _exit()s with 128 + the signal. A program calls it once, after block_signals(); a library
  // embedding the runtime leaves signals to its application.
  static void handle_signals();

  // Removes stale folders and creates a folder under $TMPDIR (or /tmp), removed when the
  // PrivateDir is destroyed, by remove_all(), or at exit(). Fails with kOther, also when the
  // folder is on a file system mounted noexec, where no library or model could be loaded from it.
  static std::unique_ptr<PrivateDir> create();

  // Removes the folders "my_ops_loader.*" in `base` that belong to this user and whose loader
  // has ended; returns how many. Errors are ignored: this is housekeeping.
  static int remove_stale(const std::string& base);

  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;

  const std::string& path() const { return path_; }

  // A file being written outside the folder (the output's temporary file) that a signal must
  // remove too; nullptr when there is none.
  static void set_pending_file(const std::string* path);

  // Removes every folder still there and any pending file. Safe to call more than once, from
  // any thread.
  static void remove_all();

 private:
  PrivateDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

}  // namespace my_ops::deploy::detail
