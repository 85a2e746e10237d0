#pragma once

// weights.json, written by `export --weights-only` beside weights.bin: which package the weights
// are for (its sha256), what weights.bin must be (sha256, size), and where each tensor lies in it.
// Parsing is as strict as manifest.json's, and checks the layout before anything is read: every
// tensor inside the file, aligned, none overlapping another, of a known dtype and a size that does
// not overflow.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deploy/runtime/src/json_fields.h"
#include "deploy/runtime/src/package_contract.h"

namespace my_ops::deploy::detail {

using contract::kWeightsAlignment;
using contract::kWeightsFormat;

// A model's constants are a few hundred entries of about ten values and a hundred bytes each (a
// 30-layer LLM: 273 of them, 33 KB). The caps sit far above that (2^15 entries of 16 values and
// 512 bytes on average) and keep what a hostile file costs small: its read well under a second,
// and its parsed values (2^19 "{}," in 1.5 MB, about 35 MB once parsed; or 16 MiB of names)
// within a tenth of the loader's memory.
constexpr size_t kMaxWeightsManifestBytes = size_t{16} << 20;
constexpr JsonLimits kWeightsJsonLimits{8, 1 << 19};
constexpr size_t kMaxWeightsTensors = size_t{1} << 15;
constexpr size_t kMaxWeightsRank = 16;
constexpr size_t kMaxWeightsNameBytes = 4096;
constexpr size_t kMaxStateItems = 256;

// Where one tensor lies in weights.bin.
struct WeightsTensor {
  std::string dtype;  // c10's name ("Float"), one of the contract's dtypes
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t nbytes = 0;  // elements x element size
};

// A constant of the package (parameter, buffer, tensor constant), by the name load_constants takes.
struct WeightsConstant {
  std::string name;
  WeightsTensor tensor;
};

// A tensor of a custom object's state (def_pickle's tuple), by its position in the tuple.
struct WeightsStateTensor {
  size_t index = 0;
  WeightsTensor tensor;
};

// A custom-class object of the package, by the name get_custom_objs() gives it.
struct WeightsObject {
  std::string name;
  std::string class_name;  // "ns::Class"
  std::vector<WeightsStateTensor> tensors;
};

struct WeightsManifest {
  FileDigest package;  // the package these weights are for
  FileDigest blob;     // weights.bin
  uint64_t blob_size = 0;
  std::vector<WeightsConstant> constants;
  std::vector<WeightsObject> objects;
};

// Throws ManifestError.
WeightsManifest parse_weights_manifest(std::string_view text);

// The package metadata entry (contract::kWeightsMetadataKey) of a package compiled without its
// weights: {name: {"dtype": ..., "shape": [...]}} of every constant it may be given, read as
// strictly as weights.json. The offsets of the result are 0. Throws ManifestError.
using ConstantSpecs = std::unordered_map<std::string, WeightsTensor>;
ConstantSpecs parse_constant_specs(std::string_view text);

// The package metadata entry of a decoder (contract::kDecoderMetadataKey): {"cache_length": L,
// "vocab_size": V}, both in 1 .. kMaxDecoderSize. Throws ManifestError.
constexpr int64_t kMaxDecoderSize = int64_t{1} << 31;
struct DecoderSpec {
  int64_t cache_length = 0;
  int64_t vocab_size = 0;
};
DecoderSpec parse_decoder_spec(std::string_view text);

// The size of one element of c10's dtype `name`; 0 for a dtype weights files cannot hold.
size_t weights_element_size(std::string_view name);

}  // namespace my_ops::deploy::detail
