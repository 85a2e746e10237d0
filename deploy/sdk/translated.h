#pragma once

// The API's edge: every failure of the runtime underneath becomes an Error, the one type the
// API throws (my_ops/error.h).

#include <exception>

#include "deploy/loader/failure.h"
#include "deploy/loader/tensor_io.h"
#include "my_ops/error.h"

namespace my_ops::deploy::internal {

template <class Body>
decltype(auto) translated(Body&& body) {
  try {
    return body();
  } catch (const Error&) {
    throw;
  } catch (const loader::Failure& failure) {
    throw Error(static_cast<ExitCode>(failure.code), failure.message);
  } catch (const std::exception& e) {
    throw Error(kOther, loader::error_text(e));
  } catch (...) {
    throw Error(kOther, "unknown exception");
  }
}

}  // namespace my_ops::deploy::internal
