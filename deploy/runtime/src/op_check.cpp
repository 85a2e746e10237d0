#include "deploy/runtime/src/op_check.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>
#include <torch/custom_class.h>

#include "deploy/runtime/src/failure.h"
#include "deploy/runtime/src/text.h"

namespace my_ops::deploy::detail {
namespace {

// Registered schemas come from a library the manifest does not vouch for the text of: keep them
// to one printable line.
constexpr size_t kMaxShownSchema = 1000;

std::string looked_in(const std::vector<std::string>& op_libraries) {
  std::string out = "looked in ";
  for (size_t i = 0; i < op_libraries.size(); ++i) out += (i ? ", " : "") + op_libraries[i];
  return op_libraries.empty() ? "no op library given" : out;
}

std::string quoted(const std::string& schema) {
  return "'" + printable(schema, kMaxShownSchema) + "'";
}

// "ns::op" or "ns::op.overload", as the manifest names ops (the overload of "ns::op" is "").
c10::OperatorName operator_name(const std::string& name) {
  const size_t dot = name.find('.', name.find("::"));
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// "ns::Class" -> "__torch__.torch.classes.ns.Class", the name TORCH_LIBRARY(ns)'s
// class_<T>("Class") registers.
std::string class_qualified_name(const std::string& name) {
  const size_t colons = name.find("::");
  return "__torch__.torch.classes." + name.substr(0, colons) + "." + name.substr(colons + 2);
}

void check_op(const RequiredOp& op, const std::string& where) {
  const std::optional<c10::OperatorHandle> handle =
      c10::Dispatcher::singleton().findSchema(operator_name(op.name));
  if (!handle) {
    fail(kOpsLibrary, "no op library registers op " + op.name + ", which the package calls (" +
                          where + "): expected " + quoted(op.schema) + ", found none");
  }
  const std::string found = c10::toString(handle->schema());
  if (found != op.schema) {
    fail(kOpsLibrary, "op " + op.name + " has another schema than the package was exported with (" +
                          where + "): expected " + quoted(op.schema) + ", found " + quoted(found));
  }
  // Looked up as the package's .so will be when AOTI dlopens it: in the global scope, where
  // the op libraries were loaded. Without this, that dlopen fails with "undefined symbol".
  if (!op.c_shim.empty() && ::dlsym(RTLD_DEFAULT, op.c_shim.c_str()) == nullptr) {
    fail(kOpsLibrary, "no op library defines " + op.c_shim + ", the C shim of op " + op.name +
                          " that the package calls (" + where +
                          "): use the library it was exported with, or export with --no-c-shims");
  }
}

void check_class(const RequiredClass& cls, const std::string& where) {
  const c10::ClassTypePtr type = torch::getCustomClass(class_qualified_name(cls.name));
  if (!type) {
    fail(kOpsLibrary,
         "no op library registers class " + cls.name + ", which the package uses (" + where + ")");
  }
  for (const RequiredMethod& method : cls.methods) {
    const torch::jit::Function* function = type->findMethod(method.name);
    if (function == nullptr) {
      fail(kOpsLibrary, "class " + cls.name + " has no method " + method.name +
                            ", which the package calls (" + where + "): expected " +
                            quoted(method.schema) + ", found none");
    }
    const std::string found = c10::toString(function->getSchema());
    if (found != method.schema) {
      fail(kOpsLibrary, "method " + method.name + " of class " + cls.name +
                            " has another schema than the package was exported with (" + where +
                            "): expected " + quoted(method.schema) + ", found " + quoted(found));
    }
  }
}

}  // namespace

void check_registrations(const Registrations& needed,
                         const std::vector<std::string>& op_libraries) {
  const std::string where = looked_in(op_libraries);
  for (const RequiredOp& op : needed.ops) check_op(op, where);
  for (const RequiredClass& cls : needed.classes) check_class(cls, where);
}

}  // namespace my_ops::deploy::detail
