#include "my_ops/tensor_file.h"

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/tensor_io.h"

namespace my_ops::deploy {
using detail::translated;

std::vector<at::Tensor> read_tensors(const std::string& path, uint64_t max_bytes,
                                     const std::string& what) {
  return translated([&] { return detail::load_tensors(path, what.c_str(), max_bytes); });
}

void write_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  translated([&] {
    std::vector<at::Tensor> cpu;
    for (const auto& t : tensors) cpu.push_back(t.cpu());
    detail::save_tensors(path, cpu);
  });
}

void check_output_path(const std::string& path) { detail::check_output(path); }

bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  return detail::bit_identical(a.cpu(), b.cpu());
}

}  // namespace my_ops::deploy
