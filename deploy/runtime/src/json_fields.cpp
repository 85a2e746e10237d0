#include "deploy/runtime/src/json_fields.h"

#include <sodium.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {

namespace {

// Builds the value with nlohmann's own DOM builder (detail::json_sax_dom_parser, what Json::parse
// uses without a callback; the version is pinned in MODULE.bazel) and checks each event on the
// way, in constant work per event but for the member-name lookups. A
// parse callback would do the same checks, but nlohmann's callback parser rescans the enclosing
// array at every closing '}', which made an array of many small objects quadratic: 20,000 "{}"
// took 15 s.
class StrictBuilder {
 public:
  StrictBuilder(Json& out, const JsonLimits& limits) : dom_(out, true), limits_(limits) {}

  bool null() { return value() && dom_.null(); }
  bool boolean(bool v) { return value() && dom_.boolean(v); }
  bool number_integer(Json::number_integer_t v) { return value() && dom_.number_integer(v); }
  bool number_unsigned(Json::number_unsigned_t v) { return value() && dom_.number_unsigned(v); }
  bool number_float(Json::number_float_t v, const std::string& s) {
    return value() && dom_.number_float(v, s);
  }
  bool string(std::string& v) { return value() && dom_.string(v); }
  bool binary(Json::binary_t& v) { return value() && dom_.binary(v); }
  bool start_object(std::size_t n) {
    open();
    names_.emplace_back();
    return dom_.start_object(n);
  }
  // nlohmann keeps the last of duplicate members, other readers the first: such a manifest says
  // two things.
  bool key(std::string& name) {
    if (!names_.back().insert(name).second) {
      throw ManifestError("duplicate member " + single_quoted(name));
    }
    return dom_.key(name);
  }
  bool end_object() {
    names_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open();
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    // Drops the "[json.exception.parse_error.101] " prefix. The rest quotes the offending token,
    // which can be long and is not always printable.
    std::string_view what = e.what();
    auto bracket = what.find("] ");
    if (bracket != std::string_view::npos) what.remove_prefix(bracket + 2);
    throw ManifestError(printable(what, 200));
  }

 private:
  // Every value counts, a container too; its depth is the number of containers around it.
  bool value() {
    if (depth_ > limits_.max_depth) throw ManifestError("nested too deeply");
    if (++values_ > limits_.max_values) {
      throw ManifestError("more than " + std::to_string(limits_.max_values) + " values");
    }
    return true;
  }
  void open() {
    value();
    ++depth_;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const JsonLimits& limits_;
  int depth_ = 0;
  int values_ = 0;
  // The member names of each open object.
  std::vector<std::set<std::string>> names_;
};

}  // namespace

Json parse_strict_json(std::string_view text, const JsonLimits& limits) {
  // nlohmann takes a NUL as the end of the input, which would accept any bytes after one; JSON
  // text can hold none.
  if (auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw ManifestError("NUL byte at byte " + std::to_string(nul));
  }
  Json out;
  StrictBuilder builder(out, limits);
  Json::sax_parse(text.begin(), text.end(), &builder);
  return out;
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

}  // namespace my_ops::deploy::detail
