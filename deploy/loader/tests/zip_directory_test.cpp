#include "deploy/loader/zip_directory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace my_ops::loader {
namespace {

using Bytes = std::vector<unsigned char>;

void put(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

struct Entry {
  std::string name;
  uint64_t size;
};

// A stored (uncompressed) zip of `entries`, written as the format describes, independently of
// the reader under test. With zip64, the end record is saturated and the real values live in a
// zip64 record, and each entry's sizes in a zip64 extra field.
Bytes make_zip(const std::vector<Entry>& entries, bool zip64 = false) {
  Bytes file, cd;
  for (const auto& e : entries) {
    const uint64_t offset = file.size();
    put(file, 0x04034b50, 4);
    put(file, 20, 2);
    put(file, 0, 2);
    put(file, 0, 2);  // stored
    put(file, 0, 4);
    put(file, 0, 4);  // crc, unchecked here
    put(file, e.size, 4);
    put(file, e.size, 4);
    put(file, e.name.size(), 2);
    put(file, 0, 2);
    file.insert(file.end(), e.name.begin(), e.name.end());
    put(cd, 0x02014b50, 4);
    put(cd, 45, 2);
    put(cd, 45, 2);
    put(cd, 0, 2);
    put(cd, 0, 2);
    put(cd, 0, 4);
    put(cd, 0, 4);
    put(cd, zip64 ? 0xFFFFFFFF : e.size, 4);
    put(cd, zip64 ? 0xFFFFFFFF : e.size, 4);
    put(cd, e.name.size(), 2);
    put(cd, zip64 ? 20 : 0, 2);
    put(cd, 0, 2);
    put(cd, 0, 2);
    put(cd, 0, 2);
    put(cd, 0, 4);
    put(cd, offset, 4);
    cd.insert(cd.end(), e.name.begin(), e.name.end());
    if (zip64) {
      put(cd, 0x0001, 2);
      put(cd, 16, 2);
      put(cd, e.size, 8);  // uncompressed
      put(cd, e.size, 8);  // compressed
    }
  }
  const uint64_t cd_offset = file.size();
  file.insert(file.end(), cd.begin(), cd.end());
  if (zip64) {
    const uint64_t record_at = file.size();
    put(file, 0x06064b50, 4);
    put(file, 44, 8);
    put(file, 45, 2);
    put(file, 45, 2);
    put(file, 0, 4);
    put(file, 0, 4);
    put(file, entries.size(), 8);
    put(file, entries.size(), 8);
    put(file, cd.size(), 8);
    put(file, cd_offset, 8);
    put(file, 0x07064b50, 4);
    put(file, 0, 4);
    put(file, record_at, 8);
    put(file, 1, 4);
  }
  put(file, 0x06054b50, 4);
  put(file, 0, 2);
  put(file, 0, 2);
  put(file, zip64 ? 0xFFFF : entries.size(), 2);
  put(file, zip64 ? 0xFFFF : entries.size(), 2);
  put(file, zip64 ? 0xFFFFFFFF : cd.size(), 4);
  put(file, zip64 ? 0xFFFFFFFF : cd_offset, 4);
  put(file, 0, 2);
  return file;
}

std::vector<ZipEntry> read(const Bytes& zip) {
  return read_zip_directory(
      [&](uint64_t offset, void* buf, size_t n) {
        if (offset > zip.size() || n > zip.size() - offset) return false;
        std::memcpy(buf, zip.data() + offset, n);
        return true;
      },
      zip.size());
}

// Offset of the end-of-central-directory record, found by its signature from the end.
size_t eocd_of(const Bytes& zip) {
  for (size_t i = zip.size() - 22;; --i) {
    if (zip[i] == 0x50 && zip[i + 1] == 0x4b && zip[i + 2] == 0x05 && zip[i + 3] == 0x06) {
      return i;
    }
  }
}

void overwrite(Bytes& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + i] = static_cast<unsigned char>(v >> (8 * i));
}

TEST(ZipDirectory, ListsNamesAndSizes) {
  auto entries = read(make_zip({{"model/a.txt", 3}, {"model/data/b.so", 0}}));
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].name, "model/a.txt");
  EXPECT_EQ(entries[0].uncompressed_size, 3u);
  EXPECT_EQ(entries[1].name, "model/data/b.so");
}

TEST(ZipDirectory, ReadsZip64RecordsAndExtraFields) {
  auto entries = read(make_zip({{"model/big.bin", 7}}, /*zip64=*/true));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "model/big.bin");
  EXPECT_EQ(entries[0].uncompressed_size, 7u);
  EXPECT_EQ(entries[0].compressed_size, 7u);
}

TEST(ZipDirectory, RefusesAFileWithoutEndRecord) {
  Bytes junk(100, 'x');
  EXPECT_THROW(read(junk), ZipError);
  EXPECT_THROW(read(Bytes{}), ZipError);
}

TEST(ZipDirectory, RefusesADirectoryOffsetThatWrapsAround) {
  Bytes zip = make_zip({{"a", 1}}, /*zip64=*/true);
  // The zip64 record's offset field: a value that makes offset + size wrap to a small number.
  const size_t record = eocd_of(zip) - 20 - 56;
  overwrite(zip, record + 48, ~uint64_t{0} - 15, 8);
  try {
    read(zip);
    FAIL() << "accepted a wrapping offset";
  } catch (const ZipError& e) {
    EXPECT_NE(std::string(e.what()).find("outside the file"), std::string::npos) << e.what();
  }
}

TEST(ZipDirectory, RefusesAZip64LocatorPointingPastTheEnd) {
  Bytes zip = make_zip({{"a", 1}}, /*zip64=*/true);
  overwrite(zip, eocd_of(zip) - 20 + 8, ~uint64_t{0} - 10, 8);
  EXPECT_THROW(read(zip), ZipError);
}

TEST(ZipDirectory, RefusesACountTheDirectoryCannotHold) {
  Bytes zip = make_zip({{"a", 1}});
  overwrite(zip, eocd_of(zip) + 10, 0xFFFE, 2);
  EXPECT_THROW(read(zip), ZipError);
}

TEST(ZipDirectory, RefusesANameLengthPastTheDirectory) {
  Bytes zip = make_zip({{"a", 1}});
  const size_t cd = eocd_of(zip) - (46 + 1);
  overwrite(zip, cd + 28, 0xFFFF, 2);
  EXPECT_THROW(read(zip), ZipError);
}

TEST(ZipEntries, RefusesNamesThatEscape) {
  const std::vector<std::string> names = {
      "../x", "model/../../x", "model/..", "/etc/passwd", "model\\x", "", std::string("a\0b", 3)};
  for (const auto& name : names) {
    EXPECT_THROW(check_zip_entries({{name, 0, 0}}, 1 << 20), ZipError) << name;
  }
}

TEST(ZipEntries, AcceptsNamesThatOnlyLookOdd) {
  EXPECT_NO_THROW(check_zip_entries(
      {{"model/..a", 0, 0}, {"model/b..", 0, 0}, {"model/./c", 0, 0}, {"...", 0, 0}}, 1 << 20));
}

TEST(ZipEntries, CapsTheTotalUnpackedSize) {
  EXPECT_NO_THROW(check_zip_entries({{"a", 0, 600}, {"b", 0, 424}}, 1024));
  EXPECT_THROW(check_zip_entries({{"a", 0, 600}, {"b", 0, 425}}, 1024), ZipError);
  // Sizes whose sum wraps a 64-bit integer must not pass as small.
  const uint64_t half = uint64_t{1} << 63;
  EXPECT_THROW(check_zip_entries({{"a", 0, half}, {"b", 0, half}, {"c", 0, 1}}, 1024), ZipError);
}

}  // namespace
}  // namespace my_ops::loader
