"""requires_cuda(): the select that makes CUDA targets incompatible, as upstream writes it."""

def _requires_rules_are_enabled():
    return select({
        "@rules_cuda//cuda:is_enabled": [],
        "//conditions:default": ["@rules_cuda//cuda:rules_are_enabled"],
    })

def _requires_valid_toolchain_is_configured():
    return select({
        "@rules_cuda//cuda:is_valid_toolchain_found": [],
        "//conditions:default": ["@rules_cuda//cuda:valid_toolchain_is_configured"],
    })

def requires_cuda():
    """target_compatible_with for targets that need CUDA: the rules enabled and a toolkit found.

    Without either, the target is incompatible: `bazel test //...` and
    `bazel build //...` skip it, and naming it explicitly is an error.
    """
    return _requires_rules_are_enabled() + _requires_valid_toolchain_is_configured()
