#include "deploy/loader/pickle_scan.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace my_ops::loader {

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
        if (++containers > max_containers) {
          throw std::runtime_error("pickle nests or holds more than " +
                                   std::to_string(max_containers) + " containers");
        }
        break;
      case 0x80:  // PROTO
      case 'K':   // BININT1
      case 'q':   // BINPUT
      case 'h':   // BINGET
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

}  // namespace my_ops::loader
