#pragma once

// Copies a file into the private folder while hashing it, through one descriptor opened once.
// What is hashed is exactly what is copied, and the copy, which nobody else can write, is what
// gets loaded: replacing or rewriting the original after the check changes nothing.

#include <cstdint>
#include <string>

#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/file_io.h"

namespace my_ops::deploy::detail {

struct VerifiedCopy {
  std::string source;  // the path the user gave, for messages
  std::string copy;    // the private copy
  UniqueFd fd;         // open on the copy
  std::string sha256;  // hex
  uint64_t size = 0;
  uint64_t source_device = 0;  // st_dev and st_ino of the file the user named
  uint64_t source_inode = 0;
};

// What the copies are of, for messages and exit codes: a package, an op library.
constexpr FileRole kPackageRole{"package", kPackageMissing, kPackageCorrupt};
constexpr FileRole kOpLibraryRole{"op library", kOpsLibrary, kOpsLibrary};

// Fails with role's codes; kOther when the private folder cannot be written.
VerifiedCopy copy_and_hash(const std::string& source, const std::string& copy,
                           const FileRole& role);

// "/proc/self/fd/N" for the copy: dlopen() through the descriptor, not through a path.
std::string fd_path(const VerifiedCopy& file);

}  // namespace my_ops::deploy::detail
