#pragma once

// A pre-check of the pickle inside a torch.save file, before LibTorch's unpickler sees it.
//
// The unpickler builds nested containers iteratively, but c10::IValue frees them recursively:
// a few kilobytes of pickle nesting tuples 20,000 deep overflow the stack when the value (or, on
// a parse error, the unpickler's stack) is destroyed. Every level of nesting needs one opcode
// that makes a container, so counting those bounds the depth, memo references and later
// mutation included. torch.save writes six per tensor (its persistent id, sizes, strides,
// backward hooks, arguments and rebuild call).

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace my_ops::deploy::detail {

constexpr int64_t kMaxPickleContainers = 4096;
constexpr int64_t kPickleContainersPerTensor = 6;

// The pickle is well formed but larger than this reader takes; what() follows the file's name.
class PickleLimitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws PickleLimitError when the pickle makes more than max_containers containers, and
// std::runtime_error when it is cut short, is not pickle protocol 2 (what LibTorch reads),
// uses an opcode torch.save does not write, or names a global other than those torch.save
// writes for dense tensors (so that nothing reads a storage's bytes while it is unpickled,
// before the reader checks their size).
void scan_pickle(const unsigned char* p, size_t n, int64_t max_containers = kMaxPickleContainers);

}  // namespace my_ops::deploy::detail
