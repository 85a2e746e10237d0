#include "deploy/runtime/src/manifest.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <set>

namespace my_ops::deploy::detail {
namespace {

std::vector<std::string> string_array(const Json& root, const char* key) {
  auto it = root.find(key);
  if (it == root.end() || !it->is_array()) {
    throw ManifestError(std::string("'") + key + "' must be an array");
  }
  std::vector<std::string> out;
  for (const auto& v : *it) {
    if (!v.is_string()) throw ManifestError(std::string("'") + key + "' must hold strings");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// A C identifier, as torch's namespace, operator, overload, class and method names are.
bool is_identifier(std::string_view s) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  return !s.empty() && alpha(s[0]) && std::all_of(s.begin(), s.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9');
  });
}

// "ns::name", and with `overload` also "ns::name.overload": how torch names an operator
// (OpOverload.name()) and, without the overload, a custom class in its namespace.
bool is_qualified_name(std::string_view s, bool overload) {
  if (s.size() > kMaxRegistrationNameBytes) return false;
  const size_t colons = s.find("::");
  if (colons == std::string_view::npos || !is_identifier(s.substr(0, colons))) return false;
  std::string_view rest = s.substr(colons + 2);
  if (const size_t dot = rest.find('.'); overload && dot != std::string_view::npos) {
    if (!is_identifier(rest.substr(dot + 1))) return false;
    rest = rest.substr(0, dot);
  }
  return is_identifier(rest);
}

// A schema as torch prints it: "NAME(ARGUMENTS) -> RETURNS", on one line.
std::string schema_member(const Json& entry, const std::string& name, const std::string& ctx) {
  std::string schema = string_member(entry, "schema", ctx);
  const std::string what = ctx + "the schema of " + name;
  if (schema.size() > kMaxSchemaBytes) {
    throw ManifestError(what + " is longer than " + std::to_string(kMaxSchemaBytes) + " bytes");
  }
  if (std::any_of(schema.begin(), schema.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    throw ManifestError(what + " holds a control character");
  }
  if (schema.rfind(name + "(", 0) != 0) {
    throw ManifestError(what + " must start with '" + name + "(', not " + single_quoted(schema));
  }
  return schema;
}

// The prefix of every AOTInductor C shim (aoti_torch_<device>_<op>).
constexpr const char* kCShimPrefix = "aoti_torch_";

// "ops": [{"name": "ns::op", "schema": "ns::op(...) -> ...", "c_shim": "aoti_torch_..."}, ...],
// "c_shim" only for an op the package calls as a C function.
std::vector<RequiredOp> ops_member(const Json& root) {
  const std::string ctx = "'ops': ";
  std::vector<RequiredOp> ops;
  std::set<std::string> seen;
  for (const auto& entry : array_member(root, "ops", kMaxRequiredOps, "")) {
    if (!entry.is_object()) throw ManifestError(ctx + "each entry must be an object");
    only_members(entry, {"name", "schema", "c_shim"}, ctx);
    RequiredOp op;
    op.name = string_member(entry, "name", ctx);
    if (!is_qualified_name(op.name, true)) {
      throw ManifestError(ctx + "'name' must be ns::name or ns::name.overload, not " +
                          single_quoted(op.name));
    }
    if (!seen.insert(op.name).second) throw ManifestError(ctx + op.name + " is listed twice");
    op.schema = schema_member(entry, op.name, ctx);
    if (entry.contains("c_shim")) {
      op.c_shim = string_member(entry, "c_shim", ctx);
      // Looked up with dlsym(): only a name of AOTI's shim family, never an arbitrary symbol.
      if (op.c_shim.size() > kMaxRegistrationNameBytes || !is_identifier(op.c_shim) ||
          op.c_shim.rfind(kCShimPrefix, 0) != 0) {
        throw ManifestError(ctx + "'c_shim' of " + op.name + " must be a C function named " +
                            kCShimPrefix + "..., not " + single_quoted(op.c_shim));
      }
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

// "classes": [{"name": "ns::Class", "methods": [{"name": "m", "schema": "m(...) -> ..."}]}, ...]
std::vector<RequiredClass> classes_member(const Json& root) {
  std::vector<RequiredClass> classes;
  std::set<std::string> seen;
  for (const auto& entry : array_member(root, "classes", kMaxRequiredClasses, "")) {
    const std::string ctx = "'classes': ";
    if (!entry.is_object()) throw ManifestError(ctx + "each entry must be an object");
    only_members(entry, {"name", "methods"}, ctx);
    RequiredClass cls;
    cls.name = string_member(entry, "name", ctx);
    if (!is_qualified_name(cls.name, false)) {
      throw ManifestError(ctx + "'name' must be ns::Class, not " + single_quoted(cls.name));
    }
    if (!seen.insert(cls.name).second) throw ManifestError(ctx + cls.name + " is listed twice");
    const std::string method_ctx = "'classes': " + cls.name + ": ";
    std::set<std::string> seen_methods;
    for (const auto& m : array_member(entry, "methods", kMaxRequiredMethods, method_ctx)) {
      if (!m.is_object()) throw ManifestError(method_ctx + "each method must be an object");
      only_members(m, {"name", "schema"}, method_ctx);
      RequiredMethod method;
      method.name = string_member(m, "name", method_ctx);
      if (method.name.size() > kMaxRegistrationNameBytes || !is_identifier(method.name)) {
        throw ManifestError(method_ctx + "'name' must be a method name, not " +
                            single_quoted(method.name));
      }
      if (!seen_methods.insert(method.name).second) {
        throw ManifestError(method_ctx + "method " + method.name + " is listed twice");
      }
      method.schema = schema_member(m, method.name, method_ctx);
      cls.methods.push_back(std::move(method));
    }
    classes.push_back(std::move(cls));
  }
  return classes;
}

// Target names as the exporter writes them print bare; anything else is quoted.
bool is_plain_name(const std::string& s) {
  return !s.empty() && s.size() <= 32 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

}  // namespace

std::string to_hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

Manifest parse_manifest(std::string_view text) {
  const Json root = parse_strict_json(text, kManifestJsonLimits);
  if (!root.is_object()) throw ManifestError("not a JSON object");
  Manifest m;
  m.format = string_member(root, "format", "");
  if (m.format != kManifestFormat) {
    throw ManifestError("format " + single_quoted(m.format) + ", this loader reads '" +
                        kManifestFormat + "'");
  }
  auto package = root.find("package");
  if (package == root.end()) throw ManifestError("'package' is missing");
  m.package = digest_member(*package, "'package': ");
  auto libs = root.find("op_libraries");
  if (libs == root.end() || !libs->is_array()) {
    throw ManifestError("'op_libraries' must be an array");
  }
  for (const auto& lib : *libs) m.op_libraries.push_back(digest_member(lib, "'op_libraries': "));
  m.torch_version = string_member(root, "torch_version", "");
  m.target = string_member(root, "target", "");
  m.isa = string_member(root, "isa", "");
  m.cpu_features = string_array(root, "cpu_features");
  if (auto device = root.find("device"); device != root.end()) {
    if (!device->is_string()) throw ManifestError("'device' must be a string");
    m.device = device->get<std::string>();
  }
  // Required, even when empty: a manifest without them cannot tell the loader what to check.
  m.registrations.ops = ops_member(root);
  m.registrations.classes = classes_member(root);
  return m;
}

std::vector<unsigned char> parse_public_key(std::string_view data) {
  if (data.size() == crypto_sign_PUBLICKEYBYTES) return {data.begin(), data.end()};
  const std::string_view begin = "-----BEGIN PUBLIC KEY-----";
  const std::string_view end = "-----END PUBLIC KEY-----";
  auto b = data.find(begin);
  auto e = data.find(end);
  const ManifestError bad("neither a PEM Ed25519 public key nor 32 raw bytes");
  if (b == std::string_view::npos || e == std::string_view::npos || e < b) throw bad;
  const std::string_view b64 = data.substr(b + begin.size(), e - b - begin.size());
  // DER of an Ed25519 SubjectPublicKeyInfo: a fixed 12-byte prefix, then the key.
  static const unsigned char kPrefix[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                          0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
  unsigned char der[64];
  size_t der_len = 0;
  if (sodium_base642bin(der, sizeof(der), b64.data(), b64.size(), " \t\r\n", &der_len, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      der_len != sizeof(kPrefix) + crypto_sign_PUBLICKEYBYTES ||
      std::memcmp(der, kPrefix, sizeof(kPrefix)) != 0) {
    throw bad;
  }
  return {der + sizeof(kPrefix), der + der_len};
}

bool signature_valid(std::string_view message, std::string_view signature,
                     const std::vector<unsigned char>& public_key) {
  return public_key.size() == crypto_sign_PUBLICKEYBYTES && signature.size() == crypto_sign_BYTES &&
         crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()),
                                     message.size(), public_key.data()) == 0;
}

std::string signature_path(const std::string& manifest_path) {
  const std::string ext = ".json";
  bool has_ext = manifest_path.size() > ext.size() &&
                 manifest_path.compare(manifest_path.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? manifest_path.substr(0, manifest_path.size() - ext.size()) : manifest_path) +
         ".sig";
}

std::string target_problem(const Manifest& m) {
  if (m.target == this_target()) return "";
  return std::string("the package was exported for ") +
         (is_plain_name(m.target) ? m.target : single_quoted(m.target)) + "; this loader runs on " +
         this_target() + " (export it with --target " + this_target() + ")";
}

CpuCheck check_cpu(const Manifest& m) { return check_cpu(m.isa, m.cpu_features); }

}  // namespace my_ops::deploy::detail
