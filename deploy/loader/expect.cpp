#include "deploy/loader/expect.h"

#include <ATen/ops/allclose.h>
#include <c10/util/StringUtil.h>

#include "my_ops/error.h"
#include "my_ops/tensor_file.h"

namespace my_ops::loader {
namespace {

[[noreturn]] void mismatch(std::string message) {
  throw deploy::Error(deploy::kExpectMismatch, std::move(message));
}

}  // namespace

void compare_expected(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      const std::string& path, double atol, double rtol, bool exact) {
  if (got.size() != want.size()) {
    mismatch("model gave " + std::to_string(got.size()) + " output(s), " + path + " has " +
             std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const at::Tensor g = got[i].cpu();
    if (g.sizes() != want[i].sizes() || g.scalar_type() != want[i].scalar_type()) {
      mismatch(c10::str("output ", i, " is ", g.scalar_type(), g.sizes(), ", expected ",
                        want[i].scalar_type(), want[i].sizes()));
    }
    if (exact) {
      if (!deploy::bit_identical(g, want[i])) {
        mismatch("output " + std::to_string(i) + " is not bit-identical to " + path);
      }
      continue;
    }
    if (!at::allclose(g, want[i], rtol, atol)) {
      const double diff = g.to(at::kDouble).sub(want[i].to(at::kDouble)).abs().max().item<double>();
      mismatch("output " + std::to_string(i) + " differs from " + path + " (max abs diff " +
               std::to_string(diff) + ")");
    }
  }
}

}  // namespace my_ops::loader
