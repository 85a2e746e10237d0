#pragma once

// torch.save files in and out, and what the package accepts as inputs.

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace my_ops::loader {

// The tensors of a torch.save file holding a tensor or a tuple/list of tensors, each checked to
// be a dense CPU tensor whose sizes stay inside its storage. Fails with kInputUnreadable;
// files over max_bytes are refused before they are read.
std::vector<at::Tensor> load_tensors(const std::string& path, const char* what, uint64_t max_bytes);

// Why a tensor cannot be handed to a model, or nullopt.
std::optional<std::string> tensor_problem(const at::Tensor& t);

// Writes the tensors as a torch.save'd tuple, atomically. Fails with kOutputUnwritable.
void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors);

// Checks inputs against the signature export.py stored in the package metadata, if any.
// Fails with kInputMismatch.
void validate_inputs(const std::vector<at::Tensor>& inputs,
                     const std::unordered_map<std::string, std::string>& metadata);

// Fails with kExpectMismatch when `got` differs from `want` (allclose, or bit for bit).
void compare_expected(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      const std::string& path, double atol, double rtol, bool exact);

bool bit_identical(const at::Tensor& a, const at::Tensor& b);

std::string shape_string(const at::Tensor& t);

// One line of an exception's text, without c10's backtrace or miniz's boilerplate.
std::string error_text(const std::exception& e);

}  // namespace my_ops::loader
