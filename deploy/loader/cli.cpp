#include "deploy/loader/cli.h"

#include <sys/stat.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "my_ops/error.h"

namespace my_ops::loader {

constexpr const char* kUsageText =
    R"(usage: loader [--ops LIB.so]... --package MODEL.pt2 --input IN.pt --output OUT.pt
              [--manifest MANIFEST.json] [--public-key KEY] [--no-verify]
              [--weights WEIGHTS.bin [--weights-manifest WEIGHTS.json]]
              [--expect EXPECTED.pt [--atol A] [--rtol R] [--exact]]
              [--bench N | --runs N] [--threads T] [--runners R]
              [--intra-op-threads I]
              [--max-unpacked-mib M] [--max-input-mib M]
       loader [--ops LIB.so]... --package MODEL.pt2 --generate N --prompt-ids IDS.pt
              [--output OUT.pt] [--temperature T [--top-k K] [--top-p P] [--seed S]]
              [--stop-token ID] [--intra-op-threads I] [the checks' and weights' flags]

Runs an AOTInductor package (made by the exporter, //deploy:export) on inputs from a
torch.save file and writes the outputs with torch.save. No Python needed. With
--generate, runs a decoder package (export --kv-cache) as a token loop instead.

Every file is opened once, without following a symbolic link, and must be a
regular file. The package and the op libraries are copied into a private
temporary folder while they are hashed, and those copies are what loads, so a
file changed after the check has no effect. Relative paths are relative to
the current folder (under `bazel run`, to the folder it was started from).

  --ops LIB.so      custom-op library to load before the package; repeatable.
                    Always a path (a bare name means ./NAME). Default:
                    libmy_ops.so beside the loader, else in its Bazel runfiles.
                    Loaded into the global scope: a package calls each op as
                    the C function the manifest names beside it (its C shim).
  --package FILE    AOTInductor package (.pt2).
  --input FILE      torch.save file holding a tensor or a tuple/list of tensors.
  --output FILE     written with torch.save as a tuple of tensors (with
                    --generate: one, the new ids as a 1-D int64 tensor); created
                    atomically (a new temporary file beside it, then rename),
                    never left partial. Refused if it exists and is not a
                    regular file (a device, a FIFO) or is a file the run reads.
  --manifest FILE   the package's manifest (default: manifest.json beside the
                    package). Before anything is loaded, the package and every
                    op library must match its sha256 sums, its torch version
                    must be this loader's, and this CPU must have the
                    instruction set it records; exit 10 otherwise. Once the
                    op libraries are loaded, they must register every custom
                    op (with the same schema) and class it names; exit 3
                    otherwise.
  --public-key KEY  also require a valid Ed25519 signature of the manifest:
                    manifest.sig beside it (the manifest's name, .json -> .sig).
                    KEY: a PEM public key (export --generate-key writes one)
                    or the raw 32 bytes.
  --no-verify       skip the manifest check (prints a warning): runs code
                    that nobody vouched for. The weights beside the package
                    are then taken for it too, if they fit it.
  --weights FILE    run the package with the weights of FILE, a weights.bin
                    that `export --weights-only` wrote for this package, in
                    place of those it was exported with. A CPU package's
                    export writes its weights beside it (weights.bin,
                    weights.json), which the package itself does not hold:
                    without --weights they are taken from beside it. The
                    manifest must name this package (by sha256) and FILE's
                    sha256, and hold every constant and custom-object tensor
                    of the package with its dtype and shape; with
                    --public-key it must be signed too (.json -> .sig beside
                    it). Exit 10 otherwise. The weights are mapped, not read.
  --weights-manifest FILE  the manifest of --weights (default: weights.json
                    beside it).
  --expect FILE     compare outputs with this torch.save file (allclose);
                    exit 9 when they differ.
  --atol A, --rtol R  tolerances for --expect (default 1e-4, 1e-4).
  --exact           --expect must match bit for bit instead.
  --bench N         after a warm-up, time N runs per thread; print p50 and p99
                    (and the intra-op threads each run used).
  --runs N          N runs in all, shared by the threads; print the wall time.
  --threads T       run from T threads at once (default 1, at most 256); every
                    run's outputs must be bit-identical to the first run's.
  --runners R       model runners in the package loader (default: T, at most
                    256), i.e. how many runs may execute concurrently.
  --intra-op-threads I  threads each run uses inside its ops (LibTorch's
                    intra-op threads: the package's own parallel loops and
                    its matrix products); default: $OMP_NUM_THREADS, else one
                    per core. --threads T runs at once use up to T x I cores:
                    for latency give one run all the cores (T 1, I = cores),
                    for throughput spread them (T x I = cores). At most 256.
  --max-unpacked-mib M  refuse a package whose entries unpack to more than M
                    MiB in all (default 32768): a zip bomb stops here.
  --max-input-mib M refuse an input or --expect file over M MiB (default 1024),
                    by its size, before reading it.
  --generate N      generate N new tokens with a decoder package (exported with
                    --kv-cache): the prompt in one run, then one run per token,
                    on the package's KV cache. Prints the new token ids on one
                    line (stdout), and the prefill and decode rates (stderr).
                    Exit 14 for a package that is not a decoder; exit 7 for a
                    prompt that is empty, holds an id outside the vocabulary,
                    or with the new tokens needs more positions than the cache.
  --prompt-ids FILE torch.save file of the prompt: a 1-D integer tensor of token
                    ids (from the model's tokenizer); exit 7 for anything else.
  --temperature T   sample instead of greedy decoding (default 0: greedy): the
                    logits divided by T, cut to --top-k K (default 0: all) and
                    --top-p P (default 1: all), drawn with --seed S (default 0).
  --stop-token ID   stop after this token (it is printed).
  -h, --help        show this help.

Every flag but --ops is given at most once, and every value is non-empty:
`--public-key ""` (a script's unset variable) is exit 2, not "no key".
Temporary folders that killed loaders left behind (each holds a lock while
its loader runs) are removed when a loader starts.

)";

namespace {

using enum deploy::ExitCode;

[[noreturn]] void fail(deploy::ExitCode code, std::string message) {
  throw deploy::Error(code, std::move(message));
}

// `text` after `label`, in lines of at most 76 columns, continued under the label's text.
std::string wrapped(const std::string& label, std::string_view text) {
  constexpr size_t kWidth = 76;
  const std::string indent(label.size(), ' ');
  std::string out = label;
  size_t column = label.size();
  bool first = true;
  while (!text.empty()) {
    const size_t end = text.find(' ');
    const std::string_view word = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (!first && column + 1 + word.size() > kWidth) {
      out += "\n" + indent;
      column = indent.size();
    } else if (!first) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    first = false;
  }
  return out + "\n";
}

// std::from_chars rather than strtol: glibc >= 2.38 headers redirect strtol to __isoc23_strtol,
// which would raise the binary's minimum glibc for nothing.
bool parse_int(const std::string& s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

long parse_count(const std::string& flag, const std::string& v, long min, long max) {
  int64_t n = 0;
  if (!parse_int(v, n) || n < min || n > max) {
    fail(kUsage, flag + " needs an integer >= " + std::to_string(min) +
                     " and <= " + std::to_string(max) + ", got '" + v + "'");
  }
  return static_cast<long>(n);
}

double parse_fraction(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d > 0 && d <= 1)) {
    fail(kUsage, flag + " needs a number in (0, 1], got '" + v + "'");
  }
  return d;
}

double parse_tolerance(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0) || !std::isfinite(d)) {
    fail(kUsage, flag + " needs a number >= 0, got '" + v + "'");
  }
  return d;
}

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

Options parse_args(int argc, const char* const* argv) {
  Options o;
  std::set<std::string> seen;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    }
    std::string value;
    auto eq = a.find('=');
    const bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    // An empty value is what a script passes for an unset variable: taken as "not given",
    // `--public-key "$KEY"` would check no signature.
    auto next = [&]() -> std::string {
      if (!inline_value) {
        if (i + 1 >= argc) fail(kUsage, a + " needs a value");
        value = argv[++i];
      }
      if (value.empty()) fail(kUsage, a + " needs a non-empty value");
      return value;
    };
    // Only --ops takes a list; for any other flag a second value would silently win.
    if (a.rfind("--", 0) == 0 && a != "--ops" && !seen.insert(a).second) {
      fail(kUsage, a + " is given more than once");
    }
    if (a == "--ops") {
      o.ops.push_back(next());
    } else if (a == "--package") {
      o.package = next();
    } else if (a == "--input") {
      o.input = next();
    } else if (a == "--output") {
      o.output = next();
    } else if (a == "--expect") {
      o.expect = next();
    } else if (a == "--manifest") {
      o.manifest = next();
    } else if (a == "--public-key") {
      o.public_key = next();
    } else if (a == "--weights") {
      o.weights = next();
    } else if (a == "--weights-manifest") {
      o.weights_manifest = next();
    } else if (a == "--no-verify" && !inline_value) {
      o.verify = false;
    } else if (a == "--exact" && !inline_value) {
      o.exact = true;
    } else if (a == "--atol") {
      o.atol = parse_tolerance(a, next());
    } else if (a == "--rtol") {
      o.rtol = parse_tolerance(a, next());
    } else if (a == "--bench") {
      o.bench = parse_count(a, next(), 1, kMaxRuns);
    } else if (a == "--runs") {
      o.runs = parse_count(a, next(), 1, kMaxRuns);
    } else if (a == "--threads") {
      o.threads = parse_count(a, next(), 1, kMaxThreads);
    } else if (a == "--runners") {
      o.runners = parse_count(a, next(), 1, kMaxRunners);
    } else if (a == "--intra-op-threads") {
      o.intra_op_threads = parse_count(a, next(), 1, kMaxThreads);
    } else if (a == "--generate") {
      o.generate = parse_count(a, next(), 1, kMaxRuns);
    } else if (a == "--prompt-ids") {
      o.prompt_ids = next();
    } else if (a == "--temperature") {
      o.temperature = parse_tolerance(a, next());
    } else if (a == "--top-k") {
      o.top_k = parse_count(a, next(), 1, 1L << 31);
    } else if (a == "--top-p") {
      o.top_p = parse_fraction(a, next());
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(parse_count(a, next(), 0, std::numeric_limits<long>::max()));
    } else if (a == "--stop-token") {
      o.stop_token = parse_count(a, next(), 0, 1L << 31);
    } else if (a == "--max-unpacked-mib") {
      o.max_unpacked_mib = static_cast<uint64_t>(parse_count(a, next(), 1, 1L << 30));
    } else if (a == "--max-input-mib") {
      o.max_input_mib = static_cast<uint64_t>(parse_count(a, next(), 1, 1L << 30));
    } else {
      fail(kUsage, "unknown argument '" + a + "' (see --help)");
    }
  }
  if (o.package.empty()) fail(kUsage, "--package is required (see --help)");
  const bool sampled = seen.count("--top-k") || seen.count("--top-p") || seen.count("--seed");
  if (o.generate > 0) {
    if (o.prompt_ids.empty()) fail(kUsage, "--generate needs --prompt-ids");
    for (const char* flag :
         {"--input", "--expect", "--bench", "--runs", "--threads", "--runners"}) {
      if (seen.count(flag)) fail(kUsage, std::string(flag) + " does not go with --generate");
    }
    if (sampled && o.temperature == 0) {
      fail(kUsage, "--top-k, --top-p and --seed are for sampling: give --temperature too");
    }
  } else {
    for (const char* flag :
         {"--prompt-ids", "--temperature", "--top-k", "--top-p", "--seed", "--stop-token"}) {
      if (seen.count(flag)) fail(kUsage, std::string(flag) + " needs --generate");
    }
    if (o.input.empty()) fail(kUsage, "--input is required (see --help)");
    if (o.output.empty()) fail(kUsage, "--output is required (see --help)");
  }
  if (o.runners == 0) o.runners = o.threads;
  if (o.bench > 0 && o.runs > 0) fail(kUsage, "--bench and --runs exclude each other");
  if (o.exact && o.expect.empty()) fail(kUsage, "--exact needs --expect");
  if (!o.verify && (!o.manifest.empty() || !o.public_key.empty())) {
    fail(kUsage, "--no-verify contradicts --manifest and --public-key");
  }
  if (!o.weights_manifest.empty() && o.weights.empty()) {
    fail(kUsage, "--weights-manifest needs --weights");
  }
  return o;
}

void resolve_paths(Options& o, const std::string& base) {
  auto resolve = [&](std::string& p) {
    if (p.empty() || p.front() == '/') return;
    if (!base.empty()) p = base + "/" + p;
  };
  for (auto& lib : o.ops) {
    // dlopen treats a name without '/' as a library to search for, not a file.
    if (lib.find('/') == std::string::npos) lib = "./" + lib;
    resolve(lib);
  }
  for (std::string* p : {&o.package, &o.input, &o.output, &o.expect, &o.manifest, &o.public_key,
                         &o.weights, &o.weights_manifest, &o.prompt_ids}) {
    resolve(*p);
  }
}

std::string default_op_library(const std::string& exe_path, const std::string& runfiles_dir) {
  const size_t slash = exe_path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : exe_path.substr(0, slash);
  const std::string beside = folder + "/libmy_ops.so";
  if (is_file(beside)) return beside;
  std::vector<std::string> runfiles;
  if (!runfiles_dir.empty()) runfiles.push_back(runfiles_dir + "/_main/ops/libmy_ops.so");
  runfiles.push_back(exe_path + ".runfiles/_main/ops/libmy_ops.so");
  for (const auto& r : runfiles) {
    // Runfiles are symbolic links into Bazel's output tree; the file itself is then opened once,
    // without following links, like any other.
    char* real = ::realpath(r.c_str(), nullptr);
    if (real == nullptr) continue;
    std::string path(real);
    std::free(real);
    if (is_file(path)) return path;
  }
  return beside;
}

std::string help_text() {
  std::string out = kUsageText;
  out +=
      "Exit status (one line on stderr for every error; every program of my_ops\n"
      "exits with these numbers):\n";
  for (const auto& [code, meaning] : deploy::exit_code_meanings()) {
    out += wrapped("  " + std::to_string(code) + "  ", meaning);
  }
  out += wrapped(" 128+N  ",
                 "stopped by signal N (130 for Ctrl-C, 143 for SIGTERM); temporary files are "
                 "removed first");
  return out;
}

}  // namespace my_ops::loader
