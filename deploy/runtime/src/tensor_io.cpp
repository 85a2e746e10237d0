#include "deploy/runtime/src/tensor_io.h"

#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "deploy/runtime/src/error_text.h"
#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/input_signature.h"
#include "deploy/runtime/src/pickle_scan.h"
#include "deploy/runtime/src/private_dir.h"
#include "deploy/runtime/src/text.h"
#include "deploy/runtime/src/zip_directory.h"

namespace my_ops::deploy::detail {
namespace {

// Discards LibTorch's warnings (quantized or deprecated dtypes, say) while an input file is
// parsed, so that errors stay one line.
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

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

FileBytes::FileBytes(size_t size) : size_(size) {
  void* p = nullptr;
  if (::posix_memalign(&p, 64, size == 0 ? 64 : size) != 0) throw std::bad_alloc();
  data_ = static_cast<unsigned char*>(p);
}

FileBytes::~FileBytes() { std::free(data_); }

namespace {

// What a storage's DataPtr holds: the file's bytes stay alive while any tensor uses them.
void release_file_bytes(void* ctx) { delete static_cast<std::shared_ptr<FileBytes>*>(ctx); }

// One zip entry's bytes, when it is stored: torch.save never compresses, and a compressed
// record would need a second reader of the archive.
std::string_view stored_record(const FileBytes& bytes, const ZipEntry& e) {
  if (e.method != 0 || e.compressed_size != e.uncompressed_size) {
    throw std::runtime_error("record " + single_quoted(e.name) +
                             " is compressed; torch.save stores records uncompressed");
  }
  return {reinterpret_cast<const char*>(bytes.data()) + e.data_offset,
          static_cast<size_t>(e.uncompressed_size)};
}

struct Record {
  std::string name;  // "data/<key>", as data.pkl names it
  size_t size;
};

}  // namespace

std::vector<at::Tensor> read_tensors(const std::shared_ptr<FileBytes>& bytes, const char* what,
                                     const std::string& path) {
  const std::string file = std::string(what) + " " + path;
  std::vector<ZipEntry> entries;
  try {
    entries = read_zip_directory(
        [&](uint64_t offset, void* buf, size_t n) {
          if (offset > bytes->size() || n > bytes->size() - offset) return false;
          std::memcpy(buf, bytes->data() + offset, n);
          return true;
        },
        bytes->size());
  } catch (const ZipError& e) {
    fail(kInputUnreadable, file + " is not a torch.save file (" + e.what() + ")");
  }
  // torch.save puts every record under one folder, "<archive>/data.pkl", "<archive>/data/0", ...
  std::unordered_map<std::string_view, const ZipEntry*> by_name;
  const ZipEntry* pickle_entry = nullptr;
  for (const auto& e : entries) {
    const auto slash = e.name.find('/');
    if (slash == std::string::npos) continue;
    const std::string_view rest = std::string_view(e.name).substr(slash + 1);
    if (rest == "data.pkl") {
      if (pickle_entry != nullptr) {
        fail(kInputUnreadable, file + " is not a torch.save file (it holds two data.pkl records)");
      }
      pickle_entry = &e;
    }
  }
  if (pickle_entry == nullptr) {
    fail(kInputUnreadable, file + " is not a torch.save file (no data.pkl record)");
  }
  const std::string prefix = pickle_entry->name.substr(0, pickle_entry->name.find('/') + 1);
  for (const auto& e : entries) {
    if (e.name.rfind(prefix, 0) == 0)
      by_name.emplace(std::string_view(e.name).substr(prefix.size()), &e);
  }

  // Where each storage's bytes start, and the record they came from.
  std::unordered_map<const void*, Record> records;
  c10::IValue value;
  try {
    QuietWarnings quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    const std::string_view pickle = stored_record(*bytes, *pickle_entry);
    const auto* pickle_bytes = reinterpret_cast<const unsigned char*>(pickle.data());
    scan_pickle(pickle_bytes, pickle.size());
    size_t pos = 0;
    auto read_pickle = [&](char* buf, size_t n) {
      const size_t k = std::min(n, pickle.size() - pos);
      std::memcpy(buf, pickle.data() + pos, k);
      pos += k;
      return k;
    };
    auto read_record = [&](const std::string& key) {
      const std::string name = "data/" + key;
      auto it = by_name.find(name);
      if (it == by_name.end()) {
        throw std::runtime_error("data.pkl names storage record " + single_quoted(name) +
                                 ", which the file lacks");
      }
      const std::string_view record = stored_record(*bytes, *it->second);
      void* data = const_cast<char*>(record.data());
      records[data] = Record{name, record.size()};
      return at::DataPtr(data, new std::shared_ptr<FileBytes>(bytes), release_file_bytes,
                         at::Device(at::kCPU));
    };
    // Input files hold only tensors: a class in data.pkl is refused rather than built.
    auto no_classes = [](const c10::QualifiedName& name) -> c10::StrongTypePtr {
      throw std::runtime_error("data.pkl holds a " + name.qualifiedName() + ", not a tensor");
    };
    // The CPU as the device: a storage saved from a GPU would otherwise be copied there while it
    // is unpickled, before its size is checked below.
    torch::jit::Unpickler unpickler(read_pickle, no_classes, /*obj_loader=*/nullptr, read_record,
                                    at::Device(at::kCPU));
    value = unpickler.parse_ivalue();
  } catch (const PickleLimitError& e) {
    fail(kInputMismatch, file + " " + e.what());
  } catch (const std::exception& e) {
    fail(kInputUnreadable, file + " is not a torch.save file (" + error_text(e) + ")");
  }

  std::vector<at::Tensor> tensors;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) {
      fail(kInputUnreadable,
           file + " must hold a tensor or a tuple/list of tensors, found " + v.tagKind());
    }
    const at::Tensor& t = v.toTensor();
    const std::string which = file + ": tensor " + std::to_string(tensors.size());
    // The unpickler sizes a storage from data.pkl, not from its record: a shorter record would
    // have every read of the tensor run past it.
    if (t.has_storage() && t.storage().nbytes() > 0) {
      auto it = records.find(t.storage().data());
      if (it == records.end()) fail(kInputUnreadable, which + " has a storage of no record");
      if (it->second.size != t.storage().nbytes()) {
        fail(kInputUnreadable, which + ": storage record " + single_quoted(it->second.name) +
                                   " holds " + std::to_string(it->second.size) +
                                   " bytes, data.pkl declares " +
                                   std::to_string(t.storage().nbytes()));
      }
    }
    if (auto problem = tensor_problem(t)) fail(kInputUnreadable, which + " " + *problem);
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

std::vector<at::Tensor> load_tensors(const std::string& path, const char* what,
                                     uint64_t max_bytes) {
  const FileRole role{what, kInputUnreadable, kInputUnreadable};
  UniqueFd fd = open_regular_file(path, role);
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    fail(kInputUnreadable,
         std::string("cannot read ") + what + " " + path + ": " + std::strerror(errno));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    fail(kInputUnreadable, std::string(what) + " " + path + " is larger than " +
                               std::to_string(max_bytes) +
                               " bytes (raise it with --max-input-mib)");
  }
  auto bytes = std::make_shared<FileBytes>(static_cast<size_t>(size));
  // One byte more than fstat said: a file that grows meanwhile is refused, not cut short.
  if (!read_exactly(fd.get(), bytes->data(), bytes->size())) {
    fail(kInputUnreadable,
         std::string("cannot read ") + what + " " + path + ": it changed size while it was read");
  }
  return read_tensors(bytes, what, path);
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
  if (auto specs = parse_input_signature(it->second)) check_inputs(inputs, *specs);
}

void check_inputs(const std::vector<at::Tensor>& inputs, const std::vector<InputSpec>& specs) {
  if (inputs.size() != specs.size()) {
    fail(kInputMismatch, "model takes " + std::to_string(specs.size()) + " input(s), got " +
                             std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    const std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
    if (auto why = input_mismatch(c10::toString(t.scalar_type()), sizes, specs[i])) {
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

}  // namespace my_ops::deploy::detail
