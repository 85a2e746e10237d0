#include "deploy/runtime/src/verify.h"

#include <torch/version.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/manifest.h"
#include "deploy/runtime/src/text.h"
#include "deploy/runtime/src/zip_directory.h"

namespace my_ops::deploy::detail {
namespace {

constexpr FileRole kManifestRole{"manifest", kIntegrity, kIntegrity};
constexpr FileRole kKeyRole{"public key", kIntegrity, kIntegrity};
constexpr FileRole kSignatureRole{"signature", kIntegrity, kIntegrity};

bool ends_with(const std::string& s, const char* suffix) {
  const size_t k = std::strlen(suffix);
  return s.size() > k && s.compare(s.size() - k, k, suffix) == 0;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + single_quoted(s);
  return out;
}

}  // namespace

std::optional<std::string> read_small(const std::string& path, const FileRole& role, size_t cap) {
  bool missing = false;
  UniqueFd fd = open_regular_file(path, role, &missing);
  if (missing) return std::nullopt;
  return read_all(fd.get(), path, role, cap);
}

void check_signature(const std::string& text, const std::string& what, const std::string& path,
                     const std::string& public_key) {
  const std::optional<std::string> key_text = read_small(public_key, kKeyRole, 4096);
  if (!key_text) fail(kIntegrity, "public key not found: " + public_key);
  std::vector<unsigned char> key;
  try {
    key = parse_public_key(*key_text);
  } catch (const ManifestError& e) {
    fail(kIntegrity, "public key " + public_key + " is " + e.what());
  }
  const std::string sig_path = signature_path(path);
  const std::optional<std::string> sig = read_small(sig_path, kSignatureRole, 4096);
  if (!sig) fail(kIntegrity, what + " " + path + " is not signed: " + sig_path + " not found");
  if (!signature_valid(text, *sig, key)) {
    fail(kIntegrity, "signature " + sig_path + " does not verify " + what + " " + path +
                         " with public key " + public_key);
  }
}

void check_package(const VerifiedCopy& package, uint64_t max_unpacked_bytes) {
  const int fd = package.fd.get();
  const std::string& path = package.source;
  char magic[4] = {0};
  if (!read_at(fd, 0, magic, sizeof(magic)) || std::memcmp(magic, "PK\x03\x04", 4) != 0) {
    fail(kPackageCorrupt, "package is not a zip archive: " + path);
  }
  std::vector<ZipEntry> entries;
  try {
    entries = read_zip_directory(
        [fd](uint64_t offset, void* buf, size_t n) { return read_at(fd, offset, buf, n); },
        package.size);
    check_zip_entries(entries, max_unpacked_bytes);
  } catch (const ZipError& e) {
    std::string hint =
        std::strstr(e.what(), "-byte cap") ? " (raise it with --max-unpacked-mib)" : "";
    fail(kPackageCorrupt, "package " + path + " refused: " + e.what() + hint);
  }
  // Entries are "<archive>/data/aotinductor/model/<hash>.so" (the compiled model) and its
  // metadata. Edge hosts have no compiler: a package that would be compiled on load (sources
  // only) is refused, and so are compile and link flags, which torch's package loader turns into
  // a shell command.
  for (const auto& e : entries) {
    if (ends_with(e.name, "_compile_flags.json") || ends_with(e.name, "_linker_flags.json")) {
      fail(kPackageCorrupt, "package " + path + " refused: entry " + single_quoted(e.name) +
                                " holds compiler flags; a package for this loader is compiled "
                                "already (export it without package_cpp_only)");
    }
  }
  bool has_model = std::any_of(entries.begin(), entries.end(), [](const ZipEntry& e) {
    return e.name.find("/data/aotinductor/model/") != std::string::npos && ends_with(e.name, ".so");
  });
  if (!has_model) {
    fail(kPackageCorrupt,
         "package has no compiled AOTInductor model named 'model' inside: " + path);
  }
}

Manifest verify_manifest(const ManifestCheck& opt, const VerifiedCopy& package,
                         const std::vector<VerifiedCopy>& libraries) {
  const bool by_default = opt.manifest.empty();
  const std::string path = by_default ? dir_name(package.source) + "/manifest.json" : opt.manifest;
  const std::optional<std::string> text = read_small(path, kManifestRole, kMaxManifestBytes);
  if (!text) {
    fail(kIntegrity, by_default ? "no manifest beside package " + package.source + ": " + path +
                                      " not found (pass --manifest FILE, or --no-verify)"
                                : "manifest not found: " + path);
  }

  // The signature covers the manifest's exact bytes, so it is checked before any are parsed.
  if (!opt.public_key.empty()) check_signature(*text, "manifest", path, opt.public_key);

  Manifest m;
  try {
    m = parse_manifest(*text);
  } catch (const ManifestError& e) {
    fail(kIntegrity, "manifest " + path + " is malformed: " + e.what());
  }

  // First: a package for another architecture fails every later check for that reason only.
  if (const std::string problem = target_problem(m); !problem.empty()) {
    fail(kIntegrity, "manifest " + path + ": " + problem);
  }

  // torch.__version__ carries a local build tag ("2.14.1+cu130"); the ABI the package and op
  // libraries were built against is the release.
  const std::string release = m.torch_version.substr(0, m.torch_version.find('+'));
  if (release != TORCH_VERSION) {
    fail(kIntegrity, "manifest " + path + ": the package was built with torch " +
                         single_quoted(m.torch_version) +
                         ", this loader runs torch " TORCH_VERSION);
  }

  const CpuCheck cpu = check_cpu(m);
  if (!cpu.unknown.empty()) {
    fail(kIntegrity, "manifest " + path + ": the package needs CPU feature " + join(cpu.unknown) +
                         ", which this loader cannot check");
  }
  if (!cpu.missing.empty()) {
    fail(kIntegrity, "manifest " + path + ": the package was built for " + single_quoted(m.isa) +
                         " and needs " + join(cpu.missing) + ", which this CPU lacks");
  }

  if (package.sha256 != m.package.sha256) {
    fail(kIntegrity, "package " + package.source + " does not match manifest " + path +
                         ": sha256 " + package.sha256 + ", manifest has " + m.package.sha256 +
                         " for " + single_quoted(m.package.file));
  }
  for (const auto& lib : libraries) {
    const auto& listed = m.op_libraries;
    if (std::any_of(listed.begin(), listed.end(),
                    [&](const FileDigest& d) { return d.sha256 == lib.sha256; })) {
      continue;
    }
    auto same_name = std::find_if(listed.begin(), listed.end(), [&](const FileDigest& d) {
      return d.file == base_name(lib.source);
    });
    if (same_name != listed.end()) {
      fail(kIntegrity, "op library " + lib.source + " does not match manifest " + path +
                           ": sha256 " + lib.sha256 + ", manifest has " + same_name->sha256);
    }
    fail(kIntegrity, "op library " + lib.source + " (sha256 " + lib.sha256 +
                         ") is not listed in manifest " + path);
  }
  return m;
}

}  // namespace my_ops::deploy::detail
