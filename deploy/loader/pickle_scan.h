#pragma once

// A pre-check of the pickle inside a torch.save file, before LibTorch's unpickler sees it.
//
// The unpickler builds nested containers iteratively, but c10::IValue frees them recursively:
// a few kilobytes of pickle nesting tuples 20,000 deep overflow the stack when the value (or, on
// a parse error, the unpickler's stack) is destroyed. Every level of nesting needs one opcode
// that makes a container, so counting those bounds the depth, memo references and later
// mutation included. torch.save writes about seven per tensor.

#include <cstddef>
#include <cstdint>

namespace my_ops::loader {

constexpr int64_t kMaxPickleContainers = 4096;

// Throws std::runtime_error when the pickle is cut short, uses an opcode that torch.save does
// not write, or makes more than max_containers containers.
void scan_pickle(const unsigned char* p, size_t n, int64_t max_containers = kMaxPickleContainers);

}  // namespace my_ops::loader
