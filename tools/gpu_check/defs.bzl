"""The one pattern for the source folders tools/gpu_check carries."""

def gpu_check_sources(name = "all_files", srcs = []):
    """Every file of this package (and `srcs`, e.g. generated headers) for //tools/gpu_check.

    The script runs on a machine without Bazel, from a checkout: the test of it under Bazel
    sees the same tree through this filegroup.

    Args:
      name: the filegroup's name.
      srcs: generated files the checkout would not hold but the script needs.
    """
    native.filegroup(
        name = name,
        srcs = native.glob(["**"], exclude = ["**/__pycache__/**"]) + srcs,
        visibility = ["//tools/gpu_check:__pkg__"],
    )
