#pragma once

// The loader's --expect: outputs against the ones a file holds.

#include <ATen/Tensor.h>

#include <string>
#include <vector>

namespace my_ops::loader {

// Throws an Error (kExpectMismatch) when `got` differs from `want`, read from `path`: in count,
// dtype or shape, or in value (allclose with `atol` and `rtol`, or bit for bit when `exact`).
void compare_expected(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      const std::string& path, double atol, double rtol, bool exact);

}  // namespace my_ops::loader
