#pragma once

// The checks that run before any code from the package or an op library can: the package is a
// zip that is safe to extract and holds a model, and everything matches the manifest (and its
// signature, with a public key).

#include <cstdint>
#include <string>
#include <vector>

#include "deploy/loader/manifest.h"
#include "deploy/loader/verified_copy.h"

namespace my_ops::loader {

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

}  // namespace my_ops::loader
