#include "deploy/loader/pickle_scan.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace my_ops::loader {
namespace {

// A string literal's bytes, NULs included.
template <size_t N>
std::string bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

void scan(const std::string& p, int64_t cap = kMaxPickleContainers) {
  scan_pickle(reinterpret_cast<const unsigned char*>(p.data()), p.size(), cap);
}

// Python's pickle.dumps((1, "ab"), protocol=2).
const std::string kTuple = bytes(
    "\x80\x02K\x01X\x02\x00\x00\x00"
    "abq\x00"
    "\x86q\x01.");

TEST(PickleScan, AcceptsWhatPickleWrites) { EXPECT_NO_THROW(scan(kTuple)); }

TEST(PickleScan, RefusesATruncatedPickle) {
  for (size_t n = 0; n < kTuple.size(); ++n) {
    EXPECT_THROW(scan(kTuple.substr(0, n)), std::runtime_error) << n;
  }
}

TEST(PickleScan, RefusesALengthPastTheEnd) {
  // BINUNICODE claiming 2^32-1 bytes.
  EXPECT_THROW(scan(bytes("\x80\x02X\xff\xff\xff\xff"
                          "ab.")),
               std::runtime_error);
}

TEST(PickleScan, RefusesOpcodesTorchSaveDoesNotWrite) {
  // 'i' (INST) and 'S' (STRING) are protocol-0 opcodes torch.save never emits.
  EXPECT_THROW(scan("\x80\x02i"), std::runtime_error);
  EXPECT_THROW(scan("S'x'\n."), std::runtime_error);
}

TEST(PickleScan, CountsContainersAgainstTheCap) {
  std::string deep = "\x80\x02";
  // ((((),),),...): an empty tuple holds nothing, so only the ten TUPLE1s nest.
  deep += ")";
  for (int i = 0; i < 10; ++i) deep += "\x85";
  deep += ".";
  EXPECT_NO_THROW(scan(deep, 10));
  EXPECT_THROW(scan(deep, 9), std::runtime_error);
}

}  // namespace
}  // namespace my_ops::loader
