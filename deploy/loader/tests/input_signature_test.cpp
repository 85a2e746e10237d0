#include "deploy/loader/input_signature.h"

#include <gtest/gtest.h>

namespace my_ops::loader {
namespace {

TEST(InputSignature, ParsesStaticDynamicAndUnboundedDims) {
  auto specs = parse_input_signature("Float:1-16,64;Long:3-inf;Bool:");
  ASSERT_TRUE(specs);
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].dtype, "Float");
  ASSERT_EQ((*specs)[0].dims.size(), 2u);
  EXPECT_EQ((*specs)[0].dims[0].lo, 1);
  EXPECT_EQ((*specs)[0].dims[0].hi, 16);
  EXPECT_EQ((*specs)[0].dims[1].lo, 64);
  EXPECT_EQ((*specs)[0].dims[1].hi, 64);
  EXPECT_EQ((*specs)[1].dims[0].lo, 3);
  EXPECT_LT((*specs)[1].dims[0].hi, 0);
  EXPECT_TRUE((*specs)[2].dims.empty());
}

TEST(InputSignature, RefusesWhatItCannotRead) {
  for (const char* bad : {"Float", ":1", "Float:x", "Float:1-", "Float:5-2", "Float:1,,2",
                          "Float:-1", "Float:1-16x", "Float:99999999999999999999"}) {
    EXPECT_FALSE(parse_input_signature(bad)) << bad;
  }
}

TEST(InputSignature, ExplainsEachKindOfMismatch) {
  auto specs = parse_input_signature("Float:1-16,64");
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

}  // namespace
}  // namespace my_ops::loader
