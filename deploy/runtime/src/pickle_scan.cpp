#include "deploy/runtime/src/pickle_scan.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {
namespace {

// What torch.save writes for a dense tensor: its rebuild function, its storage type and the
// (empty) backward hooks. The unpickler turns these into tensors without reading a storage's
// bytes; others (quantized and sparse tensors, classes) may read them while they are built.
bool is_tensor_global(std::string_view module, std::string_view name) {
  constexpr std::string_view kStorage = "Storage";
  if (module == "torch._utils") return name == "_rebuild_tensor_v2";
  if (module == "collections") return name == "OrderedDict";
  if (module != "torch" || name.size() <= kStorage.size()) return false;
  return name.substr(name.size() - kStorage.size()) == kStorage &&
         name.substr(0, name.size() - kStorage.size())
                 .find_first_not_of(
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") ==
             std::string_view::npos;
}

}  // namespace

void scan_pickle(const unsigned char* p, size_t n, int64_t max_containers) {
  size_t pos = 0;
  int64_t containers = 0;
  auto need = [&](uint64_t k) {
    if (k > n - pos) throw std::runtime_error("pickle is truncated");
  };
  auto skip = [&](uint64_t k) {
    need(k);
    pos += static_cast<size_t>(k);
  };
  auto skip_counted = [&](int bytes) {
    need(static_cast<uint64_t>(bytes));
    uint64_t len = 0;
    for (int i = bytes - 1; i >= 0; --i) len = (len << 8) | p[pos + i];
    pos += static_cast<size_t>(bytes);
    skip(len);
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
        if (++containers > max_containers) {
          throw PickleLimitError("holds more tensors than this loader reads (data.pkl makes over " +
                                 std::to_string(max_containers) + " containers, about " +
                                 std::to_string(max_containers / kPickleContainersPerTensor) +
                                 " tensors at most)");
        }
        break;
      case 0x80:  // PROTO
        need(1);
        if (p[pos] != 2) {
          throw std::runtime_error("pickle protocol " + std::to_string(p[pos]) +
                                   " is not supported: LibTorch reads protocol 2, torch.save's "
                                   "default (save with pickle_protocol=2)");
        }
        ++pos;
        break;
      case 'K':  // BININT1
      case 'q':  // BINPUT
      case 'h':  // BINGET
        skip(1);
        break;
      case 'M':  // BININT2
        skip(2);
        break;
      case 'J':  // BININT
      case 'r':  // LONG_BINPUT
      case 'j':  // LONG_BINGET
        skip(4);
        break;
      case 'G':   // BINFLOAT
      case 0x95:  // FRAME
        skip(8);
        break;
      case 0x8a:  // LONG1
      case 'C':   // SHORT_BINBYTES
      case 0x8c:  // SHORT_BINUNICODE
        skip_counted(1);
        break;
      case 0x8b:  // LONG4
      case 'X':   // BINUNICODE
      case 'B':   // BINBYTES
        skip_counted(4);
        break;
      case 0x8d:  // BINUNICODE8
      case 0x8e:  // BINBYTES8
        skip_counted(8);
        break;
      case 'c': {  // GLOBAL: "module\nname\n"
        std::string_view line[2];
        for (auto& l : line) {
          const void* nl = std::memchr(p + pos, '\n', n - pos);
          if (nl == nullptr) throw std::runtime_error("pickle is truncated");
          const size_t end = static_cast<size_t>(static_cast<const unsigned char*>(nl) - p);
          l = std::string_view(reinterpret_cast<const char*>(p) + pos, end - pos);
          pos = end + 1;
        }
        if (!is_tensor_global(line[0], line[1])) {
          throw std::runtime_error(
              "pickle names " + single_quoted(std::string(line[0]) + "." + std::string(line[1])) +
              ", which is not part of a dense tensor");
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

}  // namespace my_ops::deploy::detail
