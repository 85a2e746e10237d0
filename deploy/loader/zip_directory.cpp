#include "deploy/loader/zip_directory.h"

#include <algorithm>
#include <limits>

namespace my_ops::loader {
namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr size_t kEndOfDirectorySize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndOfDirectorySize = 56;
constexpr size_t kDirectoryEntrySize = 46;
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
  Directory d{read_le(&tail[eocd + 10], 2), read_le(&tail[eocd + 12], 4),
              read_le(&tail[eocd + 16], 4)};
  if (d.count == 0xFFFF || d.size == 0xFFFFFFFF || d.offset == 0xFFFFFFFF) {
    // Zip64: the real values are in the zip64 record, which its locator, just before the
    // end-of-directory record, points at.
    const uint64_t eocd_at = tail_start + static_cast<uint64_t>(eocd);
    if (eocd_at < kZip64LocatorSize) throw truncated;
    unsigned char locator[kZip64LocatorSize];
    if (!read_at(eocd_at - kZip64LocatorSize, locator, sizeof(locator)) ||
        read_le(locator, 4) != kZip64Locator) {
      throw ZipError("zip64 archive without a zip64 locator");
    }
    const uint64_t record_at = read_le(locator + 8, 8);
    unsigned char record[kZip64EndOfDirectorySize];
    if (!fits(record_at, sizeof(record), file_size) ||
        !read_at(record_at, record, sizeof(record)) || read_le(record, 4) != kZip64EndOfDirectory) {
      throw ZipError("zip64 locator points outside the archive");
    }
    d = Directory{read_le(record + 32, 8), read_le(record + 40, 8), read_le(record + 48, 8)};
  }
  if (!fits(d.offset, d.size, file_size)) throw ZipError("zip directory lies outside the file");
  if (d.size > kMaxDirectoryBytes) throw ZipError("zip directory is implausibly large");
  // Each entry takes at least 46 bytes, so a count the directory cannot hold is a lie.
  if (d.count > d.size / kDirectoryEntrySize) throw ZipError("zip directory count is wrong");
  return d;
}

// Sizes of 0xFFFFFFFF mean "see the zip64 extra field", which lists the 64-bit values in this
// order, each present only when its 32-bit field is saturated.
void apply_zip64_extra(const unsigned char* extra, size_t len, ZipEntry& e, bool need_uncompressed,
                       bool need_compressed) {
  size_t pos = 0;
  while (len - pos >= 4) {
    const uint64_t id = read_le(extra + pos, 2);
    const uint64_t size = read_le(extra + pos + 2, 2);
    pos += 4;
    if (size > len - pos) break;
    if (id == kZip64ExtraId) {
      size_t at = 0;
      if (need_uncompressed) {
        if (size - at < 8) throw ZipError("zip64 extra field too short");
        e.uncompressed_size = read_le(extra + pos + at, 8);
        at += 8;
      }
      if (need_compressed) {
        if (size - at < 8) throw ZipError("zip64 extra field too short");
        e.compressed_size = read_le(extra + pos + at, 8);
      }
      return;
    }
    pos += size;
  }
  throw ZipError("zip64 sizes without a zip64 extra field");
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
    e.compressed_size = read_le(h + 20, 4);
    e.uncompressed_size = read_le(h + 24, 4);
    const bool need_uncompressed = e.uncompressed_size == 0xFFFFFFFF;
    const bool need_compressed = e.compressed_size == 0xFFFFFFFF;
    if (need_uncompressed || need_compressed) {
      apply_zip64_extra(h + kDirectoryEntrySize + name_len, extra_len, e, need_uncompressed,
                        need_compressed);
    }
    entries.push_back(std::move(e));
    pos += body;
  }
  return entries;
}

namespace {

std::string printable(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 80)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return "'" + out + (s.size() > 80 ? "...'" : "'");
}

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
      throw ZipError("entry name " + printable(e.name) +
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

}  // namespace my_ops::loader
