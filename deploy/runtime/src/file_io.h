#pragma once

// File access with one rule: a file is opened once, by the path the user gave, and everything
// after that goes through the descriptor. Nothing here reopens a path it has checked.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace my_ops::deploy::detail {

// Owns a file descriptor; closes it when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// What a file is, for error messages: "package", "op library", "input file", ...
struct FileRole {
  const char* what;
  int missing_code;  // exit code when it cannot be opened (missing, unreadable, a symlink)
  int invalid_code;  // exit code when it is not a regular file or too large
};

// Opens `path` read-only without following a final symbolic link, and requires a regular file.
// O_NONBLOCK while opening, so that a FIFO cannot block the open; cleared afterwards. With
// `missing` given, a file that does not exist sets it and returns an invalid UniqueFd. Every
// file opened here is remembered, so that no output replaces it (output_problem).
UniqueFd open_regular_file(const std::string& path, const FileRole& role, bool* missing = nullptr);

// Calls `sink` with each chunk of the rest of `fd`; returns 0, or the errno of a failed read.
int read_chunks(int fd, const std::function<void(const unsigned char*, size_t)>& sink);

// The rest of `fd` as a string. Fails with role.invalid_code past `cap` bytes, naming
// `cap_flag` (the option that raises it) when there is one.
std::string read_all(int fd, const std::string& path, const FileRole& role, uint64_t cap,
                     std::string_view cap_flag = {});

// Reads exactly `n` bytes at `offset`; false on a short read or an error.
bool read_at(int fd, uint64_t offset, void* buf, size_t n);

// Reads the rest of `fd` into `buf`: true when it holds exactly `n` bytes, false when it ends
// sooner or holds more (a file that changed size since it was measured), or on an error.
bool read_exactly(int fd, void* buf, size_t n);

// Writes all of `data`; returns 0 or the errno of the failed write.
int write_all(int fd, const void* data, size_t n);

// Creates `path` for reading and writing; fails if anything, a symbolic link included, is there.
// Returns an invalid UniqueFd with errno set on failure.
UniqueFd create_exclusive(const std::string& path, int mode);

std::string dir_name(const std::string& path);
std::string base_name(const std::string& path);

// Why `path` cannot become an output file, or nullopt: it exists and is not a regular file (a
// folder, a device such as /dev/null, a FIFO), it is a file this run has opened for reading
// (same device and inode: the input, the package, ...), or its folder is missing or not a
// folder. Checked early, so that a typo fails before a model loads, and again just before the
// output replaces `path`.
std::optional<std::string> output_problem(const std::string& path);

// Fails with kOutputUnwritable when output_problem() finds one.
void check_output(const std::string& path);

// Replaces `path` with `data` so that readers see the old file or the whole new one: a mkstemp
// file beside it (a short name, so any name the folder allows works for `path`; never a fixed
// name, never a followed link), fsync, rename, fsync of the folder. Fails with
// kOutputUnwritable, also when output_problem() finds one. `on_temp` sees the temporary file's
// path while it exists, so that a signal can remove it.
void write_file_atomically(const std::string& path, std::string_view data,
                           const std::function<void(const std::string*)>& on_temp = {});

}  // namespace my_ops::deploy::detail
