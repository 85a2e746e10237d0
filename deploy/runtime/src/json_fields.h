#pragma once

// The strict JSON reading that the manifests (manifest.json, weights.json) share: one JSON value
// that no two readers could read differently (no duplicate members, no NUL), within caps on its
// nesting and size, and the typed members both kinds of manifest hold.

#include <cstddef>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>

namespace my_ops::deploy::detail {

using Json = nlohmann::json;

// A manifest (or key) that is malformed; what() is a short, printable reason.
class ManifestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Copying or printing a parsed value recurses once per level: the caps keep a hostile file well
// clear of that, and its parse cheap.
struct JsonLimits {
  int max_depth = 16;
  int max_values = 4096;
};

// Parses exactly one JSON value, stricter than nlohmann alone, in time linear in its size.
// Throws ManifestError.
Json parse_strict_json(std::string_view text, const JsonLimits& limits);

struct FileDigest {
  std::string file;
  std::string sha256;
};

bool is_sha256_hex(const std::string& s);

// What the exporter writes: a base name. A path, "." or ".." never names the file beside the
// manifest, and a control character would split the one line an error is.
bool is_plain_file_name(const std::string& s);

// obj[key] as a string; `ctx` ("'package': ") begins the error.
std::string string_member(const Json& obj, const char* key, const std::string& ctx);

// {"file": a plain file name, "sha256": 64 lowercase hex digits}.
FileDigest digest_member(const Json& obj, const std::string& ctx);

// An entry holds only `names`: anything else would be a claim the reader ignores without
// saying so.
void only_members(const Json& obj, std::initializer_list<const char*> names,
                  const std::string& ctx);

// obj[key] as an array of at most `max` entries.
const Json& array_member(const Json& obj, const char* key, size_t max, const std::string& ctx);

}  // namespace my_ops::deploy::detail
