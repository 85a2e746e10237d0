#include "my_ops/process.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/private_dir.h"

namespace my_ops::deploy {
namespace {

using detail::PrivateDir;
using detail::read_chunks;
using detail::write_all;

std::mutex g_mutex;
std::string g_program = "my_ops";  // guarded by g_mutex; install_process_handlers() names it
int g_code = kOther;               // guarded by g_mutex
std::string g_what;                // guarded by g_mutex; "" when no stage is active
int g_saved_fd = -1;               // the real stderr while a stage captures it
int g_capture_fd = -1;             // the file it goes to meanwhile

std::string read_capture() {
  std::string text;
  if (g_capture_fd < 0) return text;
  ::lseek(g_capture_fd, 0, SEEK_SET);
  read_chunks(g_capture_fd, [&](const unsigned char* p, size_t n) {
    if (text.size() < (1 << 20)) text.append(reinterpret_cast<const char*>(p), n);
  });
  return text;
}

std::string first_line(const std::string& text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
    start = end + 1;
  }
  return "";
}

// Puts the real stderr back; the captured text stays in the file.
void restore_stderr() {
  if (g_saved_fd < 0) return;
  ::dup2(g_saved_fd, STDERR_FILENO);
  ::close(g_saved_fd);
  g_saved_fd = -1;
}

void clear_capture() {
  if (g_capture_fd < 0) return;
  ::ftruncate(g_capture_fd, 0);
  ::lseek(g_capture_fd, 0, SEEK_SET);
}

[[noreturn]] void fatal_end(const std::string& reason) {
  // No unlock: the process ends here, and no other thread may start a stage meanwhile.
  g_mutex.lock();
  const std::string captured = first_line(read_capture());
  restore_stderr();
  std::string why = captured.empty() ? reason : captured;
  const std::string line =
      g_program + ": error: " + escape_line(g_what.empty() ? why : g_what + ": " + why) + "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
  const int code = g_what.empty() ? kOther : g_code;
  PrivateDir::remove_all();
  std::_Exit(code);
}

void on_terminate() {
  std::string reason = "the process called std::terminate";
  if (auto current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      reason = e.what();
      reason = reason.substr(0, reason.find('\n'));
    } catch (...) {
      reason = "unknown exception";
    }
  }
  fatal_end(reason);
}

// exit() from inside a stage (LibTorch's registries) is fatal; from main's return it is not.
void on_exit() {
  bool in_stage = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    in_stage = !g_what.empty();
  }
  if (in_stage) fatal_end("LibTorch ended the process");
}

}  // namespace

void install_process_handlers(std::string program) {
  PrivateDir::block_signals();
  PrivateDir::handle_signals();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_program = std::move(program);
  }
  std::set_terminate(on_terminate);
  std::atexit(on_exit);
  // An anonymous file: nothing on disk to clean up, nothing another process can open.
  g_capture_fd = ::memfd_create("stage_stderr", MFD_CLOEXEC);
}

Stage::Stage(ExitCode code, std::string what) : uncaught_at_start_(std::uncaught_exceptions()) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_code = code;
  g_what = std::move(what);
  if (g_capture_fd < 0 || g_saved_fd >= 0) return;
  ::fflush(stderr);
  g_saved_fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
  if (g_saved_fd >= 0) ::dup2(g_capture_fd, STDERR_FILENO);
}

Stage::~Stage() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_what.clear();
  g_code = kOther;
  ::fflush(stderr);
  const std::string text = read_capture();
  restore_stderr();
  const bool failing = std::uncaught_exceptions() > uncaught_at_start_;
  if (!failing && !text.empty()) write_all(STDERR_FILENO, text.data(), text.size());
  clear_capture();
}

std::string Stage::take_first_line() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ::fflush(stderr);
  const std::string line = first_line(read_capture());
  clear_capture();
  return line;
}

void remove_private_folders() { PrivateDir::remove_all(); }

}  // namespace my_ops::deploy
