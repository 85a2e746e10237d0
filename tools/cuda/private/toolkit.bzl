"""Finds the CUDA toolkit and GPUs on the host and describes them as the `@local_cuda` repository.

Search order: $CUDA_PATH, nvcc on PATH, /usr/local/cuda. Without a toolkit
the repository still exists, CUDA targets are incompatible (skipped by
`bazel test //...`), and one warning says the build is CPU-only.

Whether the host has a GPU is recorded separately (CUDA_DEVICE_FOUND): it
decides whether tests that run CUDA kernels are built at all (see
requires_cuda_device() in //tools/cuda:defs.bzl).
"""

_NO_TOOLKIT_BUILD = """\
load("@my_ops//tools/cuda/private:toolchain_rules.bzl", "cuda_toolkit")

package(default_visibility = ["//visibility:public"])

# No CUDA toolkit was found: every cuda_library is incompatible.
cuda_toolkit(
    name = "toolkit",
    nvcc = "",
    version = "",
)
"""

_TOOLKIT_BUILD = """\
load("@my_ops//tools/cuda/private:toolchain_rules.bzl", "cuda_toolkit")

package(default_visibility = ["//visibility:public"])

cuda_toolkit(
    name = "toolkit",
    host_glibc = "{host_glibc}",
    nvcc = "{nvcc}",
    overlay = glob(["overlay/**"]),
    overlay_include = "{overlay_include}",
    overlay_min_glibc = "{overlay_min_glibc}",
    version = "{version}",
)
"""

def _nvcc_top(rctx, nvcc):
    result = rctx.execute([nvcc, "--dryrun", "--version"])
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            bin_dir = rctx.path(line[len("#$ _HERE_="):].strip())
            if bin_dir.dirname.get_child("include").get_child("cuda_runtime.h").exists:
                return bin_dir.dirname
    return None

def _find_toolkit_root(rctx):
    cuda_path = rctx.os.environ.get("CUDA_PATH", "")
    if cuda_path:
        if rctx.path(cuda_path + "/bin/nvcc").exists:
            return rctx.path(cuda_path), "$CUDA_PATH"
        print("WARNING: $CUDA_PATH={} has no bin/nvcc; looking elsewhere.".format(cuda_path))  # buildifier: disable=print
    nvcc = rctx.which("nvcc")
    if nvcc:
        # nvcc on PATH may be a symlink or a wrapper script, so ask nvcc where it lives.
        root = _nvcc_top(rctx, nvcc)
        if root:
            return root, "nvcc on PATH"
    if rctx.path("/usr/local/cuda/bin/nvcc").exists:
        return rctx.path("/usr/local/cuda"), "/usr/local/cuda"
    return None, None

def _nvcc_version(rctx, nvcc):
    result = rctx.execute([nvcc, "--version"])
    if result.return_code != 0:
        fail("CUDA: '{} --version' failed: {}".format(nvcc, result.stderr))
    for line in result.stdout.splitlines():
        if "release " in line:
            return line.split("release ")[1].split(",")[0]
    fail("CUDA: cannot read the version from '{} --version'".format(nvcc))

def _host_glibc_version(rctx):
    result = rctx.execute(["getconf", "GNU_LIBC_VERSION"])
    if result.return_code != 0:
        return ""
    return ".".join(result.stdout.strip().split(" ")[-1].split(".")[:2])

# glibc 2.42 declares rsqrt/rsqrtf with noexcept in <math.h>; CUDA 13.0's
# crt/math_functions.h declares them without, and nvcc rejects the pair.
# Which glibc's <math.h> nvcc sees depends on the C++ toolchain (the sysroot's
# with the default one, the host's with --config=host_toolchain), so the
# overlay is generated for every CUDA 13.0, and cuda_library uses it only
# when the toolchain's glibc is at least _RSQRT_OVERLAY_MIN_GLIBC.
_RSQRT_OVERLAY_MIN_GLIBC = "2.42"

def _needs_rsqrt_overlay(nvcc_version):
    return nvcc_version == "13.0"

def _write_rsqrt_overlay(rctx, include_dir):
    """Mirrors the toolkit include dir, with crt/math_functions.h patched.

    Quoted includes resolve relative to the including file, so every header
    that reaches crt/math_functions.h must also be seen through the overlay.
    Mirroring the whole include dir with symlinks does that in one rule.
    """
    for entry in include_dir.readdir():
        if entry.basename != "crt":
            rctx.symlink(entry, "overlay/" + entry.basename)
    for entry in include_dir.get_child("crt").readdir():
        if entry.basename != "math_functions.h":
            rctx.symlink(entry, "overlay/crt/" + entry.basename)
    original = rctx.read(include_dir.get_child("crt").get_child("math_functions.h"))
    patched = original
    for decl in ["double rsqrt(double a)", "float rsqrtf(float a)"]:
        patched = patched.replace(decl + ");", decl + " __THROW);")
    for decl in ["double                 rsqrt(double x)", "float                  rsqrtf(float x)"]:
        patched = patched.replace(decl + ";", decl + " __THROW;")
    if patched.count("__THROW") < original.count("__THROW") + 4:
        fail("CUDA: crt/math_functions.h no longer matches the rsqrt patch; update tools/cuda/private/toolkit.bzl")
    rctx.file("overlay/crt/math_functions.h", patched, executable = False)

# Where the driver package puts nvidia-smi when it is not on PATH (WSL keeps
# it beside the driver's libraries).
_NVIDIA_SMI_FALLBACKS = ["/usr/bin/nvidia-smi", "/usr/lib/wsl/lib/nvidia-smi"]

def _find_gpus(rctx):
    """Returns (number of usable GPUs, how that was decided).

    nvidia-smi asks the driver, as CUDA itself would, so device nodes left
    behind by an unloaded or broken driver do not count as a GPU. Without
    nvidia-smi (a container given only the device nodes and libcuda), the
    nodes are the best evidence there is: /dev/nvidiactl plus one
    /dev/nvidia<N> per GPU.
    """
    smi = rctx.which("nvidia-smi")
    for path in _NVIDIA_SMI_FALLBACKS:
        if not smi and rctx.path(path).exists:
            smi = rctx.path(path)
    if smi:
        # A wedged driver can make nvidia-smi hang; a GPU that slow to answer
        # would fail the tests anyway.
        result = rctx.execute([smi, "-L"], timeout = 30)
        if result.return_code != 0:
            lines = (result.stderr + result.stdout).strip().splitlines()
            why = lines[0].rstrip(".") if lines else "exit {}".format(result.return_code)
            reason = "'{} -L' failed ({})".format(smi, why)

            # buildifier: disable=print
            print("WARNING: {}: tests that run CUDA kernels are skipped.".format(reason))
            return 0, reason
        gpus = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
        return len(gpus), "'{} -L'".format(smi)
    nodes = [
        entry
        for entry in rctx.path("/dev").readdir()
        if entry.basename.startswith("nvidia") and entry.basename[len("nvidia"):].isdigit()
    ]
    if nodes and rctx.path("/dev/nvidiactl").exists:
        return len(nodes), "/dev/nvidiactl and /dev/nvidia<N> (no nvidia-smi)"
    return 0, "no nvidia-smi and no /dev/nvidia<N> device nodes"

def _defs_bzl(cuda_available, gpus):
    return "CUDA_AVAILABLE = {}\nCUDA_DEVICE_FOUND = {}\n".format(cuda_available, gpus > 0)

def _local_cuda_impl(rctx):
    gpus, gpus_how = _find_gpus(rctx)
    gpus_line = "GPUs: {} ({}).\n".format(gpus, gpus_how)
    root, how = _find_toolkit_root(rctx)
    if root == None:
        # buildifier: disable=print
        print("WARNING: no CUDA toolkit found ($CUDA_PATH, nvcc on PATH, /usr/local/cuda): CUDA targets are skipped and the build is CPU-only.")
        rctx.file("BUILD.bazel", _NO_TOOLKIT_BUILD)
        rctx.file("defs.bzl", _defs_bzl(False, gpus))
        rctx.file("README", "No CUDA toolkit.\n" + gpus_line)
        return
    nvcc = root.get_child("bin").get_child("nvcc")
    version = _nvcc_version(rctx, nvcc)
    overlay_include = ""
    overlay_min_glibc = ""
    if _needs_rsqrt_overlay(version):
        _write_rsqrt_overlay(rctx, root.get_child("include"))
        overlay_include = "external/{}/overlay".format(rctx.name)
        overlay_min_glibc = _RSQRT_OVERLAY_MIN_GLIBC
    rctx.file("BUILD.bazel", _TOOLKIT_BUILD.format(
        host_glibc = _host_glibc_version(rctx),
        nvcc = str(nvcc),
        overlay_include = overlay_include,
        overlay_min_glibc = overlay_min_glibc,
        version = version,
    ))
    rctx.file("defs.bzl", _defs_bzl(True, gpus))
    rctx.file("README", "CUDA {} from {} (found through {}).\n".format(version, root, how) + gpus_line)

# What makes Bazel run this rule again:
# - local: Bazel re-runs local repositories on every server start instead of
#   trusting the previous run's marker file. A GPU appears or goes away with
#   a reboot, a driver install or a new container, and each of those starts a
#   new Bazel server, so the answer is never older than the server.
# - configure: the rule inspects the machine, so `bazel fetch --configure
#   --force` re-runs it (with the other configure repositories, not the
#   downloads) without a server restart, e.g. after loading the driver.
# - environ: $CUDA_PATH and $PATH choose nvcc and nvidia-smi. Nothing is
#   watched for the GPU itself: the device nodes are character devices, which
#   rctx.watch would read to hash. $CUDA_VISIBLE_DEVICES is not read: tests do
#   not inherit the client's environment, so it would not describe what a
#   test sees.
local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    configure = True,
    environ = ["CUDA_PATH", "PATH"],
    local = True,
)

def _cuda_extension_impl(_module_ctx):
    local_cuda_repository(name = "local_cuda")

cuda = module_extension(implementation = _cuda_extension_impl)
