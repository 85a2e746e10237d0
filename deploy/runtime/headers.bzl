"""The runtime library's public headers: what the SDK ships and its clients include."""

PUBLIC_HEADERS = [
    "include/my_ops/error.h",
    "include/my_ops/model.h",
    "include/my_ops/process.h",
    "include/my_ops/session.h",
    "include/my_ops/tensor_file.h",
]
