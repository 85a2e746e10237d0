"""LibTorch (C++ headers and shared libraries) from the locked torch wheel.

The Python tests import torch from the rules_python wheel repositories, so
this repository points at those same files instead of a second download:
C++ and Python see one torch build.

The wheel's libraries find their CUDA dependencies through
RPATH $ORIGIN/../../nvidia/<component>/lib, which assumes one site-packages
tree, while rules_python unpacks each wheel into its own repository. So this
repository lays torch and the nvidia wheels out as that one tree, with
symlinks, and C++ binaries load libtorch from a copy of that tree among the
build's outputs (see torch_runtime_linkopts in the generated defs.bzl).
"""

_BUILD = """\
load("@rules_cc//cc:defs.bzl", "cc_import", "cc_library")
load(":defs.bzl", "runtime_tree")

package(default_visibility = ["//visibility:public"])

_TORCH = "site-packages/torch"
_NVIDIA = "site-packages/nvidia"

cc_library(
    name = "headers",
    hdrs = glob([_TORCH + "/include/**"]),
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}"],
    includes = [
        _TORCH + "/include",
        _TORCH + "/include/torch/csrc/api/include",
    ],
)

# The headers as plain files, for what builds against LibTorch outside Bazel
# (the C++ SDK's CMake test), where :headers' compile context does not reach;
# with Torch's own CMake package.
filegroup(
    name = "header_files",
    srcs = glob([
        _TORCH + "/include/**",
        _TORCH + "/share/cmake/**",
    ], allow_empty = True),
)

# Every shared library of the merged tree: loaded at run time, from runfiles.
filegroup(
    name = "runtime_libraries",
    srcs = glob([
        _TORCH + "/lib/*.so*",
        _NVIDIA + "/*/lib/*.so*",
    ]),
)

# The same libraries, in the same layout, as build outputs
# (bazel-bin/external/<this repository>/runtime/site-packages/...): where a
# binary finds them relative to its own file, whether it was built as a
# top-level target (which gets a runfiles tree) or as another target's data
# (which does not).
runtime_tree(
    name = "runtime_tree",
    srcs = [":runtime_libraries"],
)

[
    cc_import(
        name = "lib" + lib,
        interface_library = _TORCH + "/lib/lib" + lib + ".so",
        # Linked by soname; loaded from the runfiles tree (see defs.bzl), so
        # Bazel's _solib symlinks, which would break $ORIGIN, are not made.
        system_provided = True,
    )
    for lib in ["torch", "torch_cpu", "c10", "c10_cuda", "torch_cuda"]
]

cc_import(
    name = "libcudart",
    interface_library = _NVIDIA + "/cu13/lib/libcudart.so",
    system_provided = True,
)

# cudart linked statically, for code that must also load where no CUDA is
# installed: the op library's CUDA part (its library loads under a CPU-only
# torch). The driver, libcuda.so, is opened by cudart at run time.
cc_import(
    name = "libcudart_static",
    static_library = _NVIDIA + "/cu13/lib/libcudart_static.a",
)

cc_library(
    name = "cudart_static",
    linkopts = ["-ldl", "-lrt", "-lpthread"],
    deps = [":cuda_headers", ":libcudart_static"],
)

cc_library(
    name = "cuda_headers",
    hdrs = glob([_NVIDIA + "/cu13/include/**"]),
    includes = [_NVIDIA + "/cu13/include"],
)

# LibTorch for CPU code: {torch_cpu_doc}.
# Linked by name from the merged tree (-L, -l), not through cc_import: Bazel
# would put each library in a _solib folder of its own and name that folder
# first in the binary's RUNPATH, and a libtorch_cpu.so loaded from there finds
# neither its CUDA runtime dependencies nor libtorch_cuda.so ($ORIGIN-relative).
# ld checks the symbols of libtorch's own dependencies (libcudart, libcupti,
# ...) when it links an executable. It cannot find them through the wheel's
# $ORIGIN RPATHs (under --sysroot it prefixes those with the sysroot), so
# -rpath-link names the merged tree's library dirs, whose files are inputs.
cc_library(
    name = "torch_cpu",
    additional_linker_inputs = [":runtime_libraries"],
    data = [
        ":runtime_libraries",
        ":runtime_tree",
    ],
    linkopts = ["-L" + {rpath_link_dirs}[0]] +
               ["-l" + lib for lib in {torch_cpu_libs}] +
               ["-Wl,-rpath-link," + d for d in {rpath_link_dirs}],
    deps = [":headers"],
)

# LibTorch for CUDA code: adds c10_cuda, torch_cuda, cudart and the CUDA
# headers (cublas_v2.h, cusparse.h) that ATen/cuda includes.
cc_library(
    name = "torch_cuda",
    deps = [
        ":cuda_headers",
        ":libc10_cuda",
        ":libcudart",
        ":libtorch_cuda",
        ":torch_cpu",
    ],
)

exports_files([
    "defs.bzl",
    "site-packages/torch/lib/libc10.so",
    "site-packages/torch/lib/libtorch_cpu.so",
    "version.txt",
])
"""

_DEFS = """\
\"\"\"Facts about the LibTorch in this repository, generated from the wheel.\"\"\"

TORCH_VERSION = "{version}"
CXX11_ABI = {abi}

# Where the runtime libraries sit among the build's outputs, from bazel-bin: torch/lib, then
# the nvidia wheels' lib folders.
RUNTIME_LIB_DIRS = {runtime_lib_dirs}

def _runtime_tree_impl(ctx):
    outputs = []
    for src in ctx.files.srcs:
        # Named after the file's path in this repository: the merged tree's layout, which the
        # wheel's $ORIGIN-relative RPATHs assume.
        out = ctx.actions.declare_file("runtime/" + src.owner.name)
        ctx.actions.symlink(output = out, target_file = src)
        outputs.append(out)
    return [DefaultInfo(files = depset(outputs), runfiles = ctx.runfiles(files = outputs))]

runtime_tree = rule(
    implementation = _runtime_tree_impl,
    doc = "Symlinks to files of this repository's root package, under runtime/ among the outputs.",
    attrs = {{"srcs": attr.label_list(allow_files = True)}},
)

def torch_runtime_linkopts(binary_name):
    \"\"\"linkopts that let a cc_binary or cc_test named binary_name, in the package being read, find LibTorch.

    The binary's RPATH names the runtime tree (:runtime_tree) relative to the
    binary's own file ($ORIGIN, which the dynamic loader takes from the
    resolved path of the executable). That holds under `bazel run`, under
    `bazel test`, and when the binary is the data of a test, where Bazel makes
    no runfiles tree beside it. Bazel's own runpath entries point at _solib
    symlink folders that hold one library each (the CUDA libraries of
    @libtorch//:torch_cuda), where the wheel's $ORIGIN-relative RPATHs find
    nothing; an old-style DT_RPATH on the binary also applies to the libraries
    it loads, so their dependencies fall through to the runtime tree's folders.
    \"\"\"
    package = native.package_name()
    depth = (len(package.split("/")) if package else 0) + binary_name.count("/")
    return ["-Wl,--disable-new-dtags"] + [
        "-Wl,-rpath,$$ORIGIN/" + "../" * depth + d
        for d in RUNTIME_LIB_DIRS
    ]
"""

def _site_packages(rctx, label):
    return rctx.path(label).dirname.get_child("site-packages")

def _mirror_tree(rctx, source, dest):
    """Symlinks every file under source into dest, merging directories that several wheels share."""
    stack = [(source, dest)]
    for _ in range(100000):
        if not stack:
            return
        src, dst = stack.pop()
        for entry in src.readdir():
            target = dst + "/" + entry.basename
            if entry.is_dir:
                stack.append((entry, target))
            else:
                rctx.symlink(entry, target)
    fail("libtorch: too many files under " + str(source))

def _read_abi(rctx, torch_dir):
    # The wheel records its C++ ABI only in its symbols: the new (C++11) ABI
    # puts std::string in the std::__cxx11 namespace. c10's error path, which
    # every op library calls, takes a std::string.
    symbols = rctx.read(torch_dir.get_child("lib").get_child("libc10.so"))
    if "torchCheckFail" not in symbols:
        fail("libtorch: libc10.so has no torchCheckFail symbol; cannot tell its C++ ABI")
    return 1 if "St7__cxx1112basic_string" in symbols else 0

def _lay_out(rctx, torch_site, nvidia_sites, torch_cpu_libs):
    """The merged site-packages tree, BUILD.bazel and defs.bzl, from unpacked wheels."""
    torch_dir = torch_site.get_child("torch")
    if not torch_dir.get_child("include").exists:
        fail("libtorch: {} has no include/; is the torch wheel a full build?".format(torch_dir))
    rctx.symlink(torch_dir.get_child("include"), "site-packages/torch/include")
    if torch_dir.get_child("share").exists:
        # Torch's CMake package (share/cmake/Torch), for the SDK's test of a
        # consumer that uses it.
        rctx.symlink(torch_dir.get_child("share"), "site-packages/torch/share")
    _mirror_tree(rctx, torch_dir.get_child("lib"), "site-packages/torch/lib")
    for site in nvidia_sites:
        nvidia = site.get_child("nvidia")
        if nvidia.exists:
            _mirror_tree(rctx, nvidia, "site-packages/nvidia")

    # A development symlink, so the link step can name cudart without its soname suffix.
    cudart = rctx.path("site-packages/nvidia/cu13/lib/libcudart.so.13")
    if cudart.exists:
        rctx.symlink(cudart, "site-packages/nvidia/cu13/lib/libcudart.so")

    version = rctx.read(torch_dir.get_child("version.py")).split("__version__ = '")[1].split("'")[0]
    abi = _read_abi(rctx, torch_dir)
    rctx.file("version.txt", version + "\n")
    lib_dirs = ["site-packages/torch/lib"]
    nvidia = rctx.path("site-packages/nvidia")
    if nvidia.exists:
        for component in sorted([e.basename for e in nvidia.readdir()]):
            if nvidia.get_child(component).get_child("lib").exists:
                lib_dirs.append("site-packages/nvidia/{}/lib".format(component))
    rpath_link_dirs = ["external/{}/{}".format(rctx.name, d) for d in lib_dirs]
    rctx.file("BUILD.bazel", _BUILD.format(
        abi = abi,
        rpath_link_dirs = repr(rpath_link_dirs),
        torch_cpu_doc = " and ".join(torch_cpu_libs),
        torch_cpu_libs = repr(torch_cpu_libs),
    ))
    rctx.file("defs.bzl", _DEFS.format(
        version = version,
        abi = abi,
        repo = rctx.name,
        runtime_lib_dirs = repr(["external/{}/runtime/{}".format(rctx.name, d) for d in lib_dirs]),
    ))

def _libtorch_impl(rctx):
    _lay_out(
        rctx,
        _site_packages(rctx, rctx.attr.torch_wheel),
        [_site_packages(rctx, wheel) for wheel in rctx.attr.cuda_wheels],
        # libtorch.so NEEDs libtorch_cuda, and so the whole CUDA stack: a CPU
        # run needs libtorch_cpu and c10 only, and the runtime loads
        # libtorch_cuda for a CUDA package (load_cuda_backend).
        ["torch_cpu", "c10"],
    )

libtorch_repository = repository_rule(
    implementation = _libtorch_impl,
    attrs = {
        "cuda_wheels": attr.label_list(doc = "BUILD files of the nvidia wheel repositories."),
        "torch_wheel": attr.label(mandatory = True, doc = "BUILD file of the torch wheel repository."),
    },
)

def _libtorch_wheels_impl(rctx):
    sites = []
    for i, (url, sha256) in enumerate(zip(rctx.attr.urls, rctx.attr.sha256s)):
        name = url.rsplit("/", 1)[-1].split("-")[0]
        rctx.report_progress("Downloading and unpacking {} ({} of {})".format(name, i + 1, len(rctx.attr.urls)))
        site = "wheels/{}".format(name)
        rctx.download_and_extract(url = url, sha256 = sha256, type = "zip", output = site)
        sites.append(rctx.path(site))
    _lay_out(
        rctx,
        sites[0],
        sites[1:],
        # libtorch.so NEEDs libtorch_cuda, and so the whole CUDA stack; CPU
        # inference needs libtorch_cpu and c10 only.
        ["torch_cpu", "c10"],
    )

libtorch_wheels_repository = repository_rule(
    implementation = _libtorch_wheels_impl,
    doc = "LibTorch from wheels downloaded by URL and sha256: torch first, then its nvidia wheels.",
    attrs = {
        "sha256s": attr.string_list(mandatory = True),
        "urls": attr.string_list(mandatory = True),
    },
)

def _requirement_names(lock_content):
    names = []
    for line in lock_content.splitlines():
        if line and line[0].isalpha() and "==" in line:
            names.append(line.split("==")[0].split("[")[0].strip())
    return names

def _wheel_repository(prefix, name):
    # An apparent name, resolved through the main module's use_repo(pip, ...):
    # a wheel repository missing there is Bazel's "no repo visible" error,
    # never a guess at another module's canonical repository name.
    sanitized = name.replace("-", "_").replace(".", "_").lower()
    return Label("@{}{}//:BUILD.bazel".format(prefix, sanitized))

def _libtorch_extension_impl(module_ctx):
    for mod in module_ctx.modules:
        for tag in mod.tags.from_pip:
            names = _requirement_names(module_ctx.read(tag.requirements_lock))
            if "torch" not in names:
                fail("libtorch: {} does not pin torch".format(tag.requirements_lock))
            libtorch_repository(
                name = tag.name,
                torch_wheel = _wheel_repository(tag.wheel_repository_prefix, "torch"),
                cuda_wheels = [_wheel_repository(tag.wheel_repository_prefix, n) for n in names if n.startswith("nvidia-")],
            )
        for tag in mod.tags.wheels:
            if len(tag.urls) != len(tag.sha256s):
                fail("libtorch.wheels({}): one sha256 per URL".format(tag.name))
            libtorch_wheels_repository(name = tag.name, urls = tag.urls, sha256s = tag.sha256s)

_from_pip = tag_class(attrs = {
    "name": attr.string(default = "libtorch"),
    "requirements_lock": attr.label(mandatory = True),
    "wheel_repository_prefix": attr.string(
        mandatory = True,
        doc = "What the pip extension's wheel repositories are named, before the wheel's name: " +
              "'pypi_' for rules_python 0.22.1's @pypi_torch. The main module use_repo()s torch's " +
              "and each nvidia wheel's repository under these names.",
    ),
})

_wheels = tag_class(attrs = {
    "name": attr.string(mandatory = True),
    "sha256s": attr.string_list(mandatory = True, doc = "The wheels' sha256, in the order of urls."),
    "urls": attr.string_list(mandatory = True, doc = "The torch wheel, then the nvidia wheels it needs at load time."),
})

libtorch = module_extension(
    implementation = _libtorch_extension_impl,
    tag_classes = {
        "from_pip": _from_pip,
        "wheels": _wheels,
    },
)
