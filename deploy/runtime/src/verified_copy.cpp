#include "deploy/runtime/src/verified_copy.h"

#include <sodium.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/manifest.h"

namespace my_ops::deploy::detail {

VerifiedCopy copy_and_hash(const std::string& source, const std::string& copy,
                           const FileRole& role) {
  if (sodium_init() < 0) fail(kOther, "cannot initialise libsodium");
  UniqueFd in = open_regular_file(source, role);
  struct stat st{};
  ::fstat(in.get(), &st);
  UniqueFd out = create_exclusive(copy, 0600);
  if (!out) fail(kOther, "cannot create " + copy + ": " + std::strerror(errno));
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  uint64_t size = 0;
  int write_err = 0;
  int read_err = read_chunks(in.get(), [&](const unsigned char* p, size_t n) {
    crypto_hash_sha256_update(&state, p, static_cast<unsigned long long>(n));
    size += n;
    if (write_err == 0) write_err = write_all(out.get(), p, n);
  });
  if (read_err != 0) {
    fail(role.missing_code,
         std::string("cannot read ") + role.what + " " + source + ": " + std::strerror(read_err));
  }
  if (write_err != 0) {
    fail(kOther, "cannot copy " + std::string(role.what) + " " + source + " to " + copy + ": " +
                     std::strerror(write_err));
  }
  // Read-only from here on, for this process too.
  ::fchmod(out.get(), 0400);
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  return VerifiedCopy{source,
                      copy,
                      std::move(out),
                      to_hex(digest, sizeof(digest)),
                      size,
                      static_cast<uint64_t>(st.st_dev),
                      static_cast<uint64_t>(st.st_ino)};
}

std::string fd_path(const VerifiedCopy& file) {
  return "/proc/self/fd/" + std::to_string(file.fd.get());
}

}  // namespace my_ops::deploy::detail
