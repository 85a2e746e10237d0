#include "deploy/runtime/src/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "deploy/runtime/src/failure.h"

namespace my_ops::deploy::detail {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {

// Each with a descriptor that stays open until the process ends, so that no other file can
// get its inode meanwhile (a deleted file's inode is reused).
std::mutex g_read_files_mutex;
std::set<std::pair<dev_t, ino_t>> g_read_files;  // guarded by g_read_files_mutex

bool is_read_file(const struct stat& st) {
  std::lock_guard<std::mutex> lock(g_read_files_mutex);
  return g_read_files.count({st.st_dev, st.st_ino}) > 0;
}

}  // namespace

UniqueFd open_regular_file(const std::string& path, const FileRole& role, bool* missing) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    if (missing != nullptr && err == ENOENT) {
      *missing = true;
      return fd;
    }
    if (err == ELOOP) {
      fail(role.missing_code,
           std::string(role.what) + " " + path + " is a symbolic link; pass the file it points to");
    }
    fail(role.missing_code,
         std::string("cannot open ") + role.what + " " + path + ": " + std::strerror(err));
  }
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    fail(role.missing_code,
         std::string("cannot read ") + role.what + " " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    fail(role.invalid_code, std::string(role.what) + " " + path + " is not a regular file");
  }
  {
    std::lock_guard<std::mutex> lock(g_read_files_mutex);
    if (g_read_files.emplace(st.st_dev, st.st_ino).second) {
      (void)::fcntl(fd.get(), F_DUPFD_CLOEXEC, 0);
    }
  }
  int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

int read_chunks(int fd, const std::function<void(const unsigned char*, size_t)>& sink) {
  std::vector<unsigned char> buf(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    sink(buf.data(), static_cast<size_t>(n));
  }
}

std::string read_all(int fd, const std::string& path, const FileRole& role, uint64_t cap,
                     std::string_view cap_flag) {
  std::string data;
  bool too_large = false;
  // Stops at the first chunk past the cap: an endless file costs one chunk, not memory.
  struct TooLarge {};
  int err = 0;
  try {
    err = read_chunks(fd, [&](const unsigned char* p, size_t n) {
      if (data.size() + n > cap) {
        too_large = true;
        throw TooLarge{};
      }
      data.append(reinterpret_cast<const char*>(p), n);
    });
  } catch (const TooLarge&) {
  }
  if (too_large) {
    std::string raise = cap_flag.empty() ? "" : " (raise it with " + std::string(cap_flag) + ")";
    fail(role.invalid_code, std::string(role.what) + " " + path + " is larger than " +
                                std::to_string(cap) + " bytes" + raise);
  }
  if (err != 0) {
    fail(role.missing_code,
         std::string("cannot read ") + role.what + " " + path + ": " + std::strerror(err));
  }
  return data;
}

bool read_at(int fd, uint64_t offset, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool read_exactly(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  char extra = 0;
  ssize_t got = 0;
  do {
    got = ::read(fd, &extra, 1);
  } while (got < 0 && errno == EINTR);
  return got == 0;
}

int write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t done = ::write(fd, p, n);
    if (done < 0 && errno == EINTR) continue;
    if (done < 0) return errno;
    if (done == 0) return EIO;
    p += done;
    n -= static_cast<size_t>(done);
  }
  return 0;
}

UniqueFd create_exclusive(const std::string& path, int mode) {
  return UniqueFd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
}

std::string dir_name(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::optional<std::string> output_problem(const std::string& path) {
  struct stat st{};
  // lstat: the rename replaces the name itself, so a symbolic link there is replaced, never
  // followed, whatever it points at.
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "is a folder";
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
      return "exists and is not a regular file (a device, a FIFO or a socket)";
    }
    if (is_read_file(st)) return "is a file this run reads";
  }
  const std::string dir = dir_name(path);
  if (::stat(dir.c_str(), &st) != 0) return "its folder " + dir + " does not exist";
  if (!S_ISDIR(st.st_mode)) return dir + " is not a folder";
  return std::nullopt;
}

namespace {

// The permissions a plain open(O_CREAT, 0666) would give: mkstemp always makes 0600. The umask
// is read from /proc, since umask() can only be read by setting it, which races with any thread
// that creates a file meanwhile.
mode_t default_file_mode() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) {
      unsigned mask = 022;
      std::sscanf(line.c_str() + 6, "%o", &mask);
      return 0666 & ~static_cast<mode_t>(mask);
    }
  }
  return 0644;
}

}  // namespace

void check_output(const std::string& path) {
  if (auto problem = output_problem(path)) {
    fail(kOutputUnwritable, "cannot write output " + path + ": " + *problem);
  }
}

void write_file_atomically(const std::string& path, std::string_view data,
                           const std::function<void(const std::string*)>& on_temp) {
  const mode_t mode = default_file_mode();
  const std::string dir = dir_name(path);
  check_output(path);
  std::string tmpl = dir + "/.loader.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  auto unwritable = [&](int err) {
    fail(kOutputUnwritable, "cannot write output " + path + ": " + std::strerror(err));
  };
  UniqueFd fd(::mkostemp(name.data(), O_CLOEXEC));
  if (!fd) unwritable(errno);
  const std::string tmp(name.data());
  if (on_temp) on_temp(&tmp);
  auto give_up = [&](int err) {
    ::unlink(tmp.c_str());
    if (on_temp) on_temp(nullptr);
    unwritable(err);
  };
  if (int err = write_all(fd.get(), data.data(), data.size()); err != 0) give_up(err);
  if (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0) give_up(errno);
  if (::close(fd.release()) != 0) give_up(errno);
  if (auto problem = output_problem(path)) {
    ::unlink(tmp.c_str());
    if (on_temp) on_temp(nullptr);
    fail(kOutputUnwritable, "cannot write output " + path + ": " + *problem);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up(errno);
  if (on_temp) on_temp(nullptr);
  // The rename is durable once the folder's entry is on disk too.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd) ::fsync(dir_fd.get());
}

}  // namespace my_ops::deploy::detail
