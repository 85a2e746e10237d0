// A fuzz target for weights.json's reader (parse_weights_manifest) and for the reader of the
// package metadata entry that lists the constants of a package compiled without its weights
// (parse_constant_specs) and of a decoder's entry (parse_decoder_spec), structure-aware: each input
// is a valid manifest or list with some of its numbers, names and bytes mutated, so that most
// inputs are JSON that reaches the layout checks behind the parse (offsets, sizes, overlaps). Every
// input goes to every reader.
//
// LLVMFuzzerTestOneInput is libFuzzer's entry point: with clang, build this file with
// -fsanitize=fuzzer,address and -DMY_OPS_LIBFUZZER (which drops main() below) to run it under
// libFuzzer. The toolchain here is GCC, so main() is a small driver of its own: it mutates the
// seed with a fixed random seed for a bounded time (--seconds) or count (--inputs). Under
// --config=asan an over-read is an ASan report; every build also checks that each manifest the
// reader accepts describes tensors that lie inside the file, aligned and apart, with sizes that
// match their shapes, and that every input is read within a bounded time per byte (20 times
// nlohmann's own parse of a long array, timed at start in the same build): one
// mutation inserts thousands of small values into an array, the shape that made a reader
// quadratic.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "deploy/runtime/src/weights_manifest.h"
#include "deploy/runtime/tests/fuzz_driver.h"
#include "deploy/runtime/tests/parse_cost.h"

namespace {

using my_ops::deploy::detail::ConstantSpecs;
using my_ops::deploy::detail::ManifestError;
using my_ops::deploy::detail::WeightsManifest;
using my_ops::deploy::detail::WeightsTensor;

[[noreturn]] void defect(const std::string& what) {
  std::fprintf(stderr, "weights_manifest_fuzz: accepted a manifest that %s\n", what.c_str());
  std::abort();
}

void check_size(const WeightsTensor& t, uint64_t limit) {
  unsigned __int128 bytes = my_ops::deploy::detail::weights_element_size(t.dtype);
  if (bytes == 0) defect("names dtype " + t.dtype);
  for (int64_t d : t.shape) {
    if (d < 0) defect("has a negative dim");
    bytes *= static_cast<uint64_t>(d);
    if (bytes > limit) break;
  }
  if (bytes != t.nbytes) defect("has a tensor whose size is not its shape's");
}

void check_tensor(const WeightsTensor& t, uint64_t blob_size) {
  check_size(t, blob_size);
  if (t.offset % my_ops::deploy::detail::kWeightsAlignment != 0) defect("has a misaligned tensor");
  if (static_cast<unsigned __int128>(t.offset) + t.nbytes > blob_size) {
    defect("has a tensor outside the file");
  }
}

void check_disjoint(std::vector<const WeightsTensor*> all) {
  for (size_t i = 0; i < all.size(); ++i) {
    for (size_t j = i + 1; j < all.size(); ++j) {
      const WeightsTensor& a = *all[i];
      const WeightsTensor& b = *all[j];
      if (a.nbytes && b.nbytes && a.offset < b.offset + b.nbytes &&
          b.offset < a.offset + a.nbytes) {
        defect("has overlapping tensors");
      }
    }
  }
}

// Inputs each reader accepted, for the driver's report.
long accepted = 0;
long accepted_specs = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const ConstantSpecs specs = my_ops::deploy::detail::parse_constant_specs(text);
    // A shape's bytes must fit an int64_t, as c10 computes them.
    for (const auto& [name, t] : specs) check_size(t, uint64_t{INT64_MAX});
    ++accepted_specs;
  } catch (const ManifestError&) {
  }
  try {
    const auto decoder = my_ops::deploy::detail::parse_decoder_spec(text);
    if (decoder.cache_length < 1 || decoder.vocab_size < 1 ||
        decoder.cache_length > my_ops::deploy::detail::kMaxDecoderSize ||
        decoder.vocab_size > my_ops::deploy::detail::kMaxDecoderSize) {
      defect("a decoder entry out of range was accepted");
    }
  } catch (const ManifestError&) {
  }
  WeightsManifest m;
  try {
    m = my_ops::deploy::detail::parse_weights_manifest(text);
  } catch (const ManifestError&) {
    return 0;
  }
  std::vector<const WeightsTensor*> all;
  for (const auto& c : m.constants) all.push_back(&c.tensor);
  for (const auto& o : m.objects) {
    for (const auto& t : o.tensors) all.push_back(&t.tensor);
  }
  for (const WeightsTensor* t : all) check_tensor(*t, m.blob_size);
  check_disjoint(all);
  ++accepted;
  return 0;
}

#ifndef MY_OPS_LIBFUZZER

namespace {

// A manifest as the exporter writes it: constants of several dtypes and ranks, a zero-size one,
// and a custom object's state tensor.
std::string seed() {
  const std::string sha(64, 'c');
  return std::string(R"({"format": ")") + my_ops::deploy::detail::kWeightsFormat + R"(",
 "package": {"file": "model.pt2", "sha256": ")" +
         sha + R"("},
 "blob": {"file": "weights.bin", "sha256": ")" +
         sha + R"(", "size": 1024},
 "constants": [
  {"name": "a.weight", "dtype": "Float", "shape": [4, 8], "offset": 0},
  {"name": "a.bias", "dtype": "BFloat16", "shape": [8], "offset": 128},
  {"name": "b", "dtype": "Long", "shape": [], "offset": 192},
  {"name": "empty", "dtype": "Half", "shape": [0, 3], "offset": 256},
  {"name": "c", "dtype": "Bool", "shape": [2, 2, 2], "offset": 320}
 ],
 "custom_objects": [
  {"name": "_torchbind_obj0", "class": "my_ops::RMSNorm",
   "tensors": [{"index": 0, "dtype": "Double", "shape": [64], "offset": 384}]}
 ]}
)";
}

// The constants of a package compiled without its weights, as the exporter lists them.
std::string specs_seed() {
  return R"({"a.weight": {"dtype": "Float", "shape": [4, 8]},
 "a.bias": {"dtype": "BFloat16", "shape": [8]}, "b": {"dtype": "Long", "shape": []},
 "empty": {"dtype": "Half", "shape": [0, 3]}, "c": {"dtype": "Bool", "shape": [2, 2, 2]}})";
}

// Numbers that sit on the edges the reader must get right.
const char* const kNumbers[] = {"0",
                                "1",
                                "63",
                                "64",
                                "65",
                                "128",
                                "1023",
                                "1024",
                                "-1",
                                "1e3",
                                "0.5",
                                "4294967296",
                                "9223372036854775807",
                                "18446744073709551615",
                                "18446744073709551616",
                                "18446744073709551552"};
const char* const kSmallValues[] = {"{}", "[]", "[{}]", "{\"n\":0}", "0", "\"a\""};
const char* const kStrings[] = {"\"Float\"",     "\"Complex\"", "\"\"", "\"a.weight\"", "\"b\"",
                                "\"x\\u0000y\"", "\"\\ud800\"", "null", "[]",           "{}"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(std::string s) {
    const int n = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < n; ++i) mutate_once(s);
    return s;
  }

  // Many small values in one array, the shape that made the old reader quadratic: up to 2^14
  // copies of a small value (or of a span of the input) inserted after a '['.
  void repeat(std::string& s) {
    const size_t open = s.find('[', pick(s.size()));
    if (open == std::string::npos) return;
    std::string unit;
    if (pick(2) == 0) {
      unit = kSmallValues[pick(std::size(kSmallValues))];
    } else {
      const size_t b = pick(s.size());
      unit = s.substr(b, 1 + pick(std::min<size_t>(24, s.size() - b)));
    }
    const size_t copies = size_t{1} << pick(15);
    std::string run;
    run.reserve(copies * (unit.size() + 1));
    for (size_t i = 0; i < copies; ++i) run += unit + ",";
    s.insert(open + 1, run);
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  // The span of the token (a number or a string) at a random position.
  std::pair<size_t, size_t> token(const std::string& s) {
    for (int tries = 0; tries < 16; ++tries) {
      const size_t at = pick(s.size());
      const char c = s[at];
      if ((c >= '0' && c <= '9') || c == '-') {
        size_t b = at, e = at;
        while (b > 0 && ((s[b - 1] >= '0' && s[b - 1] <= '9') || s[b - 1] == '-')) --b;
        while (e < s.size() && ((s[e] >= '0' && s[e] <= '9') || s[e] == '.')) ++e;
        return {b, e};
      }
      if (c == '"') {
        const size_t e = s.find('"', at + 1);
        if (e != std::string::npos) return {at, e + 1};
      }
    }
    return {0, 0};
  }

  void mutate_once(std::string& s) {
    if (s.empty()) return;
    switch (pick(7)) {
      case 6:
        repeat(s);
        break;
      case 0: {  // a number for another
        auto [b, e] = token(s);
        if (e > b) s.replace(b, e - b, kNumbers[pick(std::size(kNumbers))]);
        break;
      }
      case 1: {  // a string for another, or for a value of another type
        auto [b, e] = token(s);
        if (e > b) s.replace(b, e - b, kStrings[pick(std::size(kStrings))]);
        break;
      }
      case 2:  // a byte flipped
        s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 3: {  // a span copied elsewhere: duplicate members and entries
        const size_t b = pick(s.size());
        const size_t len = std::min(s.size() - b, pick(96));
        s.insert(pick(s.size()), s.substr(b, len));
        break;
      }
      case 4: {  // a span dropped
        const size_t b = pick(s.size());
        s.erase(b, std::min(s.size() - b, pick(32)));
        break;
      }
      default:  // cut short
        s.resize(pick(s.size()));
        break;
    }
  }

  std::mt19937_64 rng_;
};

using my_ops::deploy::detail::fuzzing::CostBound;
using my_ops::deploy::detail::fuzzing::fastest_within;
using my_ops::deploy::detail::fuzzing::flag;
using my_ops::deploy::detail::fuzzing::save_input;

}  // namespace

int main(int argc, char** argv) {
  const long seconds = flag(argc, argv, "--seconds", 20);
  const long max_inputs = flag(argc, argv, "--inputs", 100000000);
  const uint64_t seed_value = static_cast<uint64_t>(flag(argc, argv, "--seed", 1));
  const std::string corpus[] = {seed(), specs_seed(), R"({"cache_length":64,"vocab_size":512})"};
  // The seeds themselves must parse: otherwise the mutations test nothing.
  try {
    my_ops::deploy::detail::parse_weights_manifest(corpus[0]);
    my_ops::deploy::detail::parse_constant_specs(corpus[1]);
    my_ops::deploy::detail::parse_decoder_spec(corpus[2]);
  } catch (const ManifestError& e) {
    std::fprintf(stderr, "a seed does not parse: %s\n", e.what());
    return 1;
  }
  // 20 times nlohmann's own parse per byte, in this build (sanitised, optimised or not): the old
  // reader, quadratic, took 200 us per byte on 60 KB of empty objects, 250 times a linear read.
  const CostBound cost{my_ops::deploy::detail::parse_cost::kParseCostMargin *
                           my_ops::deploy::detail::parse_cost::yardstick_seconds_per_byte(),
                       0.1};
  Mutator mutator(seed_value);
  size_t largest = 0;
  const long inputs = my_ops::deploy::detail::fuzzing::run_inputs(seconds, max_inputs, [&](long i) {
    const std::string text = mutator.mutate(corpus[i % std::size(corpus)]);
    largest = std::max(largest, text.size());
    const double took = fastest_within(cost, text.size(), [&] {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    });
    if (took > cost.allowed(text.size())) {
      const std::string saved = save_input("slow_weights_manifest.json", text);
      std::fprintf(stderr,
                   "weights_manifest_fuzz: an input of %zu bytes took %.3f s to read at best of "
                   "three, over %.2f us per byte: not linear in its input%s%s\n",
                   text.size(), took, cost.seconds_per_byte * 1e6,
                   saved.empty() ? "" : "; saved to ", saved.c_str());
      std::abort();
    }
  });
  if (!my_ops::deploy::detail::fuzzing::read_every_input_asked(argc, argv, "weights_manifest_fuzz",
                                                               inputs, max_inputs, seconds)) {
    return 1;
  }
  std::printf(
      "weights_manifest_fuzz: %ld inputs (%ld accepted as weights manifests, %ld as constant "
      "lists, the largest %zu bytes) in at most %ld s (seed %lu), each read within %.2f us per "
      "byte, no defect found\n",
      inputs, accepted, accepted_specs, largest, seconds, static_cast<unsigned long>(seed_value),
      cost.seconds_per_byte * 1e6);
  // A driver whose mutations all fail to parse reaches none of the layout checks.
  return accepted > 0 && accepted_specs > 0 ? 0 : 1;
}

#endif  // MY_OPS_LIBFUZZER
