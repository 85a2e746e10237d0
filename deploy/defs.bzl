"""deploy_pytest: a test of deploy/ or one of its components, from its file and what it needs."""

load("@pypi//:requirements.bzl", "requirement")
load("//tools/pytest:defs.bzl", "pytest_test")

_LIBTORCH_LIB = "@libtorch//:site-packages/torch/lib/libc10.so"
_AARCH64_LIBTORCH_LIB = "@libtorch_aarch64//:site-packages/torch/lib/libc10.so"
_AARCH64_LD = "@debian_bookworm_arm64_sysroot//:lib/ld-linux-aarch64.so.1"

# What each need adds: data, environment (read by deploy/testing/fixtures.py
# and deploy/tests/qemu_aarch64.py) and deps.
_NEEDS = {
    # The C++ loader, the op library and the LibTorch they run against.
    "loader": struct(
        data = [
            "//deploy:loader",
            "//ops:libmy_ops.so",
            "@libtorch//:runtime_libraries",
            _LIBTORCH_LIB,
        ],
        env = {
            "LIBTORCH_LIB": "$(rootpath {})".format(_LIBTORCH_LIB),
            "MY_OPS_LIBRARY": "$(rootpath //ops:libmy_ops.so)",
            "MY_OPS_LOADER": "$(rootpath //deploy:loader)",
        },
        deps = [
            "//python:my_ops",
            "@rules_python//python/runfiles",
        ],
    ),
    # //deploy:default_package, exported at build time, for tests that need
    # a package but not a fresh export; it brings "loader", which runs it.
    "package": struct(
        data = ["//deploy:default_package"],
        env = {"MY_OPS_DEFAULT_PACKAGE": "$(rootpaths //deploy:default_package)"},
        deps = [],
    ),
    # //deploy:signed_package (//deploy:default_package signed with the test
    # key pair): the tests of signatures, batch limits and the manifest share
    # this build-time package instead of exporting the model in each test run.
    # It brings "signing_keys" and "loader".
    "signed_package": struct(
        data = ["//deploy:signed_package"],
        env = {"MY_OPS_SIGNED_PACKAGE": "$(rootpaths //deploy:signed_package)"},
        deps = [],
    ),
    # //deploy:retrained_weights: a signed weights file for :default_package,
    # from another training run of the default model. It brings "package".
    "weights": struct(
        data = ["//deploy:retrained_weights"],
        env = {"MY_OPS_RETRAINED_WEIGHTS": "$(rootpaths //deploy:retrained_weights)"},
        deps = [],
    ),
    # //deploy:decoder_package, a decoder with a KV cache of 64 positions exported from
    # //deploy/testing:tiny_llama, which the tests import for the transformers reference.
    # It brings "loader".
    "decoder": struct(
        data = ["//deploy:decoder_package"],
        env = {"MY_OPS_DECODER_PACKAGE": "$(rootpaths //deploy:decoder_package)"},
        deps = [
            "//deploy/testing:tiny_llama",
            requirement("transformers"),
        ],
    ),
    # The test key pair in deploy/tests/testdata (the signing_keys fixture).
    "signing_keys": struct(
        data = [
            "//deploy:tests/testdata/public_key.pem",
            "//deploy:tests/testdata/signing_key.pem",
        ],
        env = {"MY_OPS_TEST_PUBLIC_KEY": "$(rootpath //deploy:tests/testdata/public_key.pem)"},
        deps = [],
    ),
    # The exporter, which the tests import (deploy.export, deploy.exporter) or run as
    # python -m deploy.exporter.
    "exporter": struct(
        data = [],
        env = {},
        deps = ["//deploy"],
    ),
    # linux-aarch64 programs under qemu-aarch64: the arm64 sysroot, aarch64
    # LibTorch, the cross-built loader and op library, and the aarch64
    # toolchain of export --target linux-aarch64.
    "aarch64": struct(
        data = [
            "//deploy:bundle_linux_aarch64_loader",
            "//deploy/exporter:linux_aarch64_compiler",
            "//deploy/exporter:linux_aarch64_ops",
            "//tools/cc:cxx_toolchain",
            "@debian_bookworm_arm64_sysroot//:all_files",
            "@libtorch_aarch64//:runtime_libraries",
            _AARCH64_LD,
            _AARCH64_LIBTORCH_LIB,
        ],
        env = {
            "AARCH64_LIBTORCH_LIB": "$(rootpath {})".format(_AARCH64_LIBTORCH_LIB),
            "AARCH64_LOADER": "$(rootpath //deploy:bundle_linux_aarch64_loader)",
            "AARCH64_OPS_LIBRARY": "$(rootpath //deploy/exporter:linux_aarch64_ops)",
            "AARCH64_SYSROOT_LD": "$(rootpath {})".format(_AARCH64_LD),
        },
        deps = ["//deploy/qemu"],
    ),
}

def _unique(items):
    return list({item: None for item in items}.keys())

def deploy_pytest(
        name,
        src,
        needs = [],
        size = "medium",
        helpers = [],
        data = [],
        env = {},
        deps = [],
        **kwargs):
    """One test file of a deploy package's tests/ under pytest, with tests/conftest.py beside it.

    The fixtures that conftest.py imports (deploy/testing/fixtures.py) read what `needs` sets.

    Args:
      name: the test's name, `<file without test_>_test` by convention.
      src: the test file, in the calling package's tests/, e.g. "tests/test_export_cli.py".
      needs: what it uses, each adding its data, environment and deps:
        "loader" (the C++ loader, libmy_ops.so and LibTorch: MY_OPS_LOADER,
        MY_OPS_LIBRARY, LIBTORCH_LIB), "package" (//deploy:default_package:
        MY_OPS_DEFAULT_PACKAGE; implies "loader"), "signed_package"
        (//deploy:signed_package: MY_OPS_SIGNED_PACKAGE; implies "loader" and
        "signing_keys"), "signing_keys" (the test key pair in deploy/tests/testdata:
        MY_OPS_TEST_PUBLIC_KEY), "weights" (//deploy:retrained_weights:
        MY_OPS_RETRAINED_WEIGHTS; implies "package"), "decoder" (//deploy:decoder_package
        and the small LLaMA it was exported from: MY_OPS_DECODER_PACKAGE; implies "loader"),
        "exporter" (deploy.export
        and the deploy.exporter package) and
        "aarch64" (qemu, the arm64 sysroot, aarch64 LibTorch, loader, op
        library and toolchain: AARCH64_*).
      size: the test size.
      helpers: other modules of the same tests/ that the file imports.
      data: data besides what `needs` adds.
      env: environment besides what `needs` adds (a dict or a select() of dicts).
      deps: deps besides what `needs` adds.
      **kwargs: args, shard_count, tags, ... as for pytest_test.
    """
    for need in needs:
        if need not in _NEEDS:
            fail("deploy_pytest {}: unknown need {!r}, expected one of {}".format(
                name,
                need,
                sorted(_NEEDS),
            ))
    implied = {
        "package": ["loader"],
        "signed_package": ["loader", "signing_keys"],
        "weights": ["package", "loader"],
        "decoder": ["loader"],
    }
    for need in list(needs):
        needs = needs + [n for n in implied.get(need, []) if n not in needs]
    chosen = [_NEEDS[n] for n in needs]
    all_env = {}
    for n in chosen:
        all_env.update(n.env)

    # `env` may be a select(), which a dict can be or-ed with but not updated from.
    all_env = all_env | env
    pytest_test(
        name = name,
        size = size,
        srcs = [src, "tests/conftest.py"] + helpers,
        data = _unique(data + [d for n in chosen for d in n.data]),
        env = all_env,
        deps = _unique(deps + [d for n in chosen for d in n.deps] + ["//deploy/testing"]),
        **kwargs
    )
