"""The @cuda repository: a CUDA toolkit, found on the host or made of downloaded components.

A deliverable toolkit (the toolkit tag's components_mapping, as upstream) is
the component repositories (cuda_component: one archive each, for example
NVIDIA's PyPI wheels) merged into one tree; it depends on no file outside
Bazel's output base, so remote workers get it as action inputs.

Otherwise, as upstream's local toolkit: the toolkit tag's toolkit_path, when
set, is the only place looked at.
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
    version = "{version}",{deliverable}
)

exports_files(["README"])
"""

# The search and the rsqrt overlay are Python, shared with builds that do not
# use Bazel.
_CUDA_TOOLKIT_PY = Label("//cuda/private:cuda_toolkit.py")

def _inspect_toolkit(rctx, toolkit_path):
    """cuda_toolkit.py's findings (see its docstring); the overlay, if any, goes to overlay/."""
    python = rctx.which("python3")
    if not python:
        fail("@cuda: python3 is not on PATH; the toolkit search ({}) needs it".format(_CUDA_TOOLKIT_PY.name))
    command = [python, rctx.path(_CUDA_TOOLKIT_PY), "--overlay", rctx.path("overlay")]
    if toolkit_path:
        command += ["--toolkit-path", toolkit_path]
    result = rctx.execute(command)
    if result.return_code != 0:
        fail("@cuda: {} failed: {}".format(_CUDA_TOOLKIT_PY.name, result.stderr or result.stdout))
    return json.decode(result.stdout)

def _cuda_toolkit_impl(rctx):
    info = _inspect_toolkit(rctx, rctx.attr.toolkit_path)
    notes = "".join(["Note: {}.\n".format(w) for w in info["warnings"]])
    if info["root"] == None:
        # buildifier: disable=print
        print("WARNING: no CUDA toolkit found ({}): CUDA targets are skipped and the build is CPU-only.".format(
            rctx.attr.toolkit_path or "$CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda",
        ))
        rctx.file("BUILD.bazel", _BUILD.format(deliverable = "", found = False, host_glibc = "", nvcc = "", overlay_include = "", overlay_min_glibc = "", version = ""))
        rctx.file("README", "No CUDA toolkit: CUDA targets are incompatible.\n" + notes)
        return
    for warning in info["warnings"]:
        print("WARNING: CUDA: {}.".format(warning))  # buildifier: disable=print
    rctx.file("BUILD.bazel", _BUILD.format(
        deliverable = "",
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

# What nvcc runs and reads: the compiler (bin/, nvvm/) and the headers it
# includes by itself (include/). A compile takes all of them as inputs.
_DELIVERABLE_FILES = """
    nvcc_file = "bin/nvcc",
    toolkit_files = glob(["bin/**", "include/**", "nvvm/**"]),"""

def _cuda_component_impl(rctx):
    urls = rctx.attr.urls or ([rctx.attr.url] if rctx.attr.url else [])
    if not urls:
        fail("cuda.component {}: give url or urls".format(rctx.attr.name))

    # Wheels are zip files that Bazel does not recognise by their extension.
    archive_type = "zip" if urls[0].endswith(".whl") else ""
    rctx.download_and_extract(
        url = urls,
        sha256 = rctx.attr.sha256,
        integrity = rctx.attr.integrity,
        stripPrefix = rctx.attr.strip_prefix,
        type = archive_type,
    )
    rctx.file("BUILD.bazel", """package(default_visibility = ["//visibility:public"])

# {} {}
filegroup(
    name = "files",
    srcs = glob(["**"], exclude = ["BUILD.bazel", "WORKSPACE"]),
)
""".format(rctx.attr.descriptive_name or rctx.attr.component_name, rctx.attr.version))

cuda_component = repository_rule(
    implementation = _cuda_component_impl,
    doc = "One component of a deliverable toolkit: an archive, unpacked (upstream's cuda_component).",
    attrs = {
        "component_name": attr.string(doc = "Short name of the component, for example 'nvcc'."),
        "descriptive_name": attr.string(doc = "The component's official name, for the BUILD file's comment."),
        "integrity": attr.string(doc = "The archive's checksum in Subresource Integrity format."),
        "sha256": attr.string(doc = "The archive's SHA-256."),
        "strip_prefix": attr.string(doc = "The folder in the archive that holds bin/, include/ and so on."),
        "url": attr.string(doc = "The archive's URL."),
        "urls": attr.string_list(doc = "URLs of the archive, tried in order."),
        "version": attr.string(doc = "The component's version."),
    },
)

def _merge_component(rctx, component):
    """Copies a component repository's files into this one, as hard links where the file system allows."""
    source = str(rctx.path(component).dirname)
    result = rctx.execute(["cp", "-al", source + "/.", "."])
    if result.return_code != 0:
        result = rctx.execute(["cp", "-a", source + "/.", "."])
    if result.return_code != 0:
        fail("@{}: cannot copy {}: {}".format(rctx.name, component, result.stderr))
    for own_file in ("BUILD.bazel", "WORKSPACE", "WORKSPACE.bazel", "REPO.bazel"):
        rctx.delete(own_file)

def _deliverable_cuda_toolkit_impl(rctx):
    for component in rctx.attr.components:
        _merge_component(rctx, component)
    info = _inspect_toolkit(rctx, str(rctx.path(".")))
    if info["root"] == None:
        fail("@{}: the components ({}) hold no bin/nvcc".format(rctx.name, ", ".join([str(c) for c in rctx.attr.components])))
    release = ".".join(rctx.attr.version.split(".")[:2])
    if release and info["version"] != release:
        fail("@{}: nvcc is CUDA {}, the toolkit tag says {}".format(rctx.name, info["version"], rctx.attr.version))
    rctx.file("BUILD.bazel", _BUILD.format(
        deliverable = _DELIVERABLE_FILES,
        found = True,
        host_glibc = info["glibc"] or "",
        nvcc = "",
        overlay_include = "external/{}/overlay".format(rctx.name) if info["overlay"] else "",
        overlay_min_glibc = info["overlay_min_glibc"] if info["overlay"] else "",
        version = info["version"],
    ))
    rctx.file("README", "CUDA {} from the components {}.\n".format(
        info["version"],
        ", ".join([c.workspace_name for c in rctx.attr.components]),
    ))

# Not local: the components are pinned by checksum, so the merged tree
# changes only when they do.
deliverable_cuda_toolkit = repository_rule(
    implementation = _deliverable_cuda_toolkit_impl,
    doc = "A toolkit merged from cuda_component repositories (the toolkit tag's components_mapping).",
    attrs = {
        "components": attr.label_list(doc = "Each component repository's BUILD.bazel."),
        "version": attr.string(doc = "The CUDA release nvcc must report, for example '13.0' (a patch level is ignored); empty checks nothing."),
    },
)
