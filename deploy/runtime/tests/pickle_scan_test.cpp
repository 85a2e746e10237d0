#include "deploy/runtime/src/pickle_scan.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace my_ops::deploy::detail {
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

std::string refusal(const std::string& p);  // defined below

TEST(PickleScan, RefusesOpcodesTorchSaveDoesNotWrite) {
  // 'i' (INST) and 'S' (STRING) are protocol-0 opcodes torch.save never emits. Each pickle is
  // complete, operands and STOP included, so only the opcode itself can be what is refused.
  const std::string inst = bytes("\x80\x02(i__main__\nC\n.");  // MARK, INST __main__ C
  const std::string str = bytes("\x80\x02S'x'\n.");
  EXPECT_THROW(scan(inst), std::runtime_error);
  EXPECT_THROW(scan(str), std::runtime_error);
  EXPECT_EQ(refusal(inst), "pickle opcode 0x69 at byte 3 is not one torch.save writes");
  EXPECT_EQ(refusal(str), "pickle opcode 0x53 at byte 2 is not one torch.save writes");
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

// The message scan() throws, or "" when it accepts.
std::string refusal(const std::string& p) {
  try {
    scan(p);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(PickleScan, RefusesProtocolsLibTorchCannotRead) {
  // LibTorch's unpickler reads protocol 2 only; torch.save(..., pickle_protocol=4) writes 4.
  for (char protocol : {'\x00', '\x01', '\x03', '\x04', '\x05'}) {
    const std::string pickle = std::string("\x80") + protocol + "K\x01.";
    EXPECT_NE(
        refusal(pickle).find("pickle protocol " + std::to_string(protocol) + " is not supported"),
        std::string::npos)
        << refusal(pickle);
  }
  EXPECT_EQ(refusal("\x80\x02K\x01."), "");
}

TEST(PickleScan, TakesOnlyTheGlobalsOfADenseTensor) {
  EXPECT_EQ(refusal("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v2\nctorch\nFloatStorage\n"
                    "ctorch\nBFloat16Storage\nccollections\nOrderedDict\n."),
            "");
  // Quantized and sparse tensors are built (reading their storages) while they are unpickled.
  for (const char* global :
       {"torch._utils\n_rebuild_qtensor", "torch._utils\n_rebuild_sparse_tensor", "torch\ndevice",
        "builtins\neval", "torch\nStorage", "torch\nFloat Storage"}) {
    const std::string pickle = std::string(
                                   "\x80\x02"
                                   "c") +
                               global + "\n.";
    EXPECT_NE(refusal(pickle).find("which is not part of a dense tensor"), std::string::npos)
        << global << ": " << refusal(pickle);
  }
  // STACK_GLOBAL (protocol 4) takes its names from the stack, where this scan cannot see them.
  EXPECT_NE(refusal("\x80\x02\x93.").find("pickle opcode 0x93 at byte 2"), std::string::npos)
      << refusal("\x80\x02\x93.");
}

TEST(PickleScan, SaysTheContainerCapIsALimit) {
  std::string many = "\x80\x02";
  for (int i = 0; i < 5; ++i) many += ")\x85";
  many += ".";
  try {
    scan(many, 4);
    FAIL() << "accepted more containers than the cap";
  } catch (const PickleLimitError& e) {
    EXPECT_NE(std::string(e.what()).find("holds more tensors than this loader reads"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace my_ops::deploy::detail
