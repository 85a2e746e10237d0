"""Finds the CUDA toolkit and GPUs on the host and describes them as the `@local_cuda` repository.

Search order: $CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda. Without a toolkit
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

# The search and the rsqrt overlay are Python, shared with tools/gpu_check, which builds
# without Bazel; it runs with the build's own interpreter.
_CUDA_TOOLKIT_PY = Label("//tools/cuda/private:cuda_toolkit.py")
_PYTHON = Label("@local_python//:python3")

def _inspect_toolkit(rctx):
    """cuda_toolkit.py's findings (see its docstring); the overlay, if any, goes to overlay/."""
    result = rctx.execute([
        rctx.path(_PYTHON),
        rctx.path(_CUDA_TOOLKIT_PY),
        "--overlay",
        rctx.path("overlay"),
    ])
    if result.return_code != 0:
        fail("CUDA: {} failed: {}".format(_CUDA_TOOLKIT_PY.name, result.stderr or result.stdout))
    info = json.decode(result.stdout)
    for warning in info["warnings"]:
        print("WARNING: CUDA: {}.".format(warning))  # buildifier: disable=print
    return info

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
    info = _inspect_toolkit(rctx)
    if info["root"] == None:
        # buildifier: disable=print
        print("WARNING: no CUDA toolkit found ($CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda): CUDA targets are skipped and the build is CPU-only.")
        rctx.file("BUILD.bazel", _NO_TOOLKIT_BUILD)
        rctx.file("defs.bzl", _defs_bzl(False, gpus))
        rctx.file("README", "No CUDA toolkit.\n" + gpus_line)
        return
    rctx.file("BUILD.bazel", _TOOLKIT_BUILD.format(
        host_glibc = info["glibc"] or "",
        nvcc = info["nvcc"],
        overlay_include = "external/{}/overlay".format(rctx.name) if info["overlay"] else "",
        overlay_min_glibc = info["overlay_min_glibc"] if info["overlay"] else "",
        version = info["version"],
    ))
    rctx.file("defs.bzl", _defs_bzl(True, gpus))
    rctx.file("README", "CUDA {} from {} (found through {}).\n".format(info["version"], info["root"], info["how"]) + gpus_line)

# What makes Bazel run this rule again:
# - local: Bazel re-runs local repositories on every server start instead of
#   trusting the previous run's marker file. A GPU appears or goes away with
#   a reboot, a driver install or a new container, and each of those starts a
#   new Bazel server, so the answer is never older than the server.
# - configure: the rule inspects the machine, so `bazel fetch --configure
#   --force` re-runs it (with the other configure repositories, not the
#   downloads) without a server restart, e.g. after loading the driver.
# - environ: $CUDA_PATH, $CUDA_HOME and $PATH choose nvcc and nvidia-smi. Nothing is
#   watched for the GPU itself: the device nodes are character devices, which
#   rctx.watch would read to hash. $CUDA_VISIBLE_DEVICES is not read: tests do
#   not inherit the client's environment, so it would not describe what a
#   test sees.
local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    configure = True,
    environ = ["CUDA_HOME", "CUDA_PATH", "PATH"],
    local = True,
)

def _cuda_extension_impl(_module_ctx):
    local_cuda_repository(name = "local_cuda")

cuda = module_extension(implementation = _cuda_extension_impl)
