// Standalone runtime for AOTInductor packages that use the my_ops library.
//
// Links only against LibTorch (no libpython), so it runs on edge hosts that
// have the LibTorch shared libraries but no Python. See kHelp for the command
// line contract and exit codes.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sodium.h>
#include <sys/stat.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/version.h>
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
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
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
  kIntegrity = 10,
};

constexpr const char* kHelp =
    R"(usage: loader [--ops LIB.so]... --package MODEL.pt2 --input IN.pt --output OUT.pt
              [--manifest MANIFEST.json] [--public-key KEY] [--no-verify]
              [--expect EXPECTED.pt [--atol A] [--rtol R] [--exact]]
              [--bench N | --runs N] [--threads T] [--runners R]

Runs an AOTInductor package (made by deploy/export.py) on inputs from a
torch.save file and writes the outputs with torch.save. No Python needed.

  --ops LIB.so      custom-op library to load before the package; repeatable.
                    Default: libmy_ops.so in the loader's own directory.
  --package FILE    AOTInductor package (.pt2).
  --input FILE      torch.save file holding a tensor or a tuple/list of tensors.
  --output FILE     written with torch.save as a tuple of tensors; created
                    atomically (FILE.tmp, then rename), never left partial.
  --manifest FILE   the package's manifest (default: manifest.json beside the
                    package). Before anything is loaded, the package and every
                    op library must match its sha256 sums, its torch version
                    must be this loader's, and this CPU must have the
                    instruction set it records; exit 10 otherwise.
  --public-key KEY  also require a valid Ed25519 signature of the manifest:
                    manifest.sig beside it (the manifest's name, .json -> .sig).
                    KEY: a PEM public key (export --generate-key writes one)
                    or the raw 32 bytes.
  --no-verify       skip the manifest check (prints a warning): runs code
                    that nobody vouched for.
  --expect FILE     compare outputs with this torch.save file (allclose);
                    exit 9 when they differ.
  --atol A, --rtol R  tolerances for --expect (default 1e-4, 1e-4).
  --exact           --expect must match bit for bit instead.
  --bench N         after a warm-up, time N runs per thread; print p50 and p99.
  --runs N          N runs in all, shared by the threads; print the wall time.
  --threads T       run from T threads at once (default 1); every run's
                    outputs must be bit-identical to the first run's.
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
  10  package integrity: manifest missing, malformed or badly signed, or the
      package, an op library, the torch version or the CPU does not match it
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
  std::string manifest;
  std::string public_key;
  bool verify = true;
  bool exact = false;
  double atol = 1e-4;
  double rtol = 1e-4;
  long bench = 0;
  long runs = 0;
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
    } else if (a == "--manifest") {
      o.manifest = next();
    } else if (a == "--public-key") {
      o.public_key = next();
    } else if (a == "--no-verify" && !inline_value) {
      o.verify = false;
    } else if (a == "--exact" && !inline_value) {
      o.exact = true;
    } else if (a == "--atol") {
      o.atol = ParseTolerance(a, next());
    } else if (a == "--rtol") {
      o.rtol = ParseTolerance(a, next());
    } else if (a == "--bench") {
      o.bench = ParseCount(a, next(), 1);
    } else if (a == "--runs") {
      o.runs = ParseCount(a, next(), 1);
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
  if (o.bench > 0 && o.runs > 0) Fail(kUsage, "--bench and --runs exclude each other");
  if (o.exact && o.expect.empty()) Fail(kUsage, "--exact needs --expect");
  if (!o.verify && (!o.manifest.empty() || !o.public_key.empty())) {
    Fail(kUsage, "--no-verify contradicts --manifest and --public-key");
  }
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

std::vector<std::string> OpLibraryPaths(const std::vector<std::string>& given) {
  if (!given.empty()) return given;
  return {ExeDir() + "/libmy_ops.so"};
}

void RequireOpLibrary(const std::string& lib) {
  struct stat st{};
  if (::stat(lib.c_str(), &st) != 0) {
    Fail(kOpsLibrary, "op library not found: " + lib + " (pass --ops LIB.so)");
  }
}

void LoadOpLibraries(const std::vector<std::string>& libs) {
  for (const auto& lib : libs) {
    RequireOpLibrary(lib);
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
// Package integrity: manifest.json, written by export.py beside model.pt2.
//
// A package and an op library are native code that this process will run,
// so they are checked against the manifest before either is loaded: sha256
// of each file, the torch version they were built with, and the CPU
// instruction set the package was compiled for. With --public-key the
// manifest itself must carry a valid Ed25519 signature (manifest.sig).

constexpr const char* kManifestFormat = "my_ops.manifest/1";
// Manifests are a few hundred bytes; the cap keeps a hostile file from
// costing more than a read.
constexpr size_t kMaxManifestBytes = 1 << 20;

// Keeps attacker-controlled text in an error line short and printable.
std::string Printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return s.size() > max ? out + "..." : out;
}

std::string Quoted(const std::string& s) { return "'" + Printable(s, 64) + "'"; }

using Json = nlohmann::json;

// A manifest is three levels and a few dozen values deep. nlohmann parses
// without recursion, but copying or printing a value (and, in old versions,
// freeing one) recurses once per level: the caps keep a hostile manifest
// well clear of that, and bound what it costs.
constexpr int kMaxJsonDepth = 16;
constexpr int kMaxJsonValues = 4096;

// Parses exactly one JSON value, stricter than nlohmann alone; throws
// std::runtime_error with a short, printable reason.
Json ParseJson(const std::string& text) {
  // nlohmann takes a NUL as the end of the input, which would accept any
  // bytes after one; JSON text can hold none.
  if (auto nul = text.find('\0'); nul != std::string::npos) {
    throw std::runtime_error("NUL byte at byte " + std::to_string(nul));
  }
  int values = 0;
  // Member names of each open object. nlohmann keeps the last of duplicate
  // members, other readers the first: such a manifest says two things.
  std::vector<std::set<std::string>> names;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using Event = Json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start || event == Event::value) {
      if (depth > kMaxJsonDepth) throw std::runtime_error("nested too deeply");
      if (++values > kMaxJsonValues) {
        throw std::runtime_error("more than " + std::to_string(kMaxJsonValues) + " values");
      }
    }
    if (event == Event::object_start) names.emplace_back();
    if (event == Event::object_end) names.pop_back();
    if (event == Event::key) {
      const auto& name = parsed.get_ref<const std::string&>();
      if (!names.back().insert(name).second) {
        throw std::runtime_error("duplicate member " + Quoted(name));
      }
    }
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::exception& e) {
    // Drops the "[json.exception.parse_error.101] " prefix. The rest quotes
    // the offending token, which can be long and is not always printable.
    std::string_view what = e.what();
    auto bracket = what.find("] ");
    if (bracket != std::string_view::npos) what.remove_prefix(bracket + 2);
    throw std::runtime_error(Printable(what, 200));
  }
}

// Reads a whole small file; nullopt when it does not exist. Other errors and
// files over `cap` bytes fail with kIntegrity, naming `what`.
std::optional<std::string> ReadSmallFile(const std::string& path, const char* what, size_t cap) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    Fail(kIntegrity, std::string("cannot read ") + what + " " + path + ": " + std::strerror(errno));
  }
  std::string data;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      Fail(kIntegrity, std::string("cannot read ") + what + " " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > cap) {
      ::close(fd);
      Fail(kIntegrity, std::string(what) + " " + path + " is too large (over " +
                           std::to_string(cap) + " bytes)");
    }
  }
  ::close(fd);
  return data;
}

std::string Hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 15]);
  }
  return out;
}

// Hex SHA-256 of a file, read in chunks (packages can be gigabytes).
std::string Sha256File(const std::string& path, int missing_code, const std::string& what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    Fail(errno == ENOENT ? missing_code : kIntegrity,
         "cannot read " + what + " " + path + ": " + std::strerror(errno));
  }
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  std::vector<unsigned char> buf(1 << 20);
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      Fail(kIntegrity, "cannot read " + what + " " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    crypto_hash_sha256_update(&state, buf.data(), static_cast<unsigned long long>(n));
  }
  ::close(fd);
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  return Hex(digest, sizeof(digest));
}

std::string DirName(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "manifest.json" -> "manifest.sig", as export.py names them.
std::string SignaturePath(const std::string& manifest) {
  const std::string ext = ".json";
  bool has_ext = manifest.size() > ext.size() &&
                 manifest.compare(manifest.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? manifest.substr(0, manifest.size() - ext.size()) : manifest) + ".sig";
}

// An Ed25519 public key: the raw 32 bytes, or PEM SubjectPublicKeyInfo (what
// `openssl pkey -pubout` and export --generate-key write), whose DER is a
// fixed 12-byte prefix followed by the key.
std::vector<unsigned char> ReadPublicKey(const std::string& path) {
  auto data = ReadSmallFile(path, "public key", 4096);
  if (!data) Fail(kIntegrity, "public key not found: " + path);
  if (data->size() == crypto_sign_PUBLICKEYBYTES) return {data->begin(), data->end()};
  const std::string begin = "-----BEGIN PUBLIC KEY-----";
  const std::string end = "-----END PUBLIC KEY-----";
  auto b = data->find(begin);
  auto e = data->find(end);
  const std::string bad =
      "public key " + path + " is neither a PEM Ed25519 public key nor 32 raw bytes";
  if (b == std::string::npos || e == std::string::npos || e < b) Fail(kIntegrity, bad);
  std::string b64 = data->substr(b + begin.size(), e - b - begin.size());
  static const unsigned char kPrefix[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03,
                                          0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
  unsigned char der[64];
  size_t der_len = 0;
  if (sodium_base642bin(der, sizeof(der), b64.data(), b64.size(), " \t\r\n", &der_len, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      der_len != sizeof(kPrefix) + crypto_sign_PUBLICKEYBYTES ||
      std::memcmp(der, kPrefix, sizeof(kPrefix)) != 0) {
    Fail(kIntegrity, bad);
  }
  return {der + sizeof(kPrefix), der + der_len};
}

// The instruction sets a manifest may name; each is checked on this CPU.
struct CpuFeature {
  const char* name;
  bool (*supported)();
};

#define MY_OPS_CPU_FEATURE(n) {n, [] { return __builtin_cpu_supports(n) != 0; }}
const CpuFeature kCpuFeatures[] = {
    MY_OPS_CPU_FEATURE("x86-64-v2"),
    MY_OPS_CPU_FEATURE("x86-64-v3"),
    MY_OPS_CPU_FEATURE("x86-64-v4"),
    MY_OPS_CPU_FEATURE("sse3"),
    MY_OPS_CPU_FEATURE("ssse3"),
    MY_OPS_CPU_FEATURE("sse4.1"),
    MY_OPS_CPU_FEATURE("sse4.2"),
    MY_OPS_CPU_FEATURE("popcnt"),
    MY_OPS_CPU_FEATURE("avx"),
    MY_OPS_CPU_FEATURE("avx2"),
    MY_OPS_CPU_FEATURE("fma"),
    MY_OPS_CPU_FEATURE("f16c"),
    MY_OPS_CPU_FEATURE("bmi"),
    MY_OPS_CPU_FEATURE("bmi2"),
    MY_OPS_CPU_FEATURE("lzcnt"),
    MY_OPS_CPU_FEATURE("movbe"),
    MY_OPS_CPU_FEATURE("avx512f"),
    MY_OPS_CPU_FEATURE("avx512bw"),
    MY_OPS_CPU_FEATURE("avx512cd"),
    MY_OPS_CPU_FEATURE("avx512dq"),
    MY_OPS_CPU_FEATURE("avx512vl"),
    MY_OPS_CPU_FEATURE("avx512vnni"),
    MY_OPS_CPU_FEATURE("avx512bf16"),
    MY_OPS_CPU_FEATURE("avx512fp16"),
    MY_OPS_CPU_FEATURE("avx512ifma"),
    MY_OPS_CPU_FEATURE("avx512vbmi"),
    MY_OPS_CPU_FEATURE("avx512vbmi2"),
    MY_OPS_CPU_FEATURE("avx512bitalg"),
    MY_OPS_CPU_FEATURE("avx512vpopcntdq"),
    MY_OPS_CPU_FEATURE("avxvnni"),
    MY_OPS_CPU_FEATURE("gfni"),
    MY_OPS_CPU_FEATURE("vaes"),
    MY_OPS_CPU_FEATURE("vpclmulqdq"),
    MY_OPS_CPU_FEATURE("amx-tile"),
    MY_OPS_CPU_FEATURE("amx-int8"),
    MY_OPS_CPU_FEATURE("amx-bf16"),
};
#undef MY_OPS_CPU_FEATURE

// nullopt: this loader cannot check `name`.
std::optional<bool> CpuSupports(const std::string& name) {
  for (const auto& f : kCpuFeatures) {
    if (name == f.name) return f.supported();
  }
  return std::nullopt;
}

bool IsSha256Hex(const std::string& s) {
  return s.size() == 2 * crypto_hash_sha256_BYTES && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

struct FileDigest {
  std::string file;
  std::string sha256;
};

struct Manifest {
  FileDigest package;
  std::vector<FileDigest> op_libraries;
  std::string torch_version;
  std::string isa;
  std::vector<std::string> cpu_features;
};

Manifest ParseManifest(const std::string& path, const std::string& text) {
  const std::string where = "manifest " + path + " is malformed: ";
  Json root;
  try {
    root = ParseJson(text);
  } catch (const std::runtime_error& e) {
    Fail(kIntegrity, where + e.what());
  }
  if (!root.is_object()) Fail(kIntegrity, where + "not a JSON object");
  auto string_member = [&](const Json& obj, const char* key, const std::string& ctx) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string()) {
      Fail(kIntegrity, where + ctx + "'" + key + "' must be a string");
    }
    return it->get<std::string>();
  };
  auto digest = [&](const Json& obj, const std::string& ctx) {
    if (!obj.is_object()) Fail(kIntegrity, where + ctx + "must be an object");
    FileDigest d{string_member(obj, "file", ctx), string_member(obj, "sha256", ctx)};
    if (!IsSha256Hex(d.sha256)) {
      Fail(kIntegrity, where + ctx + "'sha256' must be 64 lowercase hex digits");
    }
    return d;
  };
  std::string format = string_member(root, "format", "");
  if (format != kManifestFormat) {
    Fail(kIntegrity,
         where + "format " + Quoted(format) + ", this loader reads '" + kManifestFormat + "'");
  }
  Manifest m;
  auto package = root.find("package");
  if (package == root.end()) Fail(kIntegrity, where + "'package' is missing");
  m.package = digest(*package, "'package': ");
  auto libs = root.find("op_libraries");
  if (libs == root.end() || !libs->is_array()) {
    Fail(kIntegrity, where + "'op_libraries' must be an array");
  }
  for (const auto& lib : *libs) m.op_libraries.push_back(digest(lib, "'op_libraries': "));
  m.torch_version = string_member(root, "torch_version", "");
  m.isa = string_member(root, "isa", "");
  auto features = root.find("cpu_features");
  if (features == root.end() || !features->is_array()) {
    Fail(kIntegrity, where + "'cpu_features' must be an array");
  }
  for (const auto& f : *features) {
    if (!f.is_string()) Fail(kIntegrity, where + "'cpu_features' must hold strings");
    m.cpu_features.push_back(f.get<std::string>());
  }
  return m;
}

void VerifyManifest(const Options& opt, const std::vector<std::string>& libs) {
  if (!opt.verify) {
    std::cerr << "loader: WARNING: --no-verify: the package and op libraries are NOT checked "
                 "against a manifest; running unverified native code\n";
    return;
  }
  if (sodium_init() < 0) Fail(kOther, "cannot initialise libsodium");
  const bool by_default = opt.manifest.empty();
  const std::string path = by_default ? DirName(opt.package) + "/manifest.json" : opt.manifest;
  auto text = ReadSmallFile(path, "manifest", kMaxManifestBytes);
  if (!text) {
    Fail(kIntegrity, by_default ? "no manifest beside package " + opt.package + ": " + path +
                                      " not found (pass --manifest FILE, or --no-verify)"
                                : "manifest not found: " + path);
  }

  // The signature covers the manifest's exact bytes, so it is checked before
  // any of them are parsed.
  if (!opt.public_key.empty()) {
    auto key = ReadPublicKey(opt.public_key);
    const std::string sig_path = SignaturePath(path);
    auto sig = ReadSmallFile(sig_path, "signature", 4096);
    if (!sig) Fail(kIntegrity, "manifest " + path + " is not signed: " + sig_path + " not found");
    if (sig->size() != crypto_sign_BYTES ||
        crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(sig->data()),
                                    reinterpret_cast<const unsigned char*>(text->data()),
                                    text->size(), key.data()) != 0) {
      Fail(kIntegrity, "signature " + sig_path + " does not verify manifest " + path +
                           " with public key " + opt.public_key);
    }
  }

  Manifest m = ParseManifest(path, *text);

  // torch.__version__ carries a local build tag ("2.14.1+cu130"); the ABI
  // the package and op libraries were built against is the release.
  std::string release = m.torch_version.substr(0, m.torch_version.find('+'));
  if (release != TORCH_VERSION) {
    Fail(kIntegrity, "manifest " + path + ": the package was built with torch " +
                         Quoted(m.torch_version) + ", this loader runs torch " TORCH_VERSION);
  }

  __builtin_cpu_init();
  std::vector<std::string> needed = m.cpu_features;
  if (m.isa != "native") needed.insert(needed.begin(), m.isa);
  for (const auto& feature : needed) {
    auto ok = CpuSupports(feature);
    if (!ok) {
      Fail(kIntegrity, "manifest " + path + ": the package needs CPU feature " + Quoted(feature) +
                           ", which this loader cannot check");
    }
    if (!*ok) {
      Fail(kIntegrity, "manifest " + path + ": the package was built for " + Quoted(m.isa) +
                           " and needs " + feature + ", which this CPU lacks");
    }
  }

  std::string got = Sha256File(opt.package, kPackageMissing, "package");
  if (got != m.package.sha256) {
    Fail(kIntegrity, "package " + opt.package + " does not match manifest " + path + ": sha256 " +
                         got + ", manifest has " + m.package.sha256 + " for " +
                         Quoted(m.package.file));
  }
  for (const auto& lib : libs) {
    RequireOpLibrary(lib);
    std::string sha = Sha256File(lib, kOpsLibrary, "op library");
    bool listed = std::any_of(m.op_libraries.begin(), m.op_libraries.end(),
                              [&](const FileDigest& d) { return d.sha256 == sha; });
    if (listed) continue;
    auto same_name = std::find_if(m.op_libraries.begin(), m.op_libraries.end(),
                                  [&](const FileDigest& d) { return d.file == BaseName(lib); });
    if (same_name != m.op_libraries.end()) {
      Fail(kIntegrity, "op library " + lib + " does not match manifest " + path + ": sha256 " +
                           sha + ", manifest has " + same_name->sha256);
    }
    Fail(kIntegrity,
         "op library " + lib + " (sha256 " + sha + ") is not listed in manifest " + path);
  }
}

// ---------------------------------------------------------------------------
// torch.save files.

std::string ShapeString(const at::Tensor& t) {
  std::ostringstream s;
  s << t.sizes();
  return s.str();
}

std::vector<char> ReadFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    Fail(kInputUnreadable,
         std::string("cannot read ") + what + " " + path + ": " + std::strerror(errno));
  std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) Fail(kInputUnreadable, std::string("cannot read ") + what + " " + path);
  return data;
}

// torch.save records a tensor's sizes, strides and offset separately from
// its storage, and the unpickler takes them on trust; a file whose sizes
// reach past the storage would have every later read run off the end of
// the buffer. Also rejects what the model runner cannot take at all.
std::optional<std::string> TensorProblem(const at::Tensor& t) {
  if (t.layout() != at::kStrided) return "is not a dense (strided) tensor";
  if (!t.device().is_cpu()) return "is not a CPU tensor (" + t.device().str() + ")";
  if (!t.has_storage()) return "has no storage";
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  const int64_t offset = t.storage_offset();
  if (offset < 0) return "has a negative storage offset";
  int64_t last = offset;  // element index of the last element
  bool empty = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t size = t.sizes()[d];
    int64_t stride = t.strides()[d];
    if (size < 0 || stride < 0) return "has a negative size or stride";
    if (size == 0) empty = true;
    int64_t reach = 0;
    if (size > 0 && (__builtin_mul_overflow(size - 1, stride, &reach) ||
                     __builtin_add_overflow(last, reach, &last))) {
      return "declares sizes " + ShapeString(t) + " that overflow";
    }
  }
  int64_t numel = 1;
  for (int64_t size : t.sizes()) {
    if (__builtin_mul_overflow(numel, size, &numel)) {
      return "declares sizes " + ShapeString(t) + " that overflow";
    }
  }
  if (empty) return std::nullopt;
  int64_t end = 0;
  if (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, itemsize, &end) ||
      static_cast<uint64_t>(end) > t.storage().nbytes()) {
    return "declares sizes " + ShapeString(t) + " beyond its stored data (" +
           std::to_string(t.storage().nbytes()) + " bytes)";
  }
  return std::nullopt;
}

// The unpickler builds nested containers iteratively, but c10::IValue frees
// them recursively: a few kilobytes of pickle nesting tuples 20,000 deep
// overflow the stack when the value (or, on a parse error, the unpickler's
// stack) is destroyed. So the pickle is scanned first. Every level of
// nesting needs one op that makes a container, so counting those bounds
// the depth, memo references and later mutation included. torch.save writes
// about seven per tensor.
constexpr int64_t kMaxPickleContainers = 4096;

// Throws std::runtime_error when the pickle is cut short, uses an opcode
// that torch.save does not write, or makes too many containers.
void ScanPickle(const unsigned char* p, size_t n) {
  size_t pos = 0;
  int64_t containers = 0;
  auto need = [&](uint64_t k) {
    if (k > n - pos) throw std::runtime_error("pickle is truncated");
  };
  auto length = [&](int bytes) {
    need(static_cast<uint64_t>(bytes));
    uint64_t len = ReadLe(p + pos, bytes);
    pos += static_cast<size_t>(bytes);
    need(len);
    pos += static_cast<size_t>(len);
  };
  while (true) {
    need(1);
    const unsigned char op = p[pos++];
    switch (op) {
      case '.':  // STOP
        return;
      case '(':   // MARK
      case '0':   // POP
      case '1':   // POP_MARK
      case '2':   // DUP
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
      case ')':   // EMPTY_TUPLE
      case 'a':   // APPEND
      case 'e':   // APPENDS
      case 's':   // SETITEM
      case 'u':   // SETITEMS
      case 'b':   // BUILD
      case 'Q':   // BINPERSID
      case 0x90:  // ADDITEMS
      case 0x93:  // STACK_GLOBAL
      case 0x94:  // MEMOIZE
        break;
      case 't':   // TUPLE
      case 0x85:  // TUPLE1
      case 0x86:  // TUPLE2
      case 0x87:  // TUPLE3
      case 'l':   // LIST
      case 'd':   // DICT
      case ']':   // EMPTY_LIST
      case '}':   // EMPTY_DICT
      case 0x8f:  // EMPTY_SET
      case 0x91:  // FROZENSET
      case 'R':   // REDUCE
      case 0x81:  // NEWOBJ
      case 0x92:  // NEWOBJ_EX
        if (++containers > kMaxPickleContainers) {
          throw std::runtime_error("pickle nests or holds more than " +
                                   std::to_string(kMaxPickleContainers) + " containers");
        }
        break;
      case 0x80:  // PROTO
      case 'K':   // BININT1
      case 'q':   // BINPUT
      case 'h':   // BINGET
        need(1);
        pos += 1;
        break;
      case 'M':  // BININT2
        need(2);
        pos += 2;
        break;
      case 'J':  // BININT
      case 'r':  // LONG_BINPUT
      case 'j':  // LONG_BINGET
        need(4);
        pos += 4;
        break;
      case 'G':   // BINFLOAT
      case 0x95:  // FRAME
        need(8);
        pos += 8;
        break;
      case 0x8a:  // LONG1
      case 'C':   // SHORT_BINBYTES
      case 0x8c:  // SHORT_BINUNICODE
        length(1);
        break;
      case 0x8b:  // LONG4
      case 'X':   // BINUNICODE
      case 'B':   // BINBYTES
        length(4);
        break;
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        length(8);
        break;
      case 'c': {  // GLOBAL: "module\nname\n"
        for (int line = 0; line < 2; ++line) {
          const void* nl = std::memchr(p + pos, '\n', n - pos);
          if (nl == nullptr) throw std::runtime_error("pickle is truncated");
          pos = static_cast<size_t>(static_cast<const unsigned char*>(nl) - p) + 1;
        }
        break;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", op);
        throw std::runtime_error(std::string("pickle opcode ") + hex + " at byte " +
                                 std::to_string(pos - 1) + " is not one torch.save writes");
      }
    }
  }
}

// Discards LibTorch's warnings (quantized or deprecated dtypes, say) while
// an input file is parsed, so that errors stay one line.
class QuietWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

std::vector<at::Tensor> LoadTensors(const std::string& path, const char* what) {
  std::vector<char> data = ReadFile(path, what);
  c10::IValue value;
  try {
    QuietWarnings quiet;
    c10::WarningUtils::WarningHandlerGuard guard(&quiet);
    {
      caffe2::serialize::PyTorchStreamReader reader(
          std::make_shared<caffe2::serialize::MemoryReadAdapter>(data.data(), data.size()));
      auto [pickle, size] = reader.getRecord("data.pkl");
      ScanPickle(static_cast<const unsigned char*>(pickle.get()), size);
    }
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
    const at::Tensor& t = v.toTensor();
    if (auto problem = TensorProblem(t)) {
      Fail(kInputUnreadable, std::string(what) + " " + path + ": tensor " +
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

// Bit for bit, so that -0.0 vs 0.0 and differing NaN payloads count too.
bool BitIdentical(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) return false;
  auto bytes = [](const at::Tensor& t) { return t.contiguous().reshape({-1}).view(at::kByte); };
  return at::equal(bytes(a), bytes(b));
}

bool Identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!BitIdentical(a[i], b[i])) return false;
  }
  return true;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

// Makes one reference run, then `total` more shared out over `threads`
// threads, each checked bit for bit against the reference, which is
// returned. Per-call latencies (ms) go to `latencies` when non-null.
std::vector<at::Tensor> RunConcurrently(torch::inductor::AOTIModelPackageLoader& loader,
                                        const std::vector<at::Tensor>& inputs, long threads,
                                        long total, std::vector<double>* latencies) {
  std::vector<at::Tensor> reference = RunOnce(loader, inputs);
  std::vector<std::vector<double>> per_thread(threads);
  std::vector<std::optional<Failure>> errors(threads);
  std::atomic<bool> mismatch{false};
  auto worker = [&](long t) {
    const long iters = total / threads + (t < total % threads ? 1 : 0);
    try {
      for (long i = 0; i < iters && !mismatch; ++i) {
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
  if (mismatch) Fail(kOther, "outputs differ between runs (not bit-identical)");
  if (latencies) {
    for (auto& v : per_thread) latencies->insert(latencies->end(), v.begin(), v.end());
  }
  return reference;
}

void CompareExpected(const std::vector<at::Tensor>& got, const std::string& path, double atol,
                     double rtol, bool exact) {
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
    if (exact) {
      if (!BitIdentical(g, want[i])) {
        Fail(kExpectMismatch, "output " + std::to_string(i) + " is not bit-identical to " + path);
      }
      continue;
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
  const std::vector<std::string> libs = OpLibraryPaths(opt.ops);
  // Validate cheap things first so mistakes cost no model load, and verify
  // the package and op libraries before any of their code can run.
  ValidatePackage(opt.package);
  VerifyManifest(opt, libs);
  std::vector<at::Tensor> inputs = LoadTensors(opt.input, "input file");
  if (!opt.expect.empty()) LoadTensors(opt.expect, "expected-output file");

  LoadOpLibraries(libs);
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
  // Before contiguous(): an input of absurd declared size (zero strides over
  // a tiny storage) is rejected here instead of being materialised.
  ValidateInputs(inputs, metadata);
  for (auto& t : inputs) t = t.contiguous();
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
  std::vector<at::Tensor> outputs;
  if (opt.bench > 0) {
    // Warm-up: first runs pay for lazy initialisation (thread pools, caches).
    RunConcurrently(*loader, inputs, opt.threads, 3 * opt.threads, nullptr);
    outputs = RunConcurrently(*loader, inputs, opt.threads, opt.bench * opt.threads, &latencies);
    std::printf("runs %zu threads %ld runners %ld p50 %.3f ms p99 %.3f ms\n", latencies.size(),
                opt.threads, opt.runners, Percentile(latencies, 50), Percentile(latencies, 99));
  } else if (opt.runs > 0) {
    auto t0 = std::chrono::steady_clock::now();
    outputs = RunConcurrently(*loader, inputs, opt.threads, opt.runs - 1, nullptr);
    auto t1 = std::chrono::steady_clock::now();
    std::printf("runs %ld threads %ld runners %ld wall %.3f ms\n", opt.runs, opt.threads,
                opt.runners, std::chrono::duration<double, std::milli>(t1 - t0).count());
  } else {
    // Without --bench or --runs, one run per thread still exercises
    // concurrency.
    outputs =
        RunConcurrently(*loader, inputs, opt.threads, opt.threads > 1 ? opt.threads : 0, nullptr);
  }
  for (auto& t : outputs) t = t.cpu();
  WriteTensorsAtomically(opt.output, outputs);
  if (!opt.expect.empty()) {
    CompareExpected(outputs, opt.expect, opt.atol, opt.rtol, opt.exact);
    std::printf("outputs match %s%s\n", opt.expect.c_str(), opt.exact ? " bit for bit" : "");
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
