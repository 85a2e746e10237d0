#include "deploy/runtime/src/error_text.h"

#include <c10/util/Exception.h>

namespace my_ops::deploy::detail {

std::string error_text(const std::exception& e) {
  auto* c10e = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10e ? c10e->what_without_backtrace() : e.what();
  std::string line = text.substr(0, text.find('\n'));
  if (line.empty()) return "unknown error";
  const size_t cut = line.find(". This is an internal miniz error");
  return cut == std::string::npos ? line : line.substr(0, cut);
}

}  // namespace my_ops::deploy::detail
