#pragma once

// torch.save files in and out, and what the package accepts as inputs.

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "deploy/runtime/src/input_signature.h"

namespace my_ops::deploy::detail {

// A file's bytes, 64-byte aligned (as torch.save aligns its records), shared by every tensor
// read from it: the tensors point into it rather than holding copies.
class FileBytes {
 public:
  explicit FileBytes(size_t size);
  ~FileBytes();
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  unsigned char* data() { return data_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// The tensors of a torch.save file holding a tensor or a tuple/list of tensors, each checked to
// be a dense CPU tensor whose sizes stay inside its storage. Fails with kInputUnreadable (and
// kInputMismatch when the file only holds more tensors than the reader takes); a file over
// max_bytes is refused by its size, before it is read.
std::vector<at::Tensor> load_tensors(const std::string& path, const char* what, uint64_t max_bytes);

// The same for a file already in memory; `what` and `path` name it in errors. The zip is read
// once, by zip_directory's strict reader; each storage must be exactly as large as data.pkl
// declares it, and the tensors share `bytes` (no copy).
std::vector<at::Tensor> read_tensors(const std::shared_ptr<FileBytes>& bytes, const char* what,
                                     const std::string& path);

// Why a tensor cannot be handed to a model, or nullopt.
std::optional<std::string> tensor_problem(const at::Tensor& t);

// Writes the tensors as a torch.save'd tuple, atomically. Fails with kOutputUnwritable.
void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors);

// Checks inputs against the signature the exporter stored in the package metadata, if any.
// Fails with kInputMismatch.
void validate_inputs(const std::vector<at::Tensor>& inputs,
                     const std::unordered_map<std::string, std::string>& metadata);

// The same against a signature already parsed.
void check_inputs(const std::vector<at::Tensor>& inputs, const std::vector<InputSpec>& specs);

bool bit_identical(const at::Tensor& a, const at::Tensor& b);

std::string shape_string(const at::Tensor& t);

}  // namespace my_ops::deploy::detail
