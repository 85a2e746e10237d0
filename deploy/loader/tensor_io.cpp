#include "deploy/loader/tensor_io.h"

#include <c10/util/Exception.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <sstream>

#include "deploy/loader/failure.h"
#include "deploy/loader/file_io.h"
#include "deploy/loader/input_signature.h"
#include "deploy/loader/pickle_scan.h"
#include "deploy/loader/private_dir.h"

namespace my_ops::loader {
namespace {

// Discards LibTorch's warnings (quantized or deprecated dtypes, say) while an input file is
// parsed, so that errors stay one line.
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.empty() ? std::string("unknown error") : line;
}

}  // namespace

std::string error_text(const std::exception& e) {
  auto* c10e = dynamic_cast<const c10::Error*>(&e);
  std::string line = first_line(c10e ? c10e->what_without_backtrace() : e.what());
  auto cut = line.find(". This is an internal miniz error");
  return cut == std::string::npos ? line : line.substr(0, cut);
}

std::string shape_string(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

// torch.save records a tensor's sizes, strides and offset separately from its storage, and the
// unpickler takes them on trust; a file whose sizes reach past the storage would have every
// later read run off the end of the buffer. Also rejects what the model runner cannot take.
std::optional<std::string> tensor_problem(const at::Tensor& t) {
  if (t.layout() != at::kStrided) return "is not a dense (strided) tensor";
  if (!t.device().is_cpu()) return "is not a CPU tensor (" + t.device().str() + ")";
  if (!t.has_storage()) return "has no storage";
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  const int64_t offset = t.storage_offset();
  if (offset < 0) return "has a negative storage offset";
  int64_t last = offset;  // element index of the last element
  bool empty = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.sizes()[d];
    const int64_t stride = t.strides()[d];
    if (size < 0 || stride < 0) return "has a negative size or stride";
    if (size == 0) empty = true;
    int64_t reach = 0;
    if (size > 0 && (__builtin_mul_overflow(size - 1, stride, &reach) ||
                     __builtin_add_overflow(last, reach, &last))) {
      return "declares sizes " + shape_string(t) + " that overflow";
    }
  }
  int64_t numel = 1;
  for (int64_t size : t.sizes()) {
    if (__builtin_mul_overflow(numel, size, &numel)) {
      return "declares sizes " + shape_string(t) + " that overflow";
    }
  }
  if (empty) return std::nullopt;
  int64_t end = 0;
  if (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, itemsize, &end) ||
      static_cast<uint64_t>(end) > t.storage().nbytes()) {
    return "declares sizes " + shape_string(t) + " beyond its stored data (" +
           std::to_string(t.storage().nbytes()) + " bytes)";
  }
  return std::nullopt;
}

std::vector<at::Tensor> load_tensors(const std::string& path, const char* what,
                                     uint64_t max_bytes) {
  const FileRole role{what, kInputUnreadable, kInputUnreadable};
  std::string data;
  {
    UniqueFd fd = open_regular_file(path, role);
    data = read_all(fd.get(), path, role, max_bytes, "--max-input-mib");
  }
  c10::IValue value;
  try {
    QuietWarnings quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    {
      caffe2::serialize::PyTorchStreamReader reader(
          std::make_shared<caffe2::serialize::MemoryReadAdapter>(data.data(), data.size()));
      auto [pickle, size] = reader.getRecord("data.pkl");
      scan_pickle(static_cast<const unsigned char*>(pickle.get()), size);
    }
    value = torch::jit::pickle_load(std::vector<char>(data.begin(), data.end()));
  } catch (const std::exception& e) {
    fail(kInputUnreadable,
         std::string(what) + " " + path + " is not a torch.save file (" + error_text(e) + ")");
  }
  std::vector<at::Tensor> tensors;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) {
      fail(kInputUnreadable, std::string(what) + " " + path +
                                 " must hold a tensor or a tuple/list of tensors, found " +
                                 v.tagKind());
    }
    const at::Tensor& t = v.toTensor();
    if (auto problem = tensor_problem(t)) {
      fail(kInputUnreadable, std::string(what) + " " + path + ": tensor " +
                                 std::to_string(tensors.size()) + " " + *problem);
    }
    tensors.push_back(t);
  };
  if (value.isTuple()) {
    for (const auto& v : value.toTupleRef().elements()) add(v);
  } else if (value.isList()) {
    for (const auto& v : value.toListRef()) add(v);
  } else {
    add(value);
  }
  return tensors;
}

void save_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  std::vector<c10::IValue> elems(tensors.begin(), tensors.end());
  std::vector<char> data = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(elems)));
  write_file_atomically(path, std::string_view(data.data(), data.size()),
                        PrivateDir::set_pending_file);
}

void validate_inputs(const std::vector<at::Tensor>& inputs,
                     const std::unordered_map<std::string, std::string>& metadata) {
  auto it = metadata.find(kInputSignatureKey);
  if (it == metadata.end()) return;
  // Without a signature this loader understands, AOTI's own runtime checks still apply.
  auto specs = parse_input_signature(it->second);
  if (!specs) return;
  if (inputs.size() != specs->size()) {
    fail(kInputMismatch, "model takes " + std::to_string(specs->size()) + " input(s), got " +
                             std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    const std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
    if (auto why = input_mismatch(c10::toString(t.scalar_type()), sizes, (*specs)[i])) {
      fail(kInputMismatch, "input " + std::to_string(i) + " " + shape_string(t) + ": " + *why);
    }
  }
}

// Bit for bit, so that -0.0 vs 0.0 and differing NaN payloads count too.
bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  auto bytes = [](const at::Tensor& t) { return t.contiguous().reshape({-1}).view(at::kByte); };
  return at::equal(bytes(a), bytes(b));
}

void compare_expected(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      const std::string& path, double atol, double rtol, bool exact) {
  if (got.size() != want.size()) {
    fail(kExpectMismatch, "model gave " + std::to_string(got.size()) + " output(s), " + path +
                              " has " + std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    auto g = got[i].cpu();
    if (g.sizes() != want[i].sizes() || g.scalar_type() != want[i].scalar_type()) {
      fail(kExpectMismatch, "output " + std::to_string(i) + " is " +
                                std::string(c10::toString(g.scalar_type())) + shape_string(g) +
                                ", expected " + c10::toString(want[i].scalar_type()) +
                                shape_string(want[i]));
    }
    if (exact) {
      if (!bit_identical(g, want[i])) {
        fail(kExpectMismatch, "output " + std::to_string(i) + " is not bit-identical to " + path);
      }
      continue;
    }
    if (!at::allclose(g, want[i], rtol, atol)) {
      double diff = (g.to(at::kDouble) - want[i].to(at::kDouble)).abs().max().item<double>();
      fail(kExpectMismatch, "output " + std::to_string(i) + " differs from " + path +
                                " (max abs diff " + std::to_string(diff) + ")");
    }
  }
}

}  // namespace my_ops::loader
