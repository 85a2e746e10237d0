"""Stand-in for buildozer's `buildozer_binary` extension, which bazel_tools declares for `bazel mod tidy`."""

def _empty_repo_impl(rctx):
    rctx.file("BUILD.bazel", "# Intentionally empty: see third_party/bazel_registry/README.md.\n")

_empty_repo = repository_rule(implementation = _empty_repo_impl)

def _buildozer_binary_impl(_module_ctx):
    _empty_repo(name = "buildozer_binary")

buildozer_binary = module_extension(implementation = _buildozer_binary_impl)
