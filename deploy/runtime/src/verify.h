#pragma once

// The checks that run before any code from the package or an op library can: the package is a
// zip that is safe to extract and holds a model, and everything matches the manifest (and its
// signature, with a public key).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deploy/runtime/src/manifest.h"
#include "deploy/runtime/src/verified_copy.h"

namespace my_ops::deploy::detail {

// The file at `path` (a manifest), read through one descriptor; nullopt when it does not exist.
// Fails with role's codes, also past `cap` bytes.
std::optional<std::string> read_small(const std::string& path, const FileRole& role, size_t cap);

// Checks that the signature beside `path` (manifest.json -> manifest.sig) is `public_key`'s
// signature of `text`, the bytes read from `path`. `what` names the file in errors ("manifest").
// Fails with kIntegrity.
void check_signature(const std::string& text, const std::string& what, const std::string& path,
                     const std::string& public_key);

// Fails with kPackageCorrupt, naming the package.
void check_package(const VerifiedCopy& package, uint64_t max_unpacked_bytes);

// Which manifest to check a package against, and how.
struct ManifestCheck {
  std::string manifest;    // "": manifest.json beside the package (as the user named it)
  std::string public_key;  // "": no signature needed
};

// Checks the package's and the libraries' copies against the manifest (and its signature, with
// a public key), and returns it. Fails with kIntegrity, naming the file at fault.
Manifest verify_manifest(const ManifestCheck& check, const VerifiedCopy& package,
                         const std::vector<VerifiedCopy>& libraries);

}  // namespace my_ops::deploy::detail
