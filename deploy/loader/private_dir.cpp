#include "deploy/loader/private_dir.h"

#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "deploy/loader/failure.h"

namespace my_ops::loader {
namespace {

std::mutex g_mutex;
std::string g_dir;      // guarded by g_mutex
std::string g_pending;  // guarded by g_mutex

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  return set;
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

void remove_locked() {
  if (!g_pending.empty()) {
    ::unlink(g_pending.c_str());
    g_pending.clear();
  }
  if (!g_dir.empty()) {
    ::nftw(g_dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_dir.clear();
  }
}

void wait_for_signal() {
  const sigset_t set = handled_signals();
  int sig = 0;
  while (::sigwait(&set, &sig) != 0) {
  }
  // Holding the lock until _exit: no other thread can start or finish a cleanup meanwhile.
  g_mutex.lock();
  remove_locked();
  ::_exit(128 + sig);
}

}  // namespace

void PrivateDir::block_signals() {
  const sigset_t set = handled_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

PrivateDir& PrivateDir::create() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/my_ops_loader.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    fail(kOther, "cannot create a temporary folder " + tmpl + ": " + std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_dir = buf.data();
  }
  std::thread(wait_for_signal).detach();
  // LibTorch ends the process with exit() on some errors (a duplicate registry key, say).
  std::atexit(remove_all);
  ::setenv("TMPDIR", buf.data(), 1);
  static PrivateDir dir(buf.data());
  return dir;
}

void PrivateDir::set_pending_file(const std::string* path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pending = path ? *path : std::string();
}

void PrivateDir::remove_all() {
  std::lock_guard<std::mutex> lock(g_mutex);
  remove_locked();
}

}  // namespace my_ops::loader
