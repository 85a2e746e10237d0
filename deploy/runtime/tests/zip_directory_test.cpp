#include "deploy/runtime/src/zip_directory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace my_ops::deploy::detail {
namespace {

using Bytes = std::vector<unsigned char>;

void put(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<unsigned char>(v >> (8 * i)));
}

struct Entry {
  std::string name;
  uint64_t size;
};

// The records of a stored (uncompressed) zip, written as the format describes, independently of
// the reader under test.

// A local file header, then the entry's name and `size` bytes of data.
void put_local_entry(Bytes& b, const Entry& e) {
  put(b, 0x04034b50, 4);
  put(b, 20, 2);
  put(b, 0, 2);
  put(b, 0, 2);  // stored
  put(b, 0, 4);
  put(b, 0, 4);  // crc, unchecked here
  put(b, e.size, 4);
  put(b, e.size, 4);
  put(b, e.name.size(), 2);
  put(b, 0, 2);
  b.insert(b.end(), e.name.begin(), e.name.end());
  b.insert(b.end(), e.size, 'x');
}

// A central directory header for the entry whose local header is at `offset`. With zip64, its
// sizes are saturated and the real ones live in a zip64 extra field.
void put_central_entry(Bytes& b, const Entry& e, uint64_t offset, bool zip64) {
  put(b, 0x02014b50, 4);
  put(b, 45, 2);
  put(b, 45, 2);
  put(b, 0, 2);
  put(b, 0, 2);
  put(b, 0, 4);
  put(b, 0, 4);
  put(b, zip64 ? 0xFFFFFFFF : e.size, 4);
  put(b, zip64 ? 0xFFFFFFFF : e.size, 4);
  put(b, e.name.size(), 2);
  put(b, zip64 ? 20 : 0, 2);
  put(b, 0, 2);
  put(b, 0, 2);
  put(b, 0, 2);
  put(b, 0, 4);
  put(b, offset, 4);
  b.insert(b.end(), e.name.begin(), e.name.end());
  if (zip64) {
    put(b, 0x0001, 2);
    put(b, 16, 2);
    put(b, e.size, 8);  // uncompressed
    put(b, e.size, 8);  // compressed
  }
}

// A zip64 end record for a directory of `count` entries, then its locator.
void put_zip64_end(Bytes& b, uint64_t count, uint64_t cd_size, uint64_t cd_offset) {
  const uint64_t record_at = b.size();
  put(b, 0x06064b50, 4);
  put(b, 44, 8);
  put(b, 45, 2);
  put(b, 45, 2);
  put(b, 0, 4);
  put(b, 0, 4);
  put(b, count, 8);
  put(b, count, 8);
  put(b, cd_size, 8);
  put(b, cd_offset, 8);
  put(b, 0x07064b50, 4);
  put(b, 0, 4);
  put(b, record_at, 8);
  put(b, 1, 4);
}

// The classic end record; `saturated` leaves the real values to a zip64 record.
void put_end(Bytes& b, uint64_t count, uint64_t cd_size, uint64_t cd_offset, bool saturated) {
  put(b, 0x06054b50, 4);
  put(b, 0, 2);
  put(b, 0, 2);
  put(b, saturated ? 0xFFFF : count, 2);
  put(b, saturated ? 0xFFFF : count, 2);
  put(b, saturated ? 0xFFFFFFFF : cd_size, 4);
  put(b, saturated ? 0xFFFFFFFF : cd_offset, 4);
  put(b, 0, 2);
}

// A zip of `entries`. With zip64, the end record is saturated and the real values live in a
// zip64 record, and each entry's sizes in a zip64 extra field.
Bytes make_zip(const std::vector<Entry>& entries, bool zip64 = false) {
  Bytes file, cd;
  for (const auto& e : entries) {
    const uint64_t offset = file.size();
    put_local_entry(file, e);
    put_central_entry(cd, e, offset, zip64);
  }
  const uint64_t cd_offset = file.size();
  file.insert(file.end(), cd.begin(), cd.end());
  if (zip64) put_zip64_end(file, entries.size(), cd.size(), cd_offset);
  put_end(file, entries.size(), cd.size(), cd_offset, zip64);
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

// The message of the ZipError that reading `zip` throws, or "" when it reads.
std::string refusal(const Bytes& zip) {
  try {
    read(zip);
  } catch (const ZipError& e) {
    return e.what();
  }
  return "";
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

uint64_t read_le_bytes(const Bytes& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
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
  EXPECT_EQ(refusal(junk), "truncated or not a complete zip archive");
  EXPECT_EQ(refusal(Bytes{}), "truncated or not a complete zip archive");
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
  EXPECT_EQ(refusal(zip), "zip64 locator points outside the archive");
}

TEST(ZipDirectory, RefusesACountTheDirectoryCannotHold) {
  Bytes zip = make_zip({{"a", 1}});
  // Both counts, which must agree (one disk).
  overwrite(zip, eocd_of(zip) + 8, 0xFFFE, 2);
  overwrite(zip, eocd_of(zip) + 10, 0xFFFE, 2);
  EXPECT_EQ(refusal(zip), "zip directory count is wrong");
}

TEST(ZipDirectory, RefusesANameLengthPastTheDirectory) {
  Bytes zip = make_zip({{"a", 1}});
  const size_t cd = eocd_of(zip) - (46 + 1);
  overwrite(zip, cd + 28, 0xFFFF, 2);
  EXPECT_EQ(refusal(zip), "damaged zip directory");
}

// A zip whose classic end record points at a directory of `first`, and whose zip64 record (with
// its locator, and no saturated field in the classic record) points at a second directory of
// `first` plus `extra`, local header included. One reader of each record sees another archive.
Bytes make_two_directory_zip(const std::vector<Entry>& first, const Entry& extra) {
  Bytes zip = make_zip(first);
  const size_t eocd = eocd_of(zip);
  const uint64_t cd1_offset = read_le_bytes(zip, eocd + 16, 4);
  const uint64_t cd1_size = read_le_bytes(zip, eocd + 12, 4);
  Bytes cd1(zip.begin() + static_cast<long>(cd1_offset),
            zip.begin() + static_cast<long>(cd1_offset + cd1_size));
  zip.resize(eocd);
  const uint64_t extra_offset = zip.size();
  put_local_entry(zip, extra);
  const uint64_t cd2_offset = zip.size();
  zip.insert(zip.end(), cd1.begin(), cd1.end());
  put_central_entry(zip, extra, extra_offset, /*zip64=*/false);
  const uint64_t cd2_size = zip.size() - cd2_offset;
  put_zip64_end(zip, first.size() + 1, cd2_size, cd2_offset);
  put_end(zip, first.size(), cd1_size, cd1_offset, /*saturated=*/false);
  return zip;
}

TEST(ZipDirectory, RefusesAZip64RecordThatDisagreesWithTheClassicOne) {
  // miniz, which extracts the package, reads the zip64 record whenever its locator is there;
  // a check that reads the classic record only would pass the escaping entry.
  const Bytes zip = make_two_directory_zip(
      {{"model/a.txt", 3}}, {"model/data/aotinductor/model/../../../../ESCAPED.txt", 4});
  EXPECT_NE(refusal(zip).find("zip64 end record disagrees"), std::string::npos) << refusal(zip);
}

TEST(ZipDirectory, FollowsAZip64LocatorWithoutSaturatedFields) {
  // The classic record agrees with the zip64 one, so there is one archive: it is read.
  Bytes zip = make_zip({{"model/a.txt", 3}}, /*zip64=*/true);
  const size_t eocd = eocd_of(zip);
  const uint64_t cd_size = read_le_bytes(zip, eocd - 20 - 56 + 40, 8);
  const uint64_t cd_offset = read_le_bytes(zip, eocd - 20 - 56 + 48, 8);
  overwrite(zip, eocd + 8, 1, 2);
  overwrite(zip, eocd + 10, 1, 2);
  overwrite(zip, eocd + 12, cd_size, 4);
  overwrite(zip, eocd + 16, cd_offset, 4);
  ASSERT_EQ(refusal(zip), "");
  // ...and its locator is followed: a zip64 record that lies is refused.
  overwrite(zip, eocd - 20 + 8, zip.size() + 100, 8);
  EXPECT_NE(refusal(zip).find("zip64 locator points outside the archive"), std::string::npos)
      << refusal(zip);
}

TEST(ZipDirectory, RefusesTwoEntriesOfTheSameName) {
  // Which copy a reader takes is its own choice (miniz keeps a sorted index): the second
  // metadata file could replace the one that was checked.
  const Bytes zip = make_zip({{"model/a_metadata.json", 3}, {"model/a_metadata.json", 5}});
  EXPECT_NE(refusal(zip).find("'model/a_metadata.json' appears twice"), std::string::npos)
      << refusal(zip);
}

TEST(ZipDirectory, RefusesEntriesWhoseDataOverlap) {
  // The first entry's data, as the directory declares it, runs over the second's local header:
  // the same bytes would unpack twice (a zip bomb of overlapping entries).
  Bytes zip = make_zip({{"model/a.bin", 8}, {"model/b.bin", 8}});
  const size_t cd = read_le_bytes(zip, eocd_of(zip) + 16, 4);
  overwrite(zip, cd + 20, 100, 4);  // compressed size of the first entry
  overwrite(zip, cd + 24, 100, 4);
  EXPECT_NE(refusal(zip).find("overlap"), std::string::npos) << refusal(zip);
}

TEST(ZipDirectory, RefusesALocalHeaderThatNamesAnotherFile) {
  Bytes zip = make_zip({{"model/a.bin", 8}});
  zip[30 + 6] = 'X';  // the local header's copy of the name
  EXPECT_NE(refusal(zip).find("local header"), std::string::npos) << refusal(zip);
}

TEST(ZipDirectory, RefusesAnEntryWhoseDataRunsIntoTheDirectory) {
  Bytes zip = make_zip({{"model/a.bin", 8}});
  const size_t cd = read_le_bytes(zip, eocd_of(zip) + 16, 4);
  overwrite(zip, cd + 20, 9, 4);
  overwrite(zip, cd + 24, 9, 4);
  EXPECT_NE(refusal(zip).find("overlap"), std::string::npos) << refusal(zip);
}

// The message of the ZipError that check_zip_entries throws, or "".
std::string entries_refusal(const std::vector<ZipEntry>& entries, uint64_t cap) {
  try {
    check_zip_entries(entries, cap);
  } catch (const ZipError& e) {
    return e.what();
  }
  return "";
}

TEST(ZipEntries, RefusesNamesThatEscape) {
  const std::vector<std::string> names = {
      "../x", "model/../../x", "model/..", "/etc/passwd", "model\\x", "", std::string("a\0b", 3)};
  for (const auto& name : names) {
    EXPECT_NE(entries_refusal({{name, 0, 0}}, 1 << 20)
                  .find("is empty, absolute, or has '..' or a backslash"),
              std::string::npos)
        << name;
  }
}

TEST(ZipEntries, AcceptsNamesThatOnlyLookOdd) {
  EXPECT_NO_THROW(check_zip_entries(
      {{"model/..a", 0, 0}, {"model/b..", 0, 0}, {"model/./c", 0, 0}, {"...", 0, 0}}, 1 << 20));
}

TEST(ZipEntries, CapsTheTotalUnpackedSize) {
  EXPECT_NO_THROW(check_zip_entries({{"a", 0, 600}, {"b", 0, 424}}, 1024));
  EXPECT_EQ(entries_refusal({{"a", 0, 600}, {"b", 0, 425}}, 1024),
            "entries unpack to 1025 bytes, over the 1024-byte cap");
  // Sizes whose sum wraps a 64-bit integer must not pass as small.
  const uint64_t half = uint64_t{1} << 63;
  EXPECT_EQ(entries_refusal({{"a", 0, half}, {"b", 0, half}, {"c", 0, 1}}, 1024),
            "entries declare more bytes than a 64-bit size holds");
}

}  // namespace
}  // namespace my_ops::deploy::detail
