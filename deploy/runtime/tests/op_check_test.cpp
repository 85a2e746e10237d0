#include "deploy/runtime/src/op_check.h"

#include <gtest/gtest.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "deploy/runtime/src/failure.h"

namespace {

// Registered by this test binary, as an op library would register them: an op with two
// overloads and a class with a method.
struct Counter : torch::CustomClassHolder {
  int64_t total = 0;
  int64_t add(int64_t n) { return total += n; }
};

TORCH_LIBRARY(op_check_test, m) {
  m.def("twice(Tensor x) -> Tensor");
  m.def("twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)");
  m.class_<Counter>("Counter").def(torch::init<>()).def("add", &Counter::add);
}

}  // namespace

namespace my_ops::deploy::detail {
namespace {

const std::vector<std::string> kLibraries = {"lib/libmy_ops.so", "./libextra.so"};
const std::string kTwice = "op_check_test::twice(Tensor x) -> Tensor";
const std::string kTwiceOut = "op_check_test::twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)";
const std::string kAdd = "add(__torch__.torch.classes.op_check_test.Counter _0, int _1) -> int _0";

Registrations registered() {
  return {{{"op_check_test::twice", kTwice}, {"op_check_test::twice.out", kTwiceOut}},
          {{"op_check_test::Counter", {{"add", kAdd}}}}};
}

// The failure check_registrations raises; {kOk, ""} when it passes.
Error failure(const Registrations& needed) {
  try {
    check_registrations(needed, kLibraries);
  } catch (const Error& f) {
    return f;
  }
  return Error(kOk, "");
}

TEST(OpCheck, PassesWhenEverythingIsRegisteredAsExported) {
  const Error f = failure(registered());
  EXPECT_EQ(f.code(), kOk) << f.what();
  EXPECT_EQ(failure({}).code(), kOk);
  // A class whose methods the package does not call needs only to be registered.
  EXPECT_EQ(failure({{}, {{"op_check_test::Counter", {}}}}).code(), kOk);
}

TEST(OpCheck, NamesAMissingOpAndTheLibrariesLookedIn) {
  Registrations needed = registered();
  needed.ops.push_back({"op_check_test::thrice", "op_check_test::thrice(Tensor x) -> Tensor"});
  const Error f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_EQ(std::string(f.what()),
            "no op library registers op op_check_test::thrice, which the package calls (looked in "
            "lib/libmy_ops.so, ./libextra.so): expected 'op_check_test::thrice(Tensor x) -> "
            "Tensor', found none");
}

TEST(OpCheck, NamesAMissingOverload) {
  Registrations needed;
  needed.ops.push_back(
      {"op_check_test::twice.Scalar", "op_check_test::twice.Scalar(Scalar x) -> Scalar"});
  const Error f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_NE(std::string(f.what()).find("no op library registers op op_check_test::twice.Scalar"),
            std::string::npos)
      << f.what();
}

TEST(OpCheck, NamesBothSchemasWhenAnOpChanged) {
  // As from a library rebuilt with a new argument since the export.
  Registrations needed;
  const std::string exported = "op_check_test::twice(Tensor x, float scale=2.) -> Tensor";
  needed.ops.push_back({"op_check_test::twice", exported});
  const Error f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_EQ(std::string(f.what()),
            "op op_check_test::twice has another schema than the package was exported "
            "with (looked in lib/libmy_ops.so, ./libextra.so): expected '" +
                exported + "', found '" + kTwice + "'");
}

TEST(OpCheck, NamesAMissingClass) {
  Registrations needed = registered();
  needed.classes.push_back({"op_check_test::Gauge", {}});
  const Error f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_EQ(std::string(f.what()),
            "no op library registers class op_check_test::Gauge, which the package uses (looked "
            "in lib/libmy_ops.so, ./libextra.so)");
}

TEST(OpCheck, NamesAMissingOrChangedMethod) {
  Registrations needed;
  const std::string reset = "reset(__torch__.torch.classes.op_check_test.Counter _0) -> ()";
  needed.classes.push_back({"op_check_test::Counter", {{"reset", reset}}});
  Error f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_EQ(std::string(f.what()),
            "class op_check_test::Counter has no method reset, which the package calls "
            "(looked in lib/libmy_ops.so, ./libextra.so): expected '" +
                reset + "', found none");
  const std::string add_float =
      "add(__torch__.torch.classes.op_check_test.Counter _0, float _1) -> float _0";
  needed.classes[0].methods = {{"add", add_float}};
  f = failure(needed);
  EXPECT_EQ(f.code(), kOpsLibrary);
  EXPECT_EQ(std::string(f.what()),
            "method add of class op_check_test::Counter has another schema than the "
            "package was exported with (looked in lib/libmy_ops.so, ./libextra.so): "
            "expected '" +
                add_float + "', found '" + kAdd + "'");
}

TEST(OpCheck, KeepsWhatALibraryRegistersToOnePrintableLine) {
  // The registered schema is the library's text, not the manifest's; here the test's own.
  Registrations needed;
  needed.ops.push_back({"op_check_test::twice", "op_check_test::twice() -> ()"});
  const Error f = failure(needed);
  EXPECT_EQ(std::string(f.what()).find('\n'), std::string::npos);
}

}  // namespace
}  // namespace my_ops::deploy::detail
