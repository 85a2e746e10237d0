#pragma once

// Reads a zip archive's central directory and checks it before torch's own zip reader (miniz)
// or the package loader's extraction sees the file: names that would escape the extraction
// folder, and declared sizes that would fill the disk (zip bombs), are refused up front.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace my_ops::deploy::detail {

// A zip that cannot be read or is refused; what() is a short reason, without the file name.
class ZipError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ZipEntry {
  std::string name;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // where the entry's (compressed) bytes start in the file
  uint16_t method = 0;       // 0: stored, 8: deflated
};

// Reads exactly n bytes at offset into buf; false when the file has fewer.
using ReadAt = std::function<bool(uint64_t offset, void* buf, size_t n)>;

// The entries of the central directory of a zip of `file_size` bytes, read as miniz (torch's zip
// reader, which extracts the package) reads them: the zip64 record is followed whenever its
// locator is present. Throws ZipError for an archive that two readers could read differently: a
// zip64 record that disagrees with the classic end record, two entries of one name, a local
// header that names another file, or entries whose bytes overlap each other or the directory.
// Every offset and size is checked against the file before it is used, with no arithmetic that
// can wrap.
std::vector<ZipEntry> read_zip_directory(const ReadAt& read_at, uint64_t file_size);

// Throws ZipError for an entry name with a ".." component, a leading '/', a backslash, a NUL or
// no characters at all, or when the entries unpack to more than max_unpacked_bytes in all.
void check_zip_entries(const std::vector<ZipEntry>& entries, uint64_t max_unpacked_bytes);

}  // namespace my_ops::deploy::detail
