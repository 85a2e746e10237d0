#include "deploy/runtime/src/private_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "deploy/runtime/src/failure.h"

namespace my_ops::deploy::detail {
namespace {

std::mutex g_mutex;
std::set<std::string> g_dirs;  // guarded by g_mutex: every folder not yet removed
std::string g_pending;         // guarded by g_mutex

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
  for (const std::string& dir : g_dirs) {
    ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  g_dirs.clear();
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

constexpr char kPrefix[] = "my_ops_loader.";
constexpr char kLockFile[] = "lock";
// A folder without a lock file is another loader's for the moment between creating the folder
// and its lock file, or an older loader's: stale only once it is this old.
constexpr time_t kUnlockedGraceSeconds = 600;

}  // namespace

int PrivateDir::remove_stale(const std::string& base) {
  DIR* dir = ::opendir(base.c_str());
  if (dir == nullptr) return 0;
  int removed = 0;
  const int base_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0 || name.size() != sizeof(kPrefix) - 1 + 6) continue;
    struct stat st{};
    if (::fstatat(base_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::getuid()) {
      continue;
    }
    const std::string lock = name + "/" + kLockFile;
    const int fd = ::openat(base_fd, lock.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    bool stale = false;
    if (fd >= 0) {
      // The owner holds the lock until it ends; only a folder whose owner is gone gives it.
      stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
      ::close(fd);
    } else {
      stale = errno == ENOENT && st.st_mtime + kUnlockedGraceSeconds < ::time(nullptr);
    }
    if (stale && ::nftw((base + "/" + name).c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0) {
      ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

void PrivateDir::block_signals() {
  const sigset_t set = handled_signals();
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void PrivateDir::handle_signals() { std::thread(wait_for_signal).detach(); }

std::unique_ptr<PrivateDir> PrivateDir::create() {
  const char* env = std::getenv("TMPDIR");
  const std::string base = env && *env ? env : "/tmp";
  remove_stale(base);
  std::string tmpl = base + "/" + kPrefix + "XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    fail(kOther, "cannot create a temporary folder " + tmpl + ": " + std::strerror(errno));
  }
  const std::string path = buf.data();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_dirs.insert(path);
  }
  // LibTorch ends the process with exit() on some errors (a duplicate registry key, say).
  static const bool at_exit = std::atexit(remove_all) == 0;
  (void)at_exit;
  const auto remove_folder = [&path] {
    std::lock_guard<std::mutex> lock(g_mutex);
    ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    g_dirs.erase(path);
  };
  // Held until the folder is removed (O_CLOEXEC: no child inherits it). Locked under another
  // name and then renamed, so that whoever finds "lock" finds it locked.
  const std::string lock = path + "/" + kLockFile;
  const std::string unlocked = lock + ".new";
  const int lock_fd =
      ::open(unlocked.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0 ||
      ::rename(unlocked.c_str(), lock.c_str()) != 0) {
    const int err = errno;
    if (lock_fd >= 0) ::close(lock_fd);
    remove_folder();
    fail(kOther, "cannot lock the temporary folder " + path + ": " + std::strerror(err));
  }
  struct statvfs fs{};
  if (::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_NOEXEC) != 0) {
    ::close(lock_fd);
    remove_folder();
    fail(kOther, "the temporary folder " + base +
                     " is on a file system mounted noexec, where the op libraries and the model "
                     "cannot be loaded; set TMPDIR to a folder on another file system");
  }
  return std::unique_ptr<PrivateDir>(new PrivateDir(path, lock_fd));
}

PrivateDir::~PrivateDir() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    // remove_all() may have removed it already (a signal, exit()).
    if (g_dirs.erase(path_) != 0) ::nftw(path_.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  ::close(lock_fd_);
}

void PrivateDir::set_pending_file(const std::string* path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_pending = path ? *path : std::string();
}

void PrivateDir::remove_all() {
  std::lock_guard<std::mutex> lock(g_mutex);
  remove_locked();
}

}  // namespace my_ops::deploy::detail
