"""Analysis tests of the CUDA rules: the archs flag, where nvcc comes from, and when an op library links CUDA.

The expected -gencode flags are written from nvcc's documented meaning of each
spec (one -gencode per PTX architecture and code), not from the rule's output.
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts")

# Labels as strings resolved here: skylib applies the transition in its own repository.
_ARCHS = str(Label("@rules_cuda//cuda:archs"))

def _gencode_flags(env):
    actions = [a for a in analysistest.target_actions(env) if a.mnemonic == "CudaCompile"]
    asserts.true(env, len(actions) > 0, "no CudaCompile action")
    return [arg for arg in actions[0].argv if arg.startswith("-gencode")] if actions else []

def _gencode_test(expected):
    def _impl(ctx):
        env = analysistest.begin(ctx)
        asserts.equals(env, expected, _gencode_flags(env))
        return analysistest.end(env)

    return _impl

def _failure_test(message):
    def _impl(ctx):
        env = analysistest.begin(ctx)
        asserts.expect_failure(env, message)
        return analysistest.end(env)

    return _impl

# The project's setting (.bazelrc): cubins for sm_80 and sm_90, sm_90's PTX kept.
project_archs_test = analysistest.make(
    _gencode_test([
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]),
    config_settings = {_ARCHS: "compute_80:sm_80;compute_90:sm_90,compute_90"},
)

# Without a virtual architecture, the lowest listed number is the PTX one;
# the codes keep their order.
implied_virtual_arch_test = analysistest.make(
    _gencode_test([
        "-gencode=arch=compute_80,code=sm_86",
        "-gencode=arch=compute_80,code=sm_80",
    ]),
    config_settings = {_ARCHS: "sm_86,sm_80"},
)

# Architecture-specific features ('a') and LTO-IR.
suffixes_and_lto_test = analysistest.make(
    _gencode_test([
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_100,code=lto_100",
    ]),
    config_settings = {_ARCHS: "compute_90a:sm_90a;compute_100:lto_100"},
)

# Upstream's default: no -gencode, so nvcc picks its own default architecture.
empty_archs_test = analysistest.make(
    _gencode_test([]),
    config_settings = {_ARCHS: ""},
)

unknown_arch_test = analysistest.make(
    _failure_test("'sm_81' in 'sm_80,sm_81' is not compute_N, sm_N or lto_N"),
    expect_failure = True,
    config_settings = {_ARCHS: "sm_80,sm_81"},
)

real_arch_before_colon_test = analysistest.make(
    _failure_test("before ':' must be a virtual architecture"),
    expect_failure = True,
    config_settings = {_ARCHS: "sm_80:sm_80"},
)

# What a CUDA compile may take from the machine that runs it: the C++
# toolchain's own tools and GCC's built-in headers (a worker image has them at
# these paths, docs/remote-execution.md), and the nvcc wrapper's scratch
# folder. Everything else, nvcc first, must be an input of the action.
_MACHINE_PATHS = ["/usr/bin/", "/usr/lib/gcc/", "/tmp/"]

def _hermetic_compile_test_impl(ctx):
    env = analysistest.begin(ctx)
    actions = [a for a in analysistest.target_actions(env) if a.mnemonic == "CudaCompile"]
    asserts.true(env, len(actions) > 0, "no CudaCompile action")
    for action in actions:
        inputs = {f.path: True for f in action.inputs.to_list()}

        # The wrapper's own arguments are nm, objcopy and the object; then nvcc.
        nvcc = action.argv[4]
        asserts.true(env, nvcc.endswith("/bin/nvcc"), "argv[4] is not nvcc: " + nvcc)
        asserts.true(env, nvcc in inputs, "nvcc ({}) is not an input of the compile".format(nvcc))
        for name in ["nvvm/bin/cicc", "bin/ptxas", "include/cuda_runtime.h"]:
            path = nvcc.removesuffix("bin/nvcc") + name
            asserts.true(env, path in inputs, "{} is not an input of the compile".format(path))
        for arg in action.argv:
            for path in [arg] + arg.split("=")[1:]:
                if path.startswith("/"):
                    asserts.true(
                        env,
                        [p for p in _MACHINE_PATHS if path.startswith(p)] != [],
                        "a path outside the action's inputs: " + arg,
                    )
    return analysistest.end(env)

# Every file nvcc runs or reads is an input: a remote worker needs no CUDA
# toolkit of its own, and the compile cannot pick up the host's.
hermetic_compile_test = analysistest.make(_hermetic_compile_test_impl)

def archs_test_suite(name, target_under_test, target_compatible_with):
    """The archs tests, each on target_under_test (a cuda_objects or cuda_library target).

    Args:
      name: the test_suite's name.
      target_under_test: a target that compiles CUDA.
      target_compatible_with: requires_cuda(), so machines without a toolkit skip them.
    """
    tests = {
        "empty_archs_test": empty_archs_test,
        "implied_virtual_arch_test": implied_virtual_arch_test,
        "project_archs_test": project_archs_test,
        "real_arch_before_colon_test": real_arch_before_colon_test,
        "suffixes_and_lto_test": suffixes_and_lto_test,
        "unknown_arch_test": unknown_arch_test,
    }
    for test_name, rule in tests.items():
        rule(
            name = test_name,
            target_under_test = target_under_test,
            target_compatible_with = target_compatible_with,
        )
    native.test_suite(name = name, tests = [":" + t for t in tests])

def _links_cuda_kernels_test(expected):
    def _impl(ctx):
        env = analysistest.begin(ctx)
        links = [a for a in analysistest.target_actions(env) if a.mnemonic == "CppLink"]
        asserts.equals(env, 1, len(links), "CppLink actions")
        inputs = [f.path for a in links for f in a.inputs.to_list()]
        cuda = [p for p in inputs if "my_ops_cuda" in p]
        asserts.equals(env, expected, len(cuda) > 0, "CUDA objects among the link's inputs: {}".format(cuda))
        return analysistest.end(env)

    return _impl

# With a toolkit, the op library links its CUDA kernels.
op_library_links_cuda_test = analysistest.make(_links_cuda_kernels_test(True))

# --@rules_cuda//cuda:enable=false: the same library, CPU kernels only (the
# select in torch_op_library, not a Starlark `if`, decides).
op_library_cuda_disabled_test = analysistest.make(
    _links_cuda_kernels_test(False),
    config_settings = {str(Label("@rules_cuda//cuda:enable")): False},
)

# linux-aarch64 has no CUDA toolkit here: CPU kernels only.
op_library_aarch64_test = analysistest.make(
    _links_cuda_kernels_test(False),
    config_settings = {"//command_line_option:platforms": str(Label("//tools/platforms:linux_aarch64"))},
)

def op_library_cuda_test_suite(name, op_library, target_compatible_with):
    """Whether op_library (a torch_op_library's .so) links CUDA kernels, per configuration.

    Args:
      name: the test_suite's name.
      op_library: the lib<name>.so target.
      target_compatible_with: for the test that expects CUDA kernels (requires_cuda()).
    """
    op_library_links_cuda_test(
        name = name + "_links_cuda",
        target_under_test = op_library,
        target_compatible_with = target_compatible_with,
    )
    op_library_cuda_disabled_test(name = name + "_cuda_disabled", target_under_test = op_library)
    op_library_aarch64_test(name = name + "_aarch64", target_under_test = op_library)
    native.test_suite(name = name, tests = [":" + name + s for s in ["_links_cuda", "_cuda_disabled", "_aarch64"]])
