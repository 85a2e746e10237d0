// A fuzz target for the loader's tensor reader (load_tensors), structure-aware: each input is a
// valid torch.save zip, rebuilt after its data.pkl and its storage records were mutated, so
// that most inputs get past the zip and pickle layers to the checks behind them.
//
// LLVMFuzzerTestOneInput is libFuzzer's entry point: with clang, build this file with
// -fsanitize=fuzzer,address and -DMY_OPS_LIBFUZZER (which drops main() below) to run it under
// libFuzzer. The toolchain here is GCC, so main() is a small driver of its own: it mutates the
// seeds with a fixed random seed for a bounded time (--seconds) or count (--inputs), calls the
// entry point for each, and prints how many inputs it ran. Under --config=asan an over-read is
// an ASan report; every build also checks that each tensor the reader accepts holds exactly the
// bytes of one record of the file.

#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/file_io.h"
#include "deploy/runtime/src/tensor_io.h"
#include "deploy/runtime/src/zip_directory.h"
#include "deploy/runtime/tests/fuzz_driver.h"

namespace {

using my_ops::deploy::Error;
using Bytes = std::vector<uint8_t>;

std::string scratch_path() {
  const char* base = std::getenv("TEST_TMPDIR");
  return std::string(base ? base : "/tmp") + "/tensor_reader_fuzz." + std::to_string(::getpid());
}

// The stored records of a zip, by name, as the loader's zip reader lists them.
std::vector<my_ops::deploy::detail::ZipEntry> records_of(const uint8_t* data, size_t size) {
  try {
    return my_ops::deploy::detail::read_zip_directory(
        [&](uint64_t offset, void* buf, size_t n) {
          if (offset > size || n > size - offset) return false;
          std::memcpy(buf, data + offset, n);
          return true;
        },
        size);
  } catch (const my_ops::deploy::detail::ZipError&) {
    return {};
  }
}

// Whether `t`'s storage holds exactly the bytes of some stored record of the file.
bool storage_is_a_record(const at::Tensor& t, const uint8_t* data, size_t size,
                         const std::vector<my_ops::deploy::detail::ZipEntry>& records) {
  const size_t nbytes = t.storage().nbytes();
  if (nbytes == 0) return true;
  const auto* bytes = static_cast<const uint8_t*>(t.storage().data());
  // Reads every byte the tensor's storage claims: past the end of its allocation, ASan stops
  // here.
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < nbytes; ++i) sink = sink ^ bytes[i];
  for (const auto& r : records) {
    if (r.method == 0 && r.uncompressed_size == nbytes && r.data_offset <= size &&
        nbytes <= size - r.data_offset && std::memcmp(data + r.data_offset, bytes, nbytes) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

// The tensors the loader reads from a file of these bytes; throws an Error.
std::vector<at::Tensor> read_as_a_file(const uint8_t* data, size_t size) {
  static const std::string path = scratch_path();
  {
    my_ops::deploy::detail::UniqueFd fd(
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!fd || my_ops::deploy::detail::write_all(fd.get(), data, size) != 0) std::abort();
  }
  return my_ops::deploy::detail::load_tensors(path, "input file", 64 << 20);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<at::Tensor> tensors;
  try {
    tensors = read_as_a_file(data, size);
  } catch (const Error& f) {
    if (f.code() != my_ops::deploy::kInputUnreadable &&
        f.code() != my_ops::deploy::kInputMismatch) {
      std::fprintf(stderr, "refused with exit code %d, not 6 or 7: %s\n", f.code(), f.what());
      std::abort();
    }
    return 0;
  }
  const auto records = records_of(data, size);
  for (const auto& t : tensors) {
    if (!storage_is_a_record(t, data, size, records)) {
      std::fprintf(stderr, "accepted a tensor of %zu bytes that is no record of the file\n",
                   t.storage().nbytes());
      std::abort();
    }
  }
  return 0;
}

#ifndef MY_OPS_LIBFUZZER

namespace {

// A torch.save file holding `tensors`, as the loader's own outputs are written.
Bytes save(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::IValue> elems(tensors.begin(), tensors.end());
  std::vector<char> data = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(elems)));
  return {data.begin(), data.end()};
}

struct Record {
  std::string name;
  Bytes data;
};

// The records of a torch.save file, names without the archive folder.
std::vector<Record> unzip(const Bytes& file) {
  caffe2::serialize::PyTorchStreamReader reader(
      std::make_shared<caffe2::serialize::MemoryReadAdapter>(file.data(), file.size()));
  std::vector<Record> out;
  for (const auto& name : reader.getAllRecords()) {
    auto [ptr, n] = reader.getRecord(name);
    const auto* p = static_cast<const uint8_t*>(ptr.get());
    out.push_back({name, Bytes(p, p + n)});
  }
  return out;
}

Bytes zip(const std::vector<Record>& records) {
  Bytes out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* p, size_t n) {
    if (p != nullptr)
      out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return n;
  });
  for (const auto& r : records) {
    try {
      writer.writeRecord(r.name, r.data.data(), r.data.size());
    } catch (const c10::Error&) {
      // A record the writer adds itself (the version, the byte order).
    }
  }
  writer.writeEndOfFile();
  return out;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  Bytes mutate(const Bytes& seed_file) {
    std::vector<Record> records = unzip(seed_file);
    const int rounds = 1 + pick(3);
    for (int i = 0; i < rounds; ++i) {
      Record& r = records[pick(records.size())];
      if (r.name == "data.pkl") {
        mutate_pickle(r.data);
      } else {
        mutate_record(r.data);
      }
    }
    if (pick(10) == 0 && records.size() > 1) records.erase(records.begin() + pick(records.size()));
    Bytes file = zip(records);
    // Now and then, bytes of the archive itself.
    if (pick(8) == 0) {
      for (int i = 0, n = 1 + pick(4); i < n && !file.empty(); ++i)
        file[pick(file.size())] ^= 1u << pick(8);
    }
    return file;
  }

 private:
  size_t pick(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }

  void mutate_pickle(Bytes& p) {
    if (p.empty()) return;
    switch (pick(5)) {
      case 0:  // a byte flipped: opcodes, lengths, memo indices
        p[pick(p.size())] ^= static_cast<uint8_t>(1u << pick(8));
        break;
      case 1: {  // a small integer operand (a size, a stride, numel) changed
        for (size_t i = 0; i + 1 < p.size(); ++i) {
          if (p[i] == 'K' && pick(4) == 0) p[i + 1] = static_cast<uint8_t>(pick(256));
        }
        break;
      }
      case 2:  // cut short
        p.resize(pick(p.size()));
        break;
      case 3: {  // a byte inserted
        p.insert(p.begin() + pick(p.size()), static_cast<uint8_t>(pick(256)));
        break;
      }
      default: {  // a run of bytes repeated
        const size_t at = pick(p.size());
        const size_t n = std::min<size_t>(1 + pick(16), p.size() - at);
        Bytes run(p.begin() + at, p.begin() + at + n);
        p.insert(p.begin() + at, run.begin(), run.end());
      }
    }
  }

  void mutate_record(Bytes& r) {
    switch (pick(4)) {
      case 0:  // shorter than data.pkl declares
        r.resize(pick(r.size() + 1));
        break;
      case 1:
        r.clear();
        break;
      case 2:  // longer
        r.resize(r.size() + 1 + pick(64), 0x7f);
        break;
      default:
        if (!r.empty()) r[pick(r.size())] ^= 0xff;
    }
  }

  std::mt19937_64 rng_;
};

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  out.push_back(save({at::arange(16, at::kFloat).reshape({1, 4, 4})}));
  out.push_back(save({at::ones({2, 3}, at::kDouble), at::arange(5, at::kLong)}));
  out.push_back(save({at::zeros({0}), at::ones({8}, at::kHalf), at::ones({1, 16, 64})}));
  // A view: its storage is larger than the tensor.
  out.push_back(save({at::arange(64, at::kFloat).reshape({8, 8}).slice(1, 2, 6)}));
  return out;
}

using my_ops::deploy::detail::fuzzing::flag;

}  // namespace

int main(int argc, char** argv) {
  const long seconds = flag(argc, argv, "--seconds", 20);
  const long max_inputs = flag(argc, argv, "--inputs", 1000000);
  const uint64_t seed = static_cast<uint64_t>(flag(argc, argv, "--seed", 1));
  const std::vector<Bytes> corpus = seeds();
  // The seeds themselves must read: otherwise the mutations test nothing.
  for (const auto& s : corpus) {
    try {
      read_as_a_file(s.data(), s.size());
    } catch (const Error& f) {
      std::fprintf(stderr, "a seed does not read: %s\n", f.what());
      return 1;
    }
  }
  Mutator mutator(seed);
  const long inputs = my_ops::deploy::detail::fuzzing::run_inputs(seconds, max_inputs, [&](long i) {
    const Bytes file = mutator.mutate(corpus[static_cast<size_t>(i) % corpus.size()]);
    LLVMFuzzerTestOneInput(file.data(), file.size());
  });
  ::unlink(scratch_path().c_str());
  if (!my_ops::deploy::detail::fuzzing::read_every_input_asked(argc, argv, "tensor_reader_fuzz",
                                                               inputs, max_inputs, seconds)) {
    return 1;
  }
  std::printf("tensor_reader_fuzz: %ld inputs in at most %ld s (seed %lu), no defect found\n",
              inputs, seconds, static_cast<unsigned long>(seed));
  return 0;
}

#endif  // MY_OPS_LIBFUZZER
