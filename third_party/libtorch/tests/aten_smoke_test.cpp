// Links LibTorch from the locked wheel and checks that ATen computes on CPU.
// Failing here means the headers, the C++ ABI flag or the runtime library
// layout of @libtorch is wrong, before any op code is involved.
#include <ATen/ATen.h>
#include <torch/version.h>

#include <cstdio>
#include <cstdlib>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  // (I + 1) @ v for a 3x3 identity plus ones: each row sums v and adds v[i].
  at::Tensor m = at::eye(3, at::kDouble) + 1.0;
  at::Tensor v = at::arange(1, 4, at::kDouble);  // 1, 2, 3
  at::Tensor r = at::matmul(m, v);
  const double expected[] = {1 + 6, 2 + 6, 3 + 6};
  for (int i = 0; i < 3; ++i) {
    expect(r[i].item<double>() == expected[i], "matmul result");
  }

  // A reduction and a dtype round trip through half precision.
  at::Tensor x = at::linspace(-2.0, 2.0, 1001, at::kFloat);
  expect(std::abs(x.sum().item<float>()) < 1e-3f, "symmetric linspace sums to zero");
  at::Tensor h = x.to(at::kHalf).to(at::kFloat);
  expect(at::allclose(h, x, /*rtol=*/1e-3, /*atol=*/1e-3), "half round trip");

  // Errors from c10 carry std::string messages: this exercises the C++ ABI.
  bool threw = false;
  try {
    (void)at::matmul(m, at::ones({4}, at::kDouble));
  } catch (const c10::Error& e) {
    threw = std::string(e.what()).find("size") != std::string::npos ||
            std::string(e.what()).find("shape") != std::string::npos;
  }
  expect(threw, "shape mismatch raises c10::Error mentioning the size");

  std::printf("torch %s: %s\n", TORCH_VERSION, failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
