#include "deploy/runtime/src/input_signature.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "deploy/runtime/tests/parse_cost.h"

namespace my_ops::deploy::detail {
namespace {

// One input of dtype Float with the given sizes, e.g. R"({"min": 1, "max": 16})".
std::string one_input(const std::string& sizes) {
  return R"([{"dtype": "Float", "sizes": [)" + sizes + "]}]";
}

// A text the parser must refuse, beside a near-identical one it must accept. The parser gives no
// reason for a refusal, so the accepted twin is what shows that the refusal is for the one thing
// that differs between them.
struct Refusal {
  const char* bad;
  const char* good;
};

TEST(InputSignature, ParsesStaticDynamicAndUnboundedDims) {
  auto specs = parse_input_signature(R"([
    {"dtype": "Float", "sizes": [{"min": 1, "max": 16}, {"min": 64, "max": 64}]},
    {"dtype": "Long", "sizes": [{"min": 3, "max": null}]},
    {"dtype": "Bool", "sizes": []}
  ])");
  ASSERT_TRUE(specs);
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].dtype, "Float");
  ASSERT_EQ((*specs)[0].dims.size(), 2u);
  EXPECT_EQ((*specs)[0].dims[0].lo, 1);
  EXPECT_EQ((*specs)[0].dims[0].hi, 16);
  EXPECT_EQ((*specs)[0].dims[1].lo, 64);
  EXPECT_EQ((*specs)[0].dims[1].hi, 64);
  EXPECT_EQ((*specs)[1].dtype, "Long");
  EXPECT_EQ((*specs)[1].dims[0].lo, 3);
  EXPECT_LT((*specs)[1].dims[0].hi, 0);
  EXPECT_EQ((*specs)[2].dtype, "Bool");
  EXPECT_TRUE((*specs)[2].dims.empty());
}

TEST(InputSignature, ReadsWhatExportWrites) {
  // json.dumps(..., separators=(",", ":")), as export_compile.input_signature writes it.
  auto specs = parse_input_signature(
      R"([{"dtype":"Float","sizes":[{"min":1,"max":8},{"min":16,"max":16}]}])");
  ASSERT_TRUE(specs);
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ(describe((*specs)[0].dims[0]), "1..8");
  EXPECT_EQ(describe((*specs)[0].dims[1]), "16");
  EXPECT_TRUE(parse_input_signature("[]"));
}

TEST(InputSignature, KnowsEveryDtypeOfTheContract) {
  for (const char* dtype : contract::kInputDtypes) {
    auto specs =
        parse_input_signature(std::string(R"([{"dtype": ")") + dtype + R"(", "sizes": []}])");
    ASSERT_TRUE(specs) << dtype;
    EXPECT_EQ((*specs)[0].dtype, dtype);
  }
}

TEST(InputSignature, RefusesMalformedJson) {
  for (const auto& [bad, good] : std::initializer_list<Refusal>{
           {"", "[]"},
           {"Float:1-16,64", R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 16}]}])"},
           {"[", "[]"},
           {"[{]", R"([{"dtype": "Float", "sizes": []}])"},
           {R"([{"dtype": "Float", "sizes": []},])", R"([{"dtype": "Float", "sizes": []}])"},
           {R"([{"dtype": "Float", "sizes": []}] [])", R"([{"dtype": "Float", "sizes": []}])"},
           {"[] x", "[] \n"},
       }) {
    EXPECT_FALSE(parse_input_signature(bad)) << bad;
    EXPECT_TRUE(parse_input_signature(good)) << good << " (beside " << bad << ")";
  }
  EXPECT_FALSE(parse_input_signature(std::string("[]\0", 3)));
  EXPECT_TRUE(parse_input_signature(std::string("[]", 2)));
  EXPECT_FALSE(parse_input_signature(std::string(100000, '[') + std::string(100000, ']')));
  // The deepest a signature goes: an array of objects whose sizes array holds objects.
  EXPECT_TRUE(parse_input_signature(one_input(R"({"min": 1, "max": 2})")));
}

// The package's metadata is outside data too: a signature of many small objects is refused (they
// are not inputs) in time linear in its size.
TEST(InputSignature, ReadsInLinearTime) {
  std::string text = "[";
  for (int i = 0; i < (1 << 18); ++i) text += "{},";
  text += "{}]";
  const std::string outcome = parse_cost::read_within_linear_budget(
      "an input signature of 2^18 empty objects", text,
      [](const std::string& t) { return parse_input_signature(t) ? "accepted" : "refused"; });
  EXPECT_EQ(outcome, "refused");
}

TEST(InputSignature, RefusesWrongTypesAndShapes) {
  const char* const kNoDims = R"([{"dtype": "Float", "sizes": []}])";
  for (const auto& [bad, good] : std::initializer_list<Refusal>{
           {"{}", "[]"},
           {"null", "[]"},
           {R"("Float")", kNoDims},
           {R"([["Float", []]])", kNoDims},
           {R"([{"dtype": 1, "sizes": []}])", kNoDims},
           {R"([{"dtype": null, "sizes": []}])", kNoDims},
           {R"([{"dtype": "Float", "sizes": {}}])", kNoDims},
           {R"([{"dtype": "Float", "sizes": null}])", kNoDims},
           {R"([{"dtype": "Float"}])", kNoDims},
           {R"([{"sizes": []}])", kNoDims},
           {R"([{"dtype": "Float", "sizes": [], "name": "x"}])", kNoDims},
           {R"([{"dtype": "Float", "sizes": [16]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 16, "max": 16}]}])"},
           {R"([{"dtype": "Float", "sizes": [[1, 16]]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 16}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": 1}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": null}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"max": 1}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 1}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2, "step": 1}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": null, "max": 2}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 0, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": "1", "max": 2}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": 1.5, "max": 2}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": 1.0, "max": 2}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": true, "max": 2}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": 2}]}])"},
           {R"([{"dtype": "Float", "sizes": [{"min": 1, "max": "inf"}]}])",
            R"([{"dtype": "Float", "sizes": [{"min": 1, "max": null}]}])"},
       }) {
    EXPECT_FALSE(parse_input_signature(bad)) << bad;
    EXPECT_TRUE(parse_input_signature(good)) << good << " (beside " << bad << ")";
  }
}

TEST(InputSignature, RefusesNegativeOutOfOrderAndOversizedSizes) {
  for (const auto& [bad, good] : std::initializer_list<Refusal>{
           {R"({"min": -1, "max": 2})", R"({"min": 1, "max": 2})"},
           {R"({"min": 0, "max": -1})", R"({"min": 0, "max": 1})"},
           {R"({"min": -1, "max": null})", R"({"min": 1, "max": null})"},
           {R"({"min": 5, "max": 2})", R"({"min": 5, "max": 5})"},
           {R"({"min": 9223372036854775808, "max": null})",
            R"({"min": 9223372036854775807, "max": null})"},
           {R"({"min": 1, "max": 18446744073709551615})",
            R"({"min": 1, "max": 9223372036854775807})"},
           {R"({"min": 1, "max": 99999999999999999999})",
            R"({"min": 1, "max": 999999999999999999})"},
       }) {
    EXPECT_FALSE(parse_input_signature(one_input(bad))) << bad;
    EXPECT_TRUE(parse_input_signature(one_input(good))) << good << " (beside " << bad << ")";
  }
  EXPECT_TRUE(parse_input_signature(one_input(R"({"min": 0, "max": 9223372036854775807})")));
}

TEST(InputSignature, RefusesAnUnknownDtype) {
  auto with_dtype = [](const std::string& dtype) {
    return std::string(R"([{"dtype": ")") + dtype + R"(", "sizes": []}])";
  };
  // float32 is torch's name of c10's Float; ComplexFloat is a c10 name outside the contract; a
  // JSON escape is decoded before the name is looked up.
  for (const auto& [bad, good] : std::initializer_list<Refusal>{
           {"float32", "Float"},
           {"float", "Float"},
           {"FLOAT", "Float"},
           {"Quantum", "Float"},
           {"", "Float"},
           {"ComplexFloat", "Float"},
           {"Fl\\u0000oat", "Fl\\u006fat"},
       }) {
    EXPECT_FALSE(parse_input_signature(with_dtype(bad))) << bad;
    EXPECT_TRUE(parse_input_signature(with_dtype(good))) << good << " (beside " << bad << ")";
  }
}

TEST(InputSignature, ExplainsEachKindOfMismatch) {
  auto specs = parse_input_signature(one_input(R"({"min": 1, "max": 16}, {"min": 64, "max": 64})"));
  ASSERT_TRUE(specs);
  const InputSpec& spec = (*specs)[0];
  EXPECT_FALSE(input_mismatch("Float", {16, 64}, spec));
  EXPECT_FALSE(input_mismatch("Float", {1, 64}, spec));
  EXPECT_EQ(input_mismatch("Half", {1, 64}, spec), "dtype Half, expected Float");
  EXPECT_EQ(input_mismatch("Float", {1, 64, 1}, spec), "rank 3, expected 2");
  EXPECT_EQ(input_mismatch("Float", {17, 64}, spec), "dim 0 is 17, must be 1..16");
  EXPECT_EQ(input_mismatch("Float", {0, 64}, spec), "dim 0 is 0, must be 1..16");
  EXPECT_EQ(input_mismatch("Float", {2, 63}, spec), "dim 1 is 63, must be 64");
}

TEST(InputSignature, AnUnboundedDimTakesAnySizeFromItsMinimum) {
  auto specs = parse_input_signature(one_input(R"({"min": 2, "max": null})"));
  ASSERT_TRUE(specs);
  EXPECT_FALSE(input_mismatch("Float", {1 << 30}, (*specs)[0]));
  EXPECT_EQ(input_mismatch("Float", {1}, (*specs)[0]), "dim 0 is 1, must be 2..inf");
}

}  // namespace
}  // namespace my_ops::deploy::detail
