"""The @cuda repository: the CUDA toolkit on the host, found the way upstream's local toolkit is.

The toolkit tag's toolkit_path, when set, is the only place looked at.
Otherwise the search is $CUDA_PATH, $CUDA_HOME, nvcc on PATH (asking nvcc
where it lives, since it may be a wrapper), then /usr/local/cuda. Without a toolkit the repository still exists,
@cuda//:valid_toolchain_found is False, requires_cuda() makes CUDA targets
incompatible (skipped by `bazel test //...`), and one line in @cuda//:README
says why. Whether the host has a GPU is not this repository's concern.
"""

_BUILD = """\
load("@bazel_skylib//rules:common_settings.bzl", "bool_setting")
load("@rules_cuda//cuda/private:rules/toolkit_info.bzl", "local_cuda_toolkit")

package(default_visibility = ["//visibility:public"])

# Read by @rules_cuda//cuda:is_valid_toolchain_found.
bool_setting(
    name = "valid_toolchain_found",
    build_setting_default = {found},
)

local_cuda_toolkit(
    name = "toolkit",
    host_glibc = "{host_glibc}",
    nvcc = "{nvcc}",
    overlay = glob(["overlay/**"], allow_empty = True),
    overlay_include = "{overlay_include}",
    overlay_min_glibc = "{overlay_min_glibc}",
    version = "{version}",
)

exports_files(["README"])
"""

# The search and the rsqrt overlay are Python, shared with builds that do not
# use Bazel.
_CUDA_TOOLKIT_PY = Label("//cuda/private:cuda_toolkit.py")

def _inspect_toolkit(rctx):
    """cuda_toolkit.py's findings (see its docstring); the overlay, if any, goes to overlay/."""
    python = rctx.which("python3")
    if not python:
        fail("@cuda: python3 is not on PATH; the toolkit search ({}) needs it".format(_CUDA_TOOLKIT_PY.name))
    command = [python, rctx.path(_CUDA_TOOLKIT_PY), "--overlay", rctx.path("overlay")]
    if rctx.attr.toolkit_path:
        command += ["--toolkit-path", rctx.attr.toolkit_path]
    result = rctx.execute(command)
    if result.return_code != 0:
        fail("@cuda: {} failed: {}".format(_CUDA_TOOLKIT_PY.name, result.stderr or result.stdout))
    return json.decode(result.stdout)

def _cuda_toolkit_impl(rctx):
    info = _inspect_toolkit(rctx)
    notes = "".join(["Note: {}.\n".format(w) for w in info["warnings"]])
    if info["root"] == None:
        # buildifier: disable=print
        print("WARNING: no CUDA toolkit found ({}): CUDA targets are skipped and the build is CPU-only.".format(
            rctx.attr.toolkit_path or "$CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda",
        ))
        rctx.file("BUILD.bazel", _BUILD.format(found = False, host_glibc = "", nvcc = "", overlay_include = "", overlay_min_glibc = "", version = ""))
        rctx.file("README", "No CUDA toolkit: CUDA targets are incompatible.\n" + notes)
        return
    for warning in info["warnings"]:
        print("WARNING: CUDA: {}.".format(warning))  # buildifier: disable=print
    rctx.file("BUILD.bazel", _BUILD.format(
        found = True,
        host_glibc = info["glibc"] or "",
        nvcc = info["nvcc"],
        overlay_include = "external/{}/overlay".format(rctx.name) if info["overlay"] else "",
        overlay_min_glibc = info["overlay_min_glibc"] if info["overlay"] else "",
        version = info["version"],
    ))
    rctx.file("README", "CUDA {} from {} (found through {}).\n".format(info["version"], info["root"], info["how"]) + notes)

# What makes Bazel run this rule again:
# - local: every server start, so a toolkit installed or removed is seen
#   without `bazel clean`;
# - configure: `bazel fetch --configure --force` re-runs it with the other
#   configure repositories, not the downloads;
# - environ: $CUDA_PATH, $CUDA_HOME and $PATH choose nvcc.
cuda_toolkit = repository_rule(
    implementation = _cuda_toolkit_impl,
    attrs = {
        "toolkit_path": attr.string(doc = "The toolkit's root; empty searches as the module docstring says."),
    },
    configure = True,
    environ = ["CUDA_HOME", "CUDA_PATH", "PATH"],
    local = True,
)
