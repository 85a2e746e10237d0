#pragma once

// The checks that run before any code from the package or an op library can: the package is a
// zip that is safe to extract and holds a model, and, unless --no-verify, everything matches the
// manifest (and its signature, with --public-key).

#include <cstdint>
#include <string>
#include <vector>

#include "deploy/loader/cli.h"
#include "deploy/loader/manifest.h"
#include "deploy/loader/verified_copy.h"

namespace my_ops::loader {

// Fails with kPackageCorrupt, naming the package.
void check_package(const VerifiedCopy& package, uint64_t max_unpacked_bytes);

// Fails with kIntegrity, naming the file at fault. Returns the device the manifest says the
// package runs on ("cpu", "cuda"), or "" with --no-verify. Sets `registrations` to what the
// manifest says the package calls, for check_registrations once the op libraries are loaded;
// with --no-verify there is no manifest, and it is left as it is.
std::string verify_manifest(const Options& opt, const VerifiedCopy& package,
                            const std::vector<VerifiedCopy>& libraries,
                            Registrations* registrations);

}  // namespace my_ops::loader
