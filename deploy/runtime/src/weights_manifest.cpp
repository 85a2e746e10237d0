#include "deploy/runtime/src/weights_manifest.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {
namespace {

struct DtypeSize {
  const char* name;
  size_t size;
};

// c10's names for the dtypes of the contract (kInputDtypes), with their element sizes;
// weights_manifest_test checks that each of the contract's has one.
constexpr DtypeSize kDtypeSizes[] = {
    {"Float", 4}, {"Double", 8}, {"Half", 2}, {"BFloat16", 2}, {"Long", 8},
    {"Int", 4},   {"Short", 2},  {"Char", 1}, {"Byte", 1},     {"Bool", 1},
};

uint64_t unsigned_member(const Json& obj, const char* key, const std::string& ctx) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_unsigned()) {
    throw ManifestError(ctx + "'" + key + "' must be a non-negative integer");
  }
  return it->get<uint64_t>();
}

// A name as the exporter writes it: a module path ("layers.0.mlp.weight"), printable, one line.
std::string printable_name(std::string name, const char* what, const std::string& ctx) {
  if (name.empty() || name.size() > kMaxWeightsNameBytes ||
      std::any_of(name.begin(), name.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    throw ManifestError(ctx + what + " must be a printable name of at most " +
                        std::to_string(kMaxWeightsNameBytes) + " bytes");
  }
  return name;
}

std::string name_member(const Json& obj, const char* key, const std::string& ctx) {
  return printable_name(string_member(obj, key, ctx), ("'" + std::string(key) + "'").c_str(), ctx);
}

// {"dtype": ..., "shape": [...]} into `t`, with nbytes from the dtype and the shape.
void spec_members(const Json& entry, const std::string& ctx, WeightsTensor& t) {
  t.dtype = string_member(entry, "dtype", ctx);
  const size_t element = weights_element_size(t.dtype);
  if (element == 0) throw ManifestError(ctx + "unknown dtype " + single_quoted(t.dtype));
  // Bytes, and the bytes of the shape with every 0 taken as 1: c10 computes a contiguous tensor's
  // strides that way, so a shape of no bytes can overflow them too. Both must fit an int64_t.
  uint64_t nbytes = element;
  uint64_t stride_bytes = element;
  for (const auto& dim : array_member(entry, "shape", kMaxWeightsRank, ctx)) {
    if (!dim.is_number_unsigned()) {
      throw ManifestError(ctx + "'shape' must hold non-negative integers");
    }
    const uint64_t d = dim.get<uint64_t>();
    if (__builtin_mul_overflow(stride_bytes, std::max<uint64_t>(d, 1), &stride_bytes) ||
        stride_bytes > uint64_t{INT64_MAX}) {
      throw ManifestError(ctx + "'shape' is larger than any file");
    }
    nbytes *= d;  // at most stride_bytes
    t.shape.push_back(static_cast<int64_t>(d));
  }
  t.nbytes = nbytes;
}

// {"dtype": ..., "shape": [...], "offset": N}, checked to lie inside the file.
WeightsTensor tensor_members(const Json& entry, const std::string& ctx, uint64_t blob_size) {
  WeightsTensor t;
  spec_members(entry, ctx, t);
  t.offset = unsigned_member(entry, "offset", ctx);
  if (t.offset % kWeightsAlignment != 0) {
    throw ManifestError(ctx + "'offset' " + std::to_string(t.offset) + " is not a multiple of " +
                        std::to_string(kWeightsAlignment));
  }
  if (t.offset > blob_size || t.nbytes > blob_size - t.offset) {
    throw ManifestError(ctx + "its " + std::to_string(t.nbytes) + " bytes at offset " +
                        std::to_string(t.offset) + " lie outside the " + std::to_string(blob_size) +
                        "-byte weights file");
  }
  return t;
}

std::vector<WeightsConstant> constants_member(const Json& root, uint64_t blob_size) {
  std::vector<WeightsConstant> out;
  std::set<std::string> seen;
  for (const auto& entry : array_member(root, "constants", kMaxWeightsTensors, "")) {
    const std::string ctx = "'constants': ";
    if (!entry.is_object()) throw ManifestError(ctx + "each entry must be an object");
    only_members(entry, {"name", "dtype", "shape", "offset"}, ctx);
    WeightsConstant c;
    c.name = name_member(entry, "name", ctx);
    if (!seen.insert(c.name).second) throw ManifestError(ctx + c.name + " is listed twice");
    c.tensor = tensor_members(entry, ctx + c.name + ": ", blob_size);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<WeightsObject> objects_member(const Json& root, uint64_t blob_size) {
  std::vector<WeightsObject> out;
  std::set<std::string> seen;
  for (const auto& entry : array_member(root, "custom_objects", kMaxWeightsTensors, "")) {
    const std::string ctx = "'custom_objects': ";
    if (!entry.is_object()) throw ManifestError(ctx + "each entry must be an object");
    only_members(entry, {"name", "class", "tensors"}, ctx);
    WeightsObject o;
    o.name = name_member(entry, "name", ctx);
    if (!seen.insert(o.name).second) throw ManifestError(ctx + o.name + " is listed twice");
    o.class_name = name_member(entry, "class", ctx);
    const std::string object_ctx = ctx + o.name + ": ";
    std::set<size_t> indices;
    for (const auto& t : array_member(entry, "tensors", kMaxStateItems, object_ctx)) {
      if (!t.is_object()) throw ManifestError(object_ctx + "each tensor must be an object");
      only_members(t, {"index", "dtype", "shape", "offset"}, object_ctx);
      WeightsStateTensor st;
      const uint64_t index = unsigned_member(t, "index", object_ctx);
      if (index >= kMaxStateItems || !indices.insert(index).second) {
        throw ManifestError(object_ctx + "state item " + std::to_string(index) +
                            " is out of range or listed twice");
      }
      st.index = static_cast<size_t>(index);
      st.tensor =
          tensor_members(t, object_ctx + "state item " + std::to_string(index) + ": ", blob_size);
      o.tensors.push_back(std::move(st));
    }
    out.push_back(std::move(o));
  }
  return out;
}

// No two tensors share a byte: each is read into its own buffer in one pass over the file.
void check_disjoint(const WeightsManifest& m) {
  std::vector<std::pair<const WeightsTensor*, std::string>> all;
  for (const auto& c : m.constants) all.emplace_back(&c.tensor, "constant " + c.name);
  for (const auto& o : m.objects) {
    for (const auto& t : o.tensors) {
      all.emplace_back(&t.tensor,
                       "custom object " + o.name + " state item " + std::to_string(t.index));
    }
  }
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.first->offset < b.first->offset; });
  for (size_t i = 1; i < all.size(); ++i) {
    const WeightsTensor& prev = *all[i - 1].first;
    if (all[i].first->offset < prev.offset + prev.nbytes) {
      throw ManifestError(all[i].second + " overlaps " + all[i - 1].second);
    }
  }
}

}  // namespace

size_t weights_element_size(std::string_view name) {
  for (const auto& d : kDtypeSizes) {
    if (name == d.name) return d.size;
  }
  return 0;
}

ConstantSpecs parse_constant_specs(std::string_view text) {
  const Json root = parse_strict_json(text, kWeightsJsonLimits);
  if (!root.is_object()) throw ManifestError("not a JSON object");
  if (root.size() > kMaxWeightsTensors) {
    throw ManifestError("more than " + std::to_string(kMaxWeightsTensors) + " constants");
  }
  ConstantSpecs specs;
  for (const auto& [name, entry] : root.items()) {
    const std::string checked = printable_name(name, "a constant's name", "");
    const std::string ctx = checked + ": ";
    if (!entry.is_object()) throw ManifestError(ctx + "must be an object");
    only_members(entry, {"dtype", "shape"}, ctx);
    spec_members(entry, ctx, specs[checked]);
  }
  return specs;
}

DecoderSpec parse_decoder_spec(std::string_view text) {
  const Json root = parse_strict_json(text, JsonLimits{2, 8});
  if (!root.is_object()) throw ManifestError("not a JSON object");
  only_members(root, {"cache_length", "vocab_size"}, "");
  const auto size = [&](const char* key) {
    const uint64_t value = unsigned_member(root, key, "");
    if (value < 1 || value > static_cast<uint64_t>(kMaxDecoderSize)) {
      throw ManifestError(std::string("'") + key + "' must be 1 to " +
                          std::to_string(kMaxDecoderSize) + ", got " + std::to_string(value));
    }
    return static_cast<int64_t>(value);
  };
  return {size("cache_length"), size("vocab_size")};
}

WeightsManifest parse_weights_manifest(std::string_view text) {
  const Json root = parse_strict_json(text, kWeightsJsonLimits);
  if (!root.is_object()) throw ManifestError("not a JSON object");
  only_members(root, {"format", "package", "blob", "constants", "custom_objects"}, "");
  const std::string format = string_member(root, "format", "");
  if (format != kWeightsFormat) {
    throw ManifestError("format " + single_quoted(format) + ", this loader reads '" +
                        kWeightsFormat + "'");
  }
  WeightsManifest m;
  auto package = root.find("package");
  if (package == root.end()) throw ManifestError("'package' is missing");
  m.package = digest_member(*package, "'package': ");
  auto blob = root.find("blob");
  if (blob == root.end() || !blob->is_object()) throw ManifestError("'blob' must be an object");
  only_members(*blob, {"file", "sha256", "size"}, "'blob': ");
  m.blob = digest_member(*blob, "'blob': ");
  m.blob_size = unsigned_member(*blob, "size", "'blob': ");
  m.constants = constants_member(root, m.blob_size);
  m.objects = objects_member(root, m.blob_size);
  check_disjoint(m);
  return m;
}

}  // namespace my_ops::deploy::detail
