#include "my_ops/tensor_file.h"

#include "deploy/loader/tensor_io.h"
#include "deploy/sdk/translated.h"

namespace my_ops::deploy {
using internal::translated;

std::vector<at::Tensor> read_tensors(const std::string& path, uint64_t max_bytes) {
  return translated([&] { return loader::load_tensors(path, "tensor file", max_bytes); });
}

void write_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  translated([&] {
    std::vector<at::Tensor> cpu;
    for (const auto& t : tensors) cpu.push_back(t.cpu());
    loader::save_tensors(path, cpu);
  });
}

bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  return loader::bit_identical(a.cpu(), b.cpu());
}

}  // namespace my_ops::deploy
