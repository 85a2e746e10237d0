"""Finds the GPUs on the host and describes them as the `@local_gpu` repository.

Whether the host has a GPU decides whether tests that run CUDA kernels are
built at all (see requires_cuda_device() in defs.bzl). rules_cuda has no such
notion: it knows about toolkits, and a toolkit builds kernels without a GPU.
"""

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

def _local_gpu_impl(rctx):
    gpus, how = _find_gpus(rctx)
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "CUDA_DEVICE_FOUND = {}\n".format(gpus > 0))
    rctx.file("README", "GPUs: {} ({}).\n".format(gpus, how))

# What makes Bazel run this rule again:
# - local: Bazel re-runs local repositories on every server start instead of
#   trusting the previous run's marker file. A GPU appears or goes away with
#   a reboot, a driver install or a new container, and each of those starts a
#   new Bazel server, so the answer is never older than the server.
# - configure: the rule inspects the machine, so `bazel fetch --configure
#   --force` re-runs it (with the other configure repositories, not the
#   downloads) without a server restart, e.g. after loading the driver.
# - environ: $PATH chooses nvidia-smi. Nothing is watched for the GPU itself:
#   the device nodes are character devices, which rctx.watch would read to
#   hash. $CUDA_VISIBLE_DEVICES is not read: tests do not inherit the
#   client's environment, so it would not describe what a test sees.
local_gpu_repository = repository_rule(
    implementation = _local_gpu_impl,
    configure = True,
    environ = ["PATH"],
    local = True,
)

def _gpu_extension_impl(_module_ctx):
    local_gpu_repository(name = "local_gpu")

gpu = module_extension(implementation = _gpu_extension_impl)
