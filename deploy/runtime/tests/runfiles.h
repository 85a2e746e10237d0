#pragma once

// The runtime tests' paths to their data: the files Bazel's $(rootpath) and $(rootpaths) put in
// the environment, resolved to the files themselves, since the API follows no symbolic link.

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace my_ops::deploy::testing {

// The file a runfile's symbolic link points to.
inline std::string runfile(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) {
    ADD_FAILURE() << "no runfile " << path;
    return path;
  }
  std::string resolved = real;
  std::free(real);
  return resolved;
}

// The file `name` of the target whose files the environment variable `variable` lists.
inline std::string file_of(const char* variable, const std::string& name) {
  const char* value = std::getenv(variable);
  if (value == nullptr) {
    ADD_FAILURE() << "$" << variable << " is not set";
    return "";
  }
  std::istringstream paths(value);
  std::string path;
  while (paths >> path) {
    if (path.size() > name.size() &&
        path.compare(path.size() - name.size() - 1, name.size() + 1, "/" + name) == 0) {
      return runfile(path);
    }
  }
  ADD_FAILURE() << name << " is not in $" << variable;
  return "";
}

}  // namespace my_ops::deploy::testing
