#pragma once

// After the op libraries are loaded and before the package is: every custom op the manifest
// says the package calls must be registered with exactly the schema it was exported with, and
// every custom class with the methods it calls. A missing or stale library otherwise fails deep
// inside torch ("Could not find schema ...") or, with a changed schema, calls an op with
// arguments it no longer takes.

#include <string>
#include <vector>

#include "deploy/runtime/src/manifest.h"

namespace my_ops::deploy::detail {

// Fails with kOpsLibrary: one line naming the op (or class or method), the schema expected and
// the one found (or that there is none), and `op_libraries`, the paths as the user gave them.
// An op the package calls as a C shim must also have that function in the global scope.
void check_registrations(const Registrations& needed, const std::vector<std::string>& op_libraries);

}  // namespace my_ops::deploy::detail
