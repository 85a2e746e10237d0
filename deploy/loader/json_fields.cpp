#include "deploy/loader/json_fields.h"

#include <sodium.h>

#include <algorithm>
#include <set>

#include "deploy/loader/text.h"

namespace my_ops::loader {

Json parse_strict_json(std::string_view text, const JsonLimits& limits) {
  // nlohmann takes a NUL as the end of the input, which would accept any bytes after one; JSON
  // text can hold none.
  if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw ManifestError("NUL byte at byte " + std::to_string(nul));
  }
  int values = 0;
  // Member names of each open object. nlohmann keeps the last of duplicate members, other
  // readers the first: such a manifest says two things.
  std::vector<std::set<std::string>> names;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start || event == Event::value) {
      if (depth > limits.max_depth) throw ManifestError("nested too deeply");
      if (++values > limits.max_values) {
        throw ManifestError("more than " + std::to_string(limits.max_values) + " values");
      }
    }
    if (event == Event::object_start) names.emplace_back();
    if (event == Event::object_end) names.pop_back();
    if (event == Event::key) {
      const auto& name = parsed.get_ref<const std::string&>();
      if (!names.back().insert(name).second) {
        throw ManifestError("duplicate member " + single_quoted(name));
      }
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    // Drops the "[json.exception.parse_error.101] " prefix. The rest quotes the offending token,
    // which can be long and is not always printable.
    std::string_view what = e.what();
    auto bracket = what.find("] ");
    if (bracket != std::string_view::npos) what.remove_prefix(bracket + 2);
    throw ManifestError(printable(what, 200));
  }
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 2 * crypto_hash_sha256_BYTES && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string string_member(const Json& obj, const char* key, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    throw ManifestError(ctx + "'" + key + "' must be a string");
  }
  return it->get<std::string>();
}

bool is_plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && std::none_of(s.begin(), s.end(), [](char c) {
    return c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

FileDigest digest_member(const Json& obj, const std::string& ctx) {
  if (!obj.is_object()) throw ManifestError(ctx + "must be an object");
  FileDigest d{string_member(obj, "file", ctx), string_member(obj, "sha256", ctx)};
  if (!is_plain_file_name(d.file)) {
    throw ManifestError(ctx + "'file' must be a plain file name, not " + single_quoted(d.file));
  }
  if (!is_sha256_hex(d.sha256)) {
    throw ManifestError(ctx + "'sha256' must be 64 lowercase hex digits");
  }
  return d;
}

void only_members(const Json& obj, std::initializer_list<const char*> names,
                  const std::string& ctx) {
  for (const auto& item : obj.items()) {
    if (std::none_of(names.begin(), names.end(), [&](const char* n) { return item.key() == n; })) {
      throw ManifestError(ctx + "unknown member " + single_quoted(item.key()));
    }
  }
}

const Json& array_member(const Json& obj, const char* key, size_t max, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) {
    throw ManifestError(ctx + "'" + key + "' must be an array");
  }
  if (it->size() > max) {
    throw ManifestError(ctx + "'" + key + "' holds more than " + std::to_string(max) + " entries");
  }
  return *it;
}

}  // namespace my_ops::loader
