#include "deploy/runtime/src/zip_directory.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndOfDirectorySize = 56;
constexpr size_t kDirectoryEntrySize = 46;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kMaxComment = 65535;
// A central directory holds names and small headers; a package's is a few kilobytes. The cap
// bounds what a hostile one costs to read.
constexpr uint64_t kMaxDirectoryBytes = 64ull << 20;

uint64_t read_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// `offset + length <= size`, without computing a sum that can wrap.
bool fits(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

struct Directory {
  uint64_t count;
  uint64_t size;
  uint64_t offset;
};

constexpr uint64_t kSaturated16 = 0xFFFF;
constexpr uint64_t kSaturated32 = 0xFFFFFFFF;

// A classic end-record field agrees with its zip64 value when it holds that value, or is
// saturated ("see the zip64 record").
bool agrees(uint64_t classic, uint64_t zip64, uint64_t saturated) {
  return classic == saturated || classic == zip64;
}

Directory find_directory(const ReadAt& read_at, uint64_t file_size) {
  const ZipError truncated("truncated or not a complete zip archive");
  if (file_size < kEndOfDirectorySize) throw truncated;
  // The end-of-central-directory record is the last 22 bytes plus a comment of up to 64 KiB.
  const uint64_t tail_len = std::min<uint64_t>(file_size, kEndOfDirectorySize + kMaxComment);
  const uint64_t tail_start = file_size - tail_len;
  std::vector<unsigned char> tail(tail_len);
  if (!read_at(tail_start, tail.data(), tail.size())) throw truncated;
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail_len - kEndOfDirectorySize); i >= 0; --i) {
    if (read_le(&tail[i], 4) == kEndOfDirectory) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw truncated;
  const unsigned char* end = &tail[eocd];
  const uint64_t disk = read_le(end + 4, 2);
  const uint64_t directory_disk = read_le(end + 6, 2);
  const uint64_t on_disk = read_le(end + 8, 2);
  Directory d{read_le(end + 10, 2), read_le(end + 12, 4), read_le(end + 16, 4)};
  if ((disk != 0 && disk != kSaturated16) ||
      (directory_disk != 0 && directory_disk != kSaturated16) ||
      !agrees(on_disk, d.count, kSaturated16)) {
    throw ZipError("multi-disk zip archives are not supported");
  }

  // Zip64: the locator sits just before the end record and points at the zip64 record. miniz
  // takes the zip64 values whenever the locator's signature is there, saturated fields or not,
  // so this reader does the same and refuses a classic record that says otherwise.
  const uint64_t eocd_at = tail_start + static_cast<uint64_t>(eocd);
  unsigned char locator[kZip64LocatorSize];
  const bool has_locator = eocd_at >= kZip64LocatorSize &&
                           read_at(eocd_at - kZip64LocatorSize, locator, sizeof(locator)) &&
                           read_le(locator, 4) == kZip64Locator;
  const bool saturated =
      d.count == kSaturated16 || d.size == kSaturated32 || d.offset == kSaturated32;
  if (saturated && !has_locator) throw ZipError("zip64 archive without a zip64 locator");
  if (has_locator) {
    const uint64_t record_at = read_le(locator + 8, 8);
    unsigned char record[kZip64EndOfDirectorySize];
    if (!fits(record_at, sizeof(record), eocd_at - kZip64LocatorSize) ||
        !read_at(record_at, record, sizeof(record)) || read_le(record, 4) != kZip64EndOfDirectory) {
      throw ZipError("zip64 locator points outside the archive");
    }
    if (read_le(locator + 16, 4) != 1 || read_le(record + 16, 4) != 0 ||
        read_le(record + 20, 4) != 0 || read_le(record + 24, 8) != read_le(record + 32, 8)) {
      throw ZipError("multi-disk zip archives are not supported");
    }
    const Directory zip64{read_le(record + 32, 8), read_le(record + 40, 8),
                          read_le(record + 48, 8)};
    if (!agrees(d.count, zip64.count, kSaturated16) || !agrees(d.size, zip64.size, kSaturated32) ||
        !agrees(d.offset, zip64.offset, kSaturated32)) {
      throw ZipError("zip64 end record disagrees with the classic end record (" +
                     std::to_string(zip64.count) + " vs " + std::to_string(d.count) +
                     " entries, directory at " + std::to_string(zip64.offset) + " vs " +
                     std::to_string(d.offset) + ")");
    }
    d = zip64;
  }
  if (!fits(d.offset, d.size, file_size)) throw ZipError("zip directory lies outside the file");
  if (d.size > kMaxDirectoryBytes) throw ZipError("zip directory is implausibly large");
  // Each entry takes at least 46 bytes, so a count the directory cannot hold is a lie.
  if (d.count > d.size / kDirectoryEntrySize) throw ZipError("zip directory count is wrong");
  return d;
}

// Sizes and the local header offset of 0xFFFFFFFF mean "see the zip64 extra field", which lists
// the 64-bit values in this order, each present only when its 32-bit field is saturated.
void apply_zip64_extra(const unsigned char* extra, size_t len, ZipEntry& e) {
  const bool need_uncompressed = e.uncompressed_size == kSaturated32;
  const bool need_compressed = e.compressed_size == kSaturated32;
  const bool need_offset = e.local_header_offset == kSaturated32;
  if (!need_uncompressed && !need_compressed && !need_offset) return;
  size_t pos = 0;
  while (len - pos >= 4) {
    const uint64_t id = read_le(extra + pos, 2);
    const uint64_t size = read_le(extra + pos + 2, 2);
    pos += 4;
    if (size > len - pos) break;
    if (id == kZip64ExtraId) {
      size_t at = 0;
      for (auto [needed, field] : {std::pair{need_uncompressed, &e.uncompressed_size},
                                   std::pair{need_compressed, &e.compressed_size},
                                   std::pair{need_offset, &e.local_header_offset}}) {
        if (!needed) continue;
        if (size - at < 8) throw ZipError("zip64 extra field too short");
        *field = read_le(extra + pos + at, 8);
        at += 8;
      }
      return;
    }
    pos += size;
  }
  throw ZipError("zip64 sizes without a zip64 extra field");
}

// Reads each entry's local header, which the extractor reads too: its name must be the
// directory's, and the entries' bytes (header, name, extra field, data) must lie one after the
// other before the directory, without overlapping.
void locate_data(const ReadAt& read_at, const Directory& d, std::vector<ZipEntry>& entries) {
  std::vector<ZipEntry*> by_offset;
  for (auto& e : entries) {
    unsigned char h[kLocalHeaderSize];
    if (!fits(e.local_header_offset, sizeof(h), d.offset) ||
        !read_at(e.local_header_offset, h, sizeof(h)) || read_le(h, 4) != kLocalHeader) {
      throw ZipError("entry " + single_quoted(e.name) +
                     " has no local header before the directory");
    }
    const uint64_t name_len = read_le(h + 26, 2);
    const uint64_t extra_len = read_le(h + 28, 2);
    std::string local_name(name_len, '\0');
    if (!fits(e.local_header_offset + sizeof(h), name_len + extra_len, d.offset) ||
        !read_at(e.local_header_offset + sizeof(h), local_name.data(), local_name.size()) ||
        local_name != e.name) {
      throw ZipError("entry " + single_quoted(e.name) + ": its local header names another file");
    }
    e.data_offset = e.local_header_offset + sizeof(h) + name_len + extra_len;
    if (!fits(e.data_offset, e.compressed_size, d.offset)) {
      throw ZipError("entry " + single_quoted(e.name) + " and the zip directory overlap");
    }
    by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->local_header_offset < b->local_header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& prev = *by_offset[i - 1];
    if (prev.data_offset + prev.compressed_size > by_offset[i]->local_header_offset) {
      throw ZipError("entries " + single_quoted(prev.name) + " and " +
                     single_quoted(by_offset[i]->name) + " overlap");
    }
  }
}

}  // namespace

std::vector<ZipEntry> read_zip_directory(const ReadAt& read_at, uint64_t file_size) {
  const Directory d = find_directory(read_at, file_size);
  std::vector<unsigned char> cd(d.size);
  if (!read_at(d.offset, cd.data(), cd.size())) throw ZipError("zip directory is truncated");
  std::vector<ZipEntry> entries;
  entries.reserve(d.count);
  size_t pos = 0;
  for (uint64_t i = 0; i < d.count; ++i) {
    if (!fits(pos, kDirectoryEntrySize, cd.size()) || read_le(&cd[pos], 4) != kDirectoryEntry) {
      throw ZipError("damaged zip directory");
    }
    const unsigned char* h = &cd[pos];
    const size_t name_len = read_le(h + 28, 2);
    const size_t extra_len = read_le(h + 30, 2);
    const size_t comment_len = read_le(h + 32, 2);
    const size_t body = kDirectoryEntrySize + name_len + extra_len + comment_len;
    if (!fits(pos, body, cd.size())) throw ZipError("damaged zip directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h + kDirectoryEntrySize), name_len);
    e.method = static_cast<uint16_t>(read_le(h + 10, 2));
    e.compressed_size = read_le(h + 20, 4);
    e.uncompressed_size = read_le(h + 24, 4);
    e.local_header_offset = read_le(h + 42, 4);
    apply_zip64_extra(h + kDirectoryEntrySize + name_len, extra_len, e);
    entries.push_back(std::move(e));
    pos += body;
  }
  std::vector<const std::string*> names;
  for (const auto& e : entries) names.push_back(&e.name);
  std::sort(names.begin(), names.end(), [](auto* a, auto* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    if (*names[i] == *names[i - 1])
      throw ZipError("entry " + single_quoted(*names[i]) + " appears twice");
  }
  locate_data(read_at, d, entries);
  return entries;
}

namespace {

bool escapes(const std::string& name) {
  if (name.empty() || name.front() == '/') return true;
  if (name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) return true;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

void check_zip_entries(const std::vector<ZipEntry>& entries, uint64_t max_unpacked_bytes) {
  uint64_t total = 0;
  for (const auto& e : entries) {
    if (escapes(e.name)) {
      throw ZipError("entry name " + single_quoted(e.name) +
                     " is empty, absolute, or has '..' or a backslash");
    }
    if (e.uncompressed_size > std::numeric_limits<uint64_t>::max() - total) {
      throw ZipError("entries declare more bytes than a 64-bit size holds");
    }
    total += e.uncompressed_size;
  }
  if (total > max_unpacked_bytes) {
    throw ZipError("entries unpack to " + std::to_string(total) + " bytes, over the " +
                   std::to_string(max_unpacked_bytes) + "-byte cap");
  }
}

}  // namespace my_ops::deploy::detail
