#pragma once

// torch.save files from C++ without libtorch's full serializer: the reader the loader uses for
// its --input files (a hardened one: the zip and the pickle are checked before any tensor is
// made). Handy for the package's own sample_input.pt and expected_output.pt.

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "my_ops/error.h"

namespace my_ops::deploy {

// The tensors of a torch.save file holding a tensor or a tuple/list of tensors (dense, CPU).
// Throws Error: kInputUnreadable for a file that is missing, too large (over `max_bytes`) or not
// such a file. `what` names the file in the error ("input file").
std::vector<at::Tensor> read_tensors(const std::string& path,
                                     uint64_t max_bytes = uint64_t{1} << 30,
                                     const std::string& what = "tensor file");

// Writes the tensors (moved to the CPU) as one torch.save'd tuple, atomically: the file is either
// complete or not there. Throws Error with kOutputUnwritable.
void write_tensors(const std::string& path, const std::vector<at::Tensor>& tensors);

// Throws Error (kOutputUnwritable) when write_tensors() would refuse `path`: it exists and is
// not a regular file (a folder, /dev/null), it is a file this process has read through the API
// (an input, a package: same device and inode), or its folder is missing. write_tensors() checks
// again; checking first lets a program refuse a mistyped output before a long load.
void check_output_path(const std::string& path);

// Whether two tensors have the same dtype, sizes and bytes (so -0.0 differs from 0.0).
bool bit_identical(const at::Tensor& a, const at::Tensor& b);

}  // namespace my_ops::deploy
