#pragma once

// manifest.json, written by the exporter beside model.pt2: what the package and its op libraries
// must be (sha256), what they were built with (torch release) and for (target, CPU features).
// The loader checks all of it before it loads either. Parsing is strict: a manifest that two
// JSON readers could read differently (duplicate members, a NUL, lone surrogates) is refused.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "deploy/runtime/src/cpu_check.h"
#include "deploy/runtime/src/json_fields.h"
#include "deploy/runtime/src/package_contract.h"
#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {

// The format this loader reads, the one the exporter writes (deploy/exporter/manifest.py).
using contract::kManifestFormat;
// Manifests are a few hundred bytes; the cap keeps a hostile file from costing more than a read.
constexpr size_t kMaxManifestBytes = 1 << 20;
// A manifest is three levels and a few dozen values deep.
constexpr JsonLimits kManifestJsonLimits{16, 4096};

// An op the package calls: "ns::name", or "ns::name.overload" for another overload than the
// default, and its schema as torch prints it (str(op._schema) in Python, c10::toString(schema)
// in C++).
struct RequiredOp {
  std::string name;
  std::string schema;
  // The C function the package calls for this op ("aoti_torch_cpu_<op>"), which the op
  // libraries must define; empty when the package calls the op through AOTI's ProxyExecutor.
  std::string c_shim;
};

// A method of a custom class the package calls, and its schema as torch prints it.
struct RequiredMethod {
  std::string name;
  std::string schema;
};

// A custom (TorchBind) class the package holds: "ns::Class", i.e. torch.classes.ns.Class.
struct RequiredClass {
  std::string name;
  std::vector<RequiredMethod> methods;
};

// What the package calls that op libraries register, read from the exported program; empty
// with --no-verify, where there is no manifest to say.
struct Registrations {
  std::vector<RequiredOp> ops;
  std::vector<RequiredClass> classes;
};

// Caps on what "ops" and "classes" hold: far above any real model (the default one calls four
// ops and one class), low enough that a hostile manifest cannot make the checks costly.
constexpr size_t kMaxRequiredOps = 1024;
constexpr size_t kMaxRequiredClasses = 256;
constexpr size_t kMaxRequiredMethods = 256;
constexpr size_t kMaxRegistrationNameBytes = 256;
constexpr size_t kMaxSchemaBytes = 4096;

struct Manifest {
  std::string format;
  FileDigest package;
  std::vector<FileDigest> op_libraries;
  Registrations registrations;
  std::string torch_version;
  std::string target;  // "linux-x86_64", "linux-aarch64": this_target() of the loader it is for
  std::string isa;
  std::vector<std::string> cpu_features;
  std::string device;
};

// Throws ManifestError.
Manifest parse_manifest(std::string_view text);

// An Ed25519 public key: the raw 32 bytes, or PEM SubjectPublicKeyInfo (what `openssl pkey
// -pubout` and export --generate-key write). Throws ManifestError.
std::vector<unsigned char> parse_public_key(std::string_view data);

// True when `signature` is a valid Ed25519 signature of `message` under `public_key`.
bool signature_valid(std::string_view message, std::string_view signature,
                     const std::vector<unsigned char>& public_key);

// "manifest.json" -> "manifest.sig", as the exporter names them.
std::string signature_path(const std::string& manifest_path);

// Why this loader must refuse a package exported for another target, in a phrase that follows
// "manifest PATH: "; "" when the manifest is for this loader's target. Checked before the CPU
// features, which name another architecture's instruction sets.
std::string target_problem(const Manifest& m);

// check_cpu(m.isa, m.cpu_features).
CpuCheck check_cpu(const Manifest& m);

std::string to_hex(const unsigned char* data, size_t n);

}  // namespace my_ops::deploy::detail
