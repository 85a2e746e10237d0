#pragma once

// Exceptions from LibTorch and the standard library as the API reports them: one line, inside
// the one type the API throws (my_ops/error.h).

#include <exception>
#include <string>

#include "my_ops/error.h"

namespace my_ops::deploy::detail {

// One line of an exception's text, without c10's backtrace or miniz's boilerplate.
std::string error_text(const std::exception& e);

// The API's edge: runs `body`, turning any other exception that leaves it into an Error.
template <class Body>
decltype(auto) translated(Body&& body) {
  try {
    return body();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(kOther, error_text(e));
  } catch (...) {
    throw Error(kOther, "unknown exception");
  }
}

}  // namespace my_ops::deploy::detail
