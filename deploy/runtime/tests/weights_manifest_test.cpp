// weights.json's reader: what it accepts, and each way it refuses a manifest whose layout could
// make the loader read outside weights.bin, twice, or into a tensor of the wrong size.

#include "deploy/runtime/src/weights_manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "deploy/runtime/tests/parse_cost.h"

namespace {

using my_ops::deploy::detail::ManifestError;
using my_ops::deploy::detail::parse_weights_manifest;
using Json = nlohmann::json;

const std::string kSha(64, 'a');

// Two constants and an object's state tensor, 64-byte aligned, in a 320-byte file.
Json valid() {
  return Json{
      {"format", my_ops::deploy::detail::kWeightsFormat},
      {"package", {{"file", "model.pt2"}, {"sha256", kSha}}},
      {"blob", {{"file", "weights.bin"}, {"sha256", std::string(64, 'b')}, {"size", 320}}},
      {"constants",
       {{{"name", "proj.weight"}, {"dtype", "Float"}, {"shape", {4, 8}}, {"offset", 0}},
        {{"name", "proj.bias"}, {"dtype", "Half"}, {"shape", {8}}, {"offset", 128}}}},
      {"custom_objects",
       {{{"name", "_torchbind_obj0"},
         {"class", "my_ops::RMSNorm"},
         {"tensors", {{{"index", 0}, {"dtype", "Float"}, {"shape", {16}}, {"offset", 192}}}}}}},
  };
}

std::string refusal(const std::string& text) {
  try {
    parse_weights_manifest(text);
  } catch (const ManifestError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted " << text;
  return "";
}

std::string refusal(const Json& manifest) { return refusal(manifest.dump()); }

// The refusal, or "accepted", from any thread.
std::string outcome(const std::string& text) {
  try {
    parse_weights_manifest(text);
  } catch (const ManifestError& e) {
    return e.what();
  }
  return "accepted";
}

// valid() with `count` empty objects at the front of its constants.
std::string with_empty_constants(size_t count) {
  std::string text = valid().dump();
  const std::string constants = R"("constants":[)";
  std::string empties;
  empties.reserve(3 * count);
  for (size_t i = 0; i < count; ++i) empties += "{},";
  text.insert(text.find(constants) + constants.size(), empties);
  return text;
}

TEST(WeightsManifest, ReadsEveryField) {
  const auto m = parse_weights_manifest(valid().dump());
  EXPECT_EQ(m.package.sha256, kSha);
  EXPECT_EQ(m.blob.file, "weights.bin");
  EXPECT_EQ(m.blob_size, 320u);
  ASSERT_EQ(m.constants.size(), 2u);
  EXPECT_EQ(m.constants[0].name, "proj.weight");
  EXPECT_EQ(m.constants[0].tensor.nbytes, 4u * 8u * 4u);
  EXPECT_EQ(m.constants[1].tensor.nbytes, 8u * 2u);
  EXPECT_EQ(m.constants[1].tensor.offset, 128u);
  ASSERT_EQ(m.objects.size(), 1u);
  EXPECT_EQ(m.objects[0].class_name, "my_ops::RMSNorm");
  ASSERT_EQ(m.objects[0].tensors.size(), 1u);
  EXPECT_EQ(m.objects[0].tensors[0].index, 0u);
  EXPECT_EQ(m.objects[0].tensors[0].tensor.nbytes, 64u);
}

TEST(WeightsManifest, EveryDtypeOfTheContractHasAnElementSize) {
  for (const char* dtype : my_ops::deploy::detail::contract::kInputDtypes) {
    EXPECT_GT(my_ops::deploy::detail::weights_element_size(dtype), 0u) << dtype;
  }
}

TEST(WeightsManifest, RefusesATensorOutsideTheFile) {
  Json m = valid();
  m["blob"]["size"] = 300;  // the state tensor's 64 bytes at 256 end past it
  m["custom_objects"][0]["tensors"][0]["offset"] = 256;
  EXPECT_NE(refusal(m).find("lie outside the 300-byte weights file"), std::string::npos);
}

TEST(WeightsManifest, RefusesAnOffsetNearTheTopOfTheRange) {
  Json m = valid();
  m["constants"][0]["offset"] = 18446744073709551552ull;  // 2^64 - 64: offset + size wraps
  EXPECT_NE(refusal(m).find("lie outside"), std::string::npos);
}

TEST(WeightsManifest, RefusesAShapeWhoseSizeOverflows) {
  Json m = valid();
  m["constants"][0]["shape"] = {4294967296ull, 4294967296ull};
  EXPECT_NE(refusal(m).find("larger than any file"), std::string::npos);
}

// c10 computes a contiguous tensor's strides from every dim but the last, a zero among them or
// not: a shape of no bytes can still overflow them ("Stride calculation overflowed").
TEST(WeightsManifest, RefusesAnEmptyShapeWhoseStridesOverflow) {
  Json m = valid();
  m["constants"][1]["shape"] = {0, uint64_t{1} << 62, uint64_t{1} << 62};
  EXPECT_NE(refusal(m).find("larger than any file"), std::string::npos);
  m["constants"][1]["shape"] = {uint64_t{1} << 62, uint64_t{1} << 62, 0};
  EXPECT_NE(refusal(m).find("larger than any file"), std::string::npos);
  // Within int64 it is a plain empty tensor.
  m["constants"][1]["shape"] = {0, uint64_t{1} << 30, uint64_t{1} << 30};
  EXPECT_EQ(parse_weights_manifest(m.dump()).constants[1].tensor.nbytes, 0u);
}

// Each '}' of an object in an array used to cost a pass over the array (nlohmann's callback
// parser): 20,000 empty entries took 15 s. At the entry cap (valid()'s two constants and the
// empty ones), the read stays linear and refuses the first empty entry.
TEST(WeightsManifest, ReadsAManifestAtTheEntryCapInLinearTime) {
  const std::string text = with_empty_constants(my_ops::deploy::detail::kMaxWeightsTensors - 2);
  EXPECT_NE(my_ops::deploy::detail::parse_cost::read_within_linear_budget(
                "a manifest of 2^15 constants", text, outcome)
                .find("'constants': 'name' must be a string"),
            std::string::npos);
}

TEST(WeightsManifest, RefusesMisalignedAndOverlappingTensors) {
  Json m = valid();
  m["constants"][1]["offset"] = 100;
  EXPECT_NE(refusal(m).find("not a multiple of 64"), std::string::npos);
  m = valid();
  m["constants"][1]["offset"] = 64;  // inside proj.weight's 128 bytes
  EXPECT_NE(refusal(m).find("overlaps"), std::string::npos);
}

TEST(WeightsManifest, RefusesWhatAReaderCouldTakeTwoWays) {
  Json m = valid();
  m["constants"][1]["name"] = "proj.weight";
  EXPECT_NE(refusal(m).find("listed twice"), std::string::npos);
  m = valid();
  m["constants"][0]["stride"] = {8, 1};
  EXPECT_NE(refusal(m).find("unknown member 'stride'"), std::string::npos);
  m = valid();
  m["signed_by"] = "someone";
  EXPECT_NE(refusal(m).find("unknown member 'signed_by'"), std::string::npos);
  EXPECT_NE(refusal(std::string(R"({"format": 1, "format": 2})")).find("duplicate"),
            std::string::npos);
}

TEST(WeightsManifest, RefusesBadValues) {
  Json m = valid();
  m["constants"][0]["dtype"] = "Complex";
  EXPECT_NE(refusal(m).find("unknown dtype 'Complex'"), std::string::npos);
  m = valid();
  m["constants"][0]["shape"] = {-4, 8};
  EXPECT_NE(refusal(m).find("non-negative integers"), std::string::npos);
  m = valid();
  m["constants"][0]["offset"] = 0.5;
  EXPECT_NE(refusal(m).find("non-negative integer"), std::string::npos);
  m = valid();
  m["constants"][0]["name"] = "a\nb";
  EXPECT_NE(refusal(m).find("printable name"), std::string::npos);
  m = valid();
  m["format"] = "my_ops.weights/0";
  EXPECT_NE(refusal(m).find("this loader reads"), std::string::npos);
  m = valid();
  m["package"]["sha256"] = "ABC";
  EXPECT_NE(refusal(m).find("64 lowercase hex"), std::string::npos);
  m = valid();
  m["custom_objects"][0]["tensors"][0]["index"] = 1000;
  EXPECT_NE(refusal(m).find("out of range"), std::string::npos);
}

}  // namespace

// The metadata entry of a package compiled without its weights: the constants it takes.
namespace {

std::string specs_refusal(const std::string& text) {
  try {
    my_ops::deploy::detail::parse_constant_specs(text);
  } catch (const ManifestError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ConstantSpecs, ReadsEveryConstant) {
  const auto specs = my_ops::deploy::detail::parse_constant_specs(
      R"({"proj.weight": {"dtype": "Float", "shape": [4, 8]},
          "scale": {"dtype": "Long", "shape": []},
          "empty": {"dtype": "Half", "shape": [0, 3]}})");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs.at("proj.weight").dtype, "Float");
  EXPECT_EQ(specs.at("proj.weight").shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(specs.at("proj.weight").nbytes, 128u);
  EXPECT_EQ(specs.at("scale").nbytes, 8u);
  EXPECT_TRUE(specs.at("scale").shape.empty());
  EXPECT_EQ(specs.at("empty").nbytes, 0u);
}

TEST(ConstantSpecs, RefusesBadEntries) {
  EXPECT_NE(specs_refusal("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(specs_refusal(R"({"a": 1})").find("a: must be an object"), std::string::npos);
  EXPECT_NE(specs_refusal(R"({"a": {"dtype": "Complex", "shape": []}})").find("unknown dtype"),
            std::string::npos);
  EXPECT_NE(specs_refusal(R"({"a": {"dtype": "Float", "shape": [], "offset": 0}})"),
            std::string(""));
  EXPECT_NE(specs_refusal(R"({"a": {"dtype": "Float", "shape": [-1]}})").find("non-negative"),
            std::string::npos);
  EXPECT_NE(specs_refusal(R"({"a": {"dtype": "Float", "shape": [4611686018427387904, 4]}})")
                .find("larger than any file"),
            std::string::npos);
  EXPECT_NE(specs_refusal(R"({"": {"dtype": "Float", "shape": []}})").find("printable name"),
            std::string::npos);
  EXPECT_NE(specs_refusal(R"({"a": {"dtype": "Float", "shape": []}, "a": {"dtype": "Float",
            "shape": []}})"),
            std::string(""));
}
