// Standalone runtime for AOTInductor packages that use the my_ops library.
//
// Links only against LibTorch (no libpython), so it runs on edge hosts that
// have the LibTorch shared libraries but no Python. See kHelp for the command
// line contract and exit codes.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

enum ExitCode : int {
  kOk = 0,
  kOther = 1,
  kUsage = 2,
  kOpsLibrary = 3,
  kPackageMissing = 4,
  kPackageCorrupt = 5,
  kInputUnreadable = 6,
  kInputMismatch = 7,
  kOutputUnwritable = 8,
  kExpectMismatch = 9,
};

constexpr const char* kHelp =
    R"(usage: loader [--ops LIB.so]... --package MODEL.pt2 --input IN.pt --output OUT.pt
              [--expect EXPECTED.pt [--atol A] [--rtol R]]
              [--bench N] [--threads T] [--runners R]

Runs an AOTInductor package (made by deploy/export.py) on inputs from a
torch.save file and writes the outputs with torch.save. No Python needed.

  --ops LIB.so      custom-op library to load before the package; repeatable.
                    Default: libmy_ops.so in the loader's own directory.
  --package FILE    AOTInductor package (.pt2).
  --input FILE      torch.save file holding a tensor or a tuple/list of tensors.
  --output FILE     written with torch.save as a tuple of tensors; created
                    atomically (FILE.tmp, then rename), never left partial.
  --expect FILE     compare outputs with this torch.save file (allclose);
                    exit 9 when they differ.
  --atol A, --rtol R  tolerances for --expect (default 1e-4, 1e-4).
  --bench N         after a warm-up, time N runs per thread; print p50 and p99.
  --threads T       run from T threads at once (default 1); all outputs must
                    be identical.
  --runners R       model runners in the package loader (default: T), i.e.
                    how many runs may execute concurrently.
  -h, --help        show this help.

Exit status (one line on stderr for every error):
  0  success
  1  any other error (including a failure inside the model)
  2  bad command line
  3  op library missing or cannot be loaded
  4  package file missing
  5  package corrupt or not an AOTInductor package (not a zip, truncated,
     no model inside, cannot be loaded)
  6  input (or --expect) file missing or unreadable, or not tensors
  7  wrong number of inputs, or an input with the wrong dtype/rank/shape
  8  output file cannot be written
  9  outputs differ from --expect
)";

struct Failure {
  int code;
  std::string message;
};

[[noreturn]] void Fail(int code, std::string message) { throw Failure{code, std::move(message)}; }

// Keeps multi-line c10 messages (which carry C++ backtraces) to one line.
std::string FirstLine(const std::string& s) {
  auto end = s.find('\n');
  std::string line = s.substr(0, end);
  return line.empty() ? std::string("unknown error") : line;
}

// Also drops the boilerplate miniz appends to every zip error.
std::string ErrorText(const std::exception& e) {
  auto* c10e = dynamic_cast<const c10::Error*>(&e);
  std::string line = FirstLine(c10e ? c10e->what_without_backtrace() : e.what());
  auto cut = line.find(". This is an internal miniz error");
  return cut == std::string::npos ? line : line.substr(0, cut);
}

// ---------------------------------------------------------------------------
// Private temporary directory.
//
// AOTIModelPackageLoader extracts the package into $TMPDIR/aotinductor_*; on
// errors it can leave that folder behind. Pointing TMPDIR at a folder we own
// lets us remove everything on every exit path, including signals.

char g_tmpdir[4096] = {0};

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

void RemoveTmpdir() {
  if (g_tmpdir[0] != '\0') {
    ::nftw(g_tmpdir, RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
    g_tmpdir[0] = '\0';
  }
}

void OnSignal(int sig) {
  // nftw is not formally async-signal-safe, but the process is about to die
  // and the alternative is a leaked extraction folder.
  RemoveTmpdir();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void MakePrivateTmpdir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/my_ops_loader.XXXXXX";
  if (tmpl.size() >= sizeof(g_tmpdir)) Fail(kOther, "TMPDIR path too long");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    Fail(kOther, "cannot create a temporary directory in " + tmpl + ": " + std::strerror(errno));
  }
  std::strncpy(g_tmpdir, buf.data(), sizeof(g_tmpdir) - 1);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::signal(sig, OnSignal);
  ::setenv("TMPDIR", g_tmpdir, 1);
}

// ---------------------------------------------------------------------------
// Command line.

struct Options {
  std::vector<std::string> ops;
  std::string package;
  std::string input;
  std::string output;
  std::string expect;
  double atol = 1e-4;
  double rtol = 1e-4;
  long bench = 0;
  long threads = 1;
  long runners = 0;
  bool help = false;
};

// std::from_chars rather than strtol: glibc >= 2.38 headers redirect strtol
// to __isoc23_strtol, which would raise the binary's minimum glibc for nothing.
bool ParseInt(const std::string& s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

long ParseCount(const std::string& flag, const std::string& v, long min) {
  int64_t n = 0;
  if (!ParseInt(v, n) || n < min || n > 1000000) {
    Fail(kUsage, flag + " needs an integer >= " + std::to_string(min) + ", got '" + v + "'");
  }
  return static_cast<long>(n);
}

double ParseTolerance(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0) || !std::isfinite(d)) {
    Fail(kUsage, flag + " needs a number >= 0, got '" + v + "'");
  }
  return d;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    }
    std::string value;
    auto eq = a.find('=');
    bool inline_value = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) Fail(kUsage, a + " needs a value");
      return argv[++i];
    };
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
    } else if (a == "--atol") {
      o.atol = ParseTolerance(a, next());
    } else if (a == "--rtol") {
      o.rtol = ParseTolerance(a, next());
    } else if (a == "--bench") {
      o.bench = ParseCount(a, next(), 1);
    } else if (a == "--threads") {
      o.threads = ParseCount(a, next(), 1);
    } else if (a == "--runners") {
      o.runners = ParseCount(a, next(), 1);
    } else {
      Fail(kUsage, "unknown argument '" + a + "' (see --help)");
    }
  }
  if (o.package.empty()) Fail(kUsage, "--package is required (see --help)");
  if (o.input.empty()) Fail(kUsage, "--input is required (see --help)");
  if (o.output.empty()) Fail(kUsage, "--output is required (see --help)");
  if (o.runners == 0) o.runners = o.threads;
  return o;
}

// ---------------------------------------------------------------------------
// Op libraries.

std::string ExeDir() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return ".";
  std::string path(buf.data(), static_cast<size_t>(n));
  auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

void LoadOpLibraries(std::vector<std::string> libs) {
  if (libs.empty()) libs.push_back(ExeDir() + "/libmy_ops.so");
  for (const auto& lib : libs) {
    struct stat st{};
    if (::stat(lib.c_str(), &st) != 0) {
      Fail(kOpsLibrary, "op library not found: " + lib + " (pass --ops LIB.so)");
    }
    // The package resolves custom ops and classes through the global op
    // registry, which the library's static initialisers fill in; RTLD_LOCAL
    // is enough and keeps the library's own symbols out of the global scope.
    // The handle is intentionally never closed: registrations must outlive
    // every run.
    if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      const char* err = ::dlerror();
      Fail(kOpsLibrary, "cannot load op library " + lib + ": " + FirstLine(err ? err : "?"));
    }
  }
}

// ---------------------------------------------------------------------------
// Package validation: turn the common mistakes into clean errors instead of
// the loader's deep stack traces.

uint64_t ReadLe(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Lists the entry names of a zip archive from its central directory. A
// hand-rolled reader, because the stream reader in LibTorch insists on
// torch.save's own layout and its errors do not say what is wrong.
std::vector<std::string> ZipEntryNames(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  // The end-of-central-directory record sits in the last 22 + 65535 bytes.
  const uint64_t tail_len = std::min<uint64_t>(size, 22 + 65535);
  std::vector<unsigned char> tail(tail_len);
  f.seekg(static_cast<std::streamoff>(size - tail_len));
  f.read(reinterpret_cast<char*>(tail.data()), static_cast<std::streamsize>(tail_len));
  const std::string truncated = "package is truncated or not a complete zip archive: " + path;
  if (!f || tail_len < 22) Fail(kPackageCorrupt, truncated);
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_len) - 22; i >= 0; --i) {
    if (ReadLe(&tail[i], 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) Fail(kPackageCorrupt, truncated);
  uint64_t count = ReadLe(&tail[eocd + 10], 2);
  uint64_t cd_size = ReadLe(&tail[eocd + 12], 4);
  uint64_t cd_offset = ReadLe(&tail[eocd + 16], 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {
    // Zip64 (packages over 4 GiB): the real values live in the zip64
    // end-of-central-directory record, found through its locator.
    if (eocd < 20 || ReadLe(&tail[eocd - 20], 4) != 0x07064b50) Fail(kPackageCorrupt, truncated);
    uint64_t rec = ReadLe(&tail[eocd - 20 + 8], 8);
    unsigned char z64[56];
    f.seekg(static_cast<std::streamoff>(rec));
    if (rec + sizeof(z64) > size || !f.read(reinterpret_cast<char*>(z64), sizeof(z64)) ||
        ReadLe(z64, 4) != 0x06064b50) {
      Fail(kPackageCorrupt, truncated);
    }
    count = ReadLe(z64 + 32, 8);
    cd_size = ReadLe(z64 + 40, 8);
    cd_offset = ReadLe(z64 + 48, 8);
  }
  if (cd_offset + cd_size > size || cd_size > (1ull << 31)) Fail(kPackageCorrupt, truncated);
  std::vector<unsigned char> cd(cd_size);
  f.seekg(static_cast<std::streamoff>(cd_offset));
  if (!f.read(reinterpret_cast<char*>(cd.data()), static_cast<std::streamsize>(cd_size))) {
    Fail(kPackageCorrupt, truncated);
  }
  std::vector<std::string> names;
  size_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (pos + 46 > cd.size() || ReadLe(&cd[pos], 4) != 0x02014b50) {
      Fail(kPackageCorrupt, "package has a damaged zip directory: " + path);
    }
    size_t name_len = ReadLe(&cd[pos + 28], 2);
    size_t extra_len = ReadLe(&cd[pos + 30], 2);
    size_t comment_len = ReadLe(&cd[pos + 32], 2);
    if (pos + 46 + name_len > cd.size()) {
      Fail(kPackageCorrupt, "package has a damaged zip directory: " + path);
    }
    names.emplace_back(reinterpret_cast<const char*>(&cd[pos + 46]), name_len);
    pos += 46 + name_len + extra_len + comment_len;
  }
  return names;
}

void ValidatePackage(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) Fail(kPackageMissing, "package not found: " + path);
  if (!S_ISREG(st.st_mode)) Fail(kPackageCorrupt, "package is not a regular file: " + path);
  if (::access(path.c_str(), R_OK) != 0) {
    Fail(kPackageMissing, "package not readable: " + path + ": " + std::strerror(errno));
  }
  {
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {0};
    if (!f.read(magic, sizeof(magic)) || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
      Fail(kPackageCorrupt, "package is not a zip archive: " + path);
    }
  }
  std::vector<std::string> names = ZipEntryNames(path);
  // Entries are "<archive>/data/aotinductor/model/<hash>.{so,cpp}": the
  // compiled model (or its sources for a cpp-only package).
  bool has_model = std::any_of(names.begin(), names.end(), [](const std::string& n) {
    auto at = n.find("/data/aotinductor/model/");
    auto ends = [&](const char* suffix) {
      size_t k = std::strlen(suffix);
      return n.size() > k && n.compare(n.size() - k, k, suffix) == 0;
    };
    return at != std::string::npos && (ends(".so") || ends(".cpp"));
  });
  if (!has_model) {
    Fail(kPackageCorrupt, "package has no AOTInductor model named 'model' inside: " + path);
  }
}

// ---------------------------------------------------------------------------
// torch.save files.

std::vector<char> ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    Fail(kInputUnreadable,
         std::string("cannot read ") + what + " " + path + ": " + std::strerror(errno));
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) Fail(kInputUnreadable, std::string("cannot read ") + what + " " + path);
  return data;
}

std::vector<at::Tensor> LoadTensors(const std::string& path, const char* what) {
  std::vector<char> data = ReadFile(path, what);
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(data);
  } catch (const std::exception& e) {
    Fail(kInputUnreadable,
         std::string(what) + " " + path + " is not a torch.save file (" + ErrorText(e) + ")");
  }
  std::vector<at::Tensor> tensors;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) {
      Fail(kInputUnreadable, std::string(what) + " " + path +
                                 " must hold a tensor or a tuple/list of tensors, found " +
                                 v.tagKind());
    }
    tensors.push_back(v.toTensor());
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

void WriteTensorsAtomically(const std::string& path, const std::vector<at::Tensor>& tensors) {
  std::vector<c10::IValue> elems(tensors.begin(), tensors.end());
  std::vector<char> data = torch::jit::pickle_save(c10::ivalue::Tuple::create(std::move(elems)));
  // Readers must never see a half-written file: write beside the target
  // (same filesystem) and rename over it.
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Fail(kOutputUnwritable, "cannot write output " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      Fail(kOutputUnwritable, "cannot write output " + path + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    Fail(kOutputUnwritable, "cannot write output " + path + ": " + std::strerror(err));
  }
}

// ---------------------------------------------------------------------------
// Input validation against the signature export.py stores in the package
// metadata ("my_ops.inputs"): one entry per input separated by ';', each
// "Dtype:d0,d1,..." where a dim is "N" (static) or "LO-HI" (dynamic, HI may
// be "inf"). Without it we rely on AOTI's own runtime checks.

struct DimRange {
  int64_t lo, hi;  // hi < 0: unbounded
};
struct InputSpec {
  std::string dtype;
  std::vector<DimRange> dims;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) out.push_back(cur);
  return out;
}

std::optional<std::vector<InputSpec>> ParseSignature(const std::string& sig) {
  std::vector<InputSpec> specs;
  {
    for (const auto& item : Split(sig, ';')) {
      auto colon = item.find(':');
      if (colon == std::string::npos) return std::nullopt;
      InputSpec spec{item.substr(0, colon), {}};
      std::string dims = item.substr(colon + 1);
      if (!dims.empty()) {
        for (const auto& d : Split(dims, ',')) {
          auto dash = d.find('-');
          DimRange r{0, -1};
          if (dash == std::string::npos) {
            if (!ParseInt(d, r.lo)) return std::nullopt;
            r.hi = r.lo;
          } else {
            std::string hi = d.substr(dash + 1);
            if (!ParseInt(d.substr(0, dash), r.lo)) return std::nullopt;
            if (hi != "inf" && !ParseInt(hi, r.hi)) return std::nullopt;
          }
          spec.dims.push_back(r);
        }
      }
      specs.push_back(std::move(spec));
    }
  }
  return specs;
}

std::string ShapeString(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

void ValidateInputs(const std::vector<at::Tensor>& inputs,
                    const std::unordered_map<std::string, std::string>& metadata) {
  auto it = metadata.find("my_ops.inputs");
  if (it == metadata.end()) return;
  auto specs = ParseSignature(it->second);
  if (!specs) return;
  if (inputs.size() != specs->size()) {
    Fail(kInputMismatch, "model takes " + std::to_string(specs->size()) + " input(s), got " +
                             std::to_string(inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& t = inputs[i];
    const auto& spec = (*specs)[i];
    std::string where = "input " + std::to_string(i) + ": ";
    std::string dtype = c10::toString(t.scalar_type());
    if (dtype != spec.dtype)
      Fail(kInputMismatch, where + "dtype " + dtype + ", expected " + spec.dtype);
    if (static_cast<size_t>(t.dim()) != spec.dims.size()) {
      Fail(kInputMismatch, where + "rank " + std::to_string(t.dim()) + ", expected " +
                               std::to_string(spec.dims.size()));
    }
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      int64_t n = t.size(static_cast<int64_t>(d));
      const auto& r = spec.dims[d];
      if (n < r.lo || (r.hi >= 0 && n > r.hi)) {
        std::string want =
            r.lo == r.hi ? std::to_string(r.lo)
                         : std::to_string(r.lo) + ".." + (r.hi < 0 ? "inf" : std::to_string(r.hi));
        Fail(kInputMismatch,
             where + "shape " + ShapeString(t) + ", dim " + std::to_string(d) + " must be " + want);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Running.

std::vector<at::Tensor> RunOnce(torch::inductor::AOTIModelPackageLoader& loader,
                                const std::vector<at::Tensor>& inputs) {
  try {
    return loader.run(inputs);
  } catch (const std::exception& e) {
    std::string msg = ErrorText(e);
    // AOTI's runtime input checks (AOTI_RUNTIME_CHECK_INPUTS) report through
    // the same exception type as kernel failures; their text is the only tell.
    bool input_check = msg.find("input_handles") != std::string::npos ||
                       msg.find("unmatched") != std::string::npos;
    Fail(input_check ? kInputMismatch : kOther, "model run failed: " + msg);
  }
}

bool Identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].sizes() != b[i].sizes() || a[i].scalar_type() != b[i].scalar_type() ||
        !at::equal(a[i], b[i])) {
      return false;
    }
  }
  return true;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

// Runs `iters` times from each of `threads` threads, returning one reference
// output. Per-call latencies (ms) go to `latencies` when non-null.
std::vector<at::Tensor> RunConcurrently(torch::inductor::AOTIModelPackageLoader& loader,
                                        const std::vector<at::Tensor>& inputs, long threads,
                                        long iters, std::vector<double>* latencies) {
  std::vector<at::Tensor> reference = RunOnce(loader, inputs);
  std::vector<std::vector<double>> per_thread(threads);
  std::vector<std::optional<Failure>> errors(threads);
  std::atomic<bool> mismatch{false};
  auto worker = [&](long t) {
    try {
      for (long i = 0; i < iters; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        auto out = RunOnce(loader, inputs);
        auto t1 = std::chrono::steady_clock::now();
        per_thread[t].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (!Identical(out, reference)) mismatch = true;
      }
    } catch (const Failure& f) {
      errors[t] = f;
    } catch (const std::exception& e) {
      errors[t] = Failure{kOther, ErrorText(e)};
    }
  };
  if (threads == 1) {
    worker(0);
  } else {
    std::vector<std::thread> pool;
    for (long t = 0; t < threads; ++t) pool.emplace_back(worker, t);
    for (auto& th : pool) th.join();
  }
  for (auto& e : errors) {
    if (e) throw *e;
  }
  if (mismatch) Fail(kOther, "outputs differ between concurrent runs");
  if (latencies) {
    for (auto& v : per_thread) latencies->insert(latencies->end(), v.begin(), v.end());
  }
  return reference;
}

void CompareExpected(const std::vector<at::Tensor>& got, const std::string& path, double atol,
                     double rtol) {
  auto want = LoadTensors(path, "expected-output file");
  if (got.size() != want.size()) {
    Fail(kExpectMismatch, "model gave " + std::to_string(got.size()) + " output(s), " + path +
                              " has " + std::to_string(want.size()));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    auto g = got[i].cpu();
    if (g.sizes() != want[i].sizes() || g.scalar_type() != want[i].scalar_type()) {
      Fail(kExpectMismatch, "output " + std::to_string(i) + " is " +
                                std::string(c10::toString(g.scalar_type())) + ShapeString(g) +
                                ", expected " + c10::toString(want[i].scalar_type()) +
                                ShapeString(want[i]));
    }
    if (!at::allclose(g, want[i], rtol, atol)) {
      double diff = (g.to(at::kDouble) - want[i].to(at::kDouble)).abs().max().item<double>();
      Fail(kExpectMismatch, "output " + std::to_string(i) + " differs from " + path +
                                " (max abs diff " + std::to_string(diff) + ")");
    }
  }
}

int Main(int argc, char** argv) {
  Options opt = ParseArgs(argc, argv);
  if (opt.help) {
    std::cout << kHelp;
    return kOk;
  }
  // Validate cheap things first so mistakes cost no model load.
  ValidatePackage(opt.package);
  std::vector<at::Tensor> inputs = LoadTensors(opt.input, "input file");
  for (auto& t : inputs) t = t.contiguous();
  if (!opt.expect.empty()) LoadTensors(opt.expect, "expected-output file");

  LoadOpLibraries(opt.ops);
  // Enables the shape/dtype/stride checks compiled into every AOTI model;
  // without them a bad input is undefined behaviour inside generated code.
  ::setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 0);
  MakePrivateTmpdir();

  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        opt.package, "model", /*run_single_threaded=*/false, static_cast<size_t>(opt.runners),
        /*device_index=*/-1);
  } catch (const std::exception& e) {
    std::string msg = ErrorText(e);
    bool ops = msg.find("Couldn't resolve") != std::string::npos ||
               msg.find("Could not find schema") != std::string::npos ||
               msg.find("Unknown builtin op") != std::string::npos;
    if (!ops) Fail(kPackageCorrupt, "cannot load package " + opt.package + ": " + msg);
    // torch's "Couldn't resolve type" text puts the type name after the '?'.
    auto q = msg.rfind('?');
    std::string what = q != std::string::npos && q + 1 < msg.size() ? msg.substr(q + 1) : msg;
    Fail(kOpsLibrary, "the op libraries do not provide " + what + ", which the package needs");
  }
  // The model .so is mapped and its constants are loaded, so the extracted
  // files are no longer needed; removing them now means even a crash later
  // leaves nothing behind.
  RemoveTmpdir();

  auto metadata = loader->get_metadata();
  ValidateInputs(inputs, metadata);
  // Input files hold CPU tensors; a CUDA package needs them on its device.
  if (auto it = metadata.find("AOTI_DEVICE_KEY"); it != metadata.end() && it->second != "cpu") {
    try {
      c10::Device device(it->second);
      for (auto& t : inputs) t = t.to(device);
    } catch (const std::exception& e) {
      Fail(kOther,
           "cannot move inputs to the package's device " + it->second + ": " + ErrorText(e));
    }
  }

  std::vector<double> latencies;
  if (opt.bench > 0) {
    // Warm-up: first runs pay for lazy initialisation (thread pools, caches).
    RunConcurrently(*loader, inputs, opt.threads, 3, nullptr);
  }
  // Without --bench, one run per extra thread still exercises concurrency.
  long iters = opt.bench > 0 ? opt.bench : (opt.threads > 1 ? 1 : 0);
  auto outputs =
      RunConcurrently(*loader, inputs, opt.threads, iters, opt.bench > 0 ? &latencies : nullptr);
  if (opt.bench > 0) {
    std::printf("runs %zu threads %ld runners %ld p50 %.3f ms p99 %.3f ms\n", latencies.size(),
                opt.threads, opt.runners, Percentile(latencies, 50), Percentile(latencies, 99));
  }
  for (auto& t : outputs) t = t.cpu();
  WriteTensorsAtomically(opt.output, outputs);
  if (!opt.expect.empty()) {
    CompareExpected(outputs, opt.expect, opt.atol, opt.rtol);
    std::printf("outputs match %s\n", opt.expect.c_str());
  }
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  int code = kOther;
  try {
    code = Main(argc, argv);
  } catch (const Failure& f) {
    std::cerr << "loader: error: " << f.message << "\n";
    code = f.code;
  } catch (const std::exception& e) {
    std::cerr << "loader: error: " << ErrorText(e) << "\n";
    code = kOther;
  } catch (...) {
    std::cerr << "loader: error: unknown exception\n";
    code = kOther;
  }
  RemoveTmpdir();
  std::cout.flush();
  return code;
}
