"""Finds the kernel tiers the host CPU has and describes them as the `@local_cpu` repository.

The op library picks its kernels' tier at run time (ops/common/cpu_isa.h) and MY_OPS_CPU_ISA
caps it. A test that runs the op suites at one tier is built only where the host has that tier
(requires_cpu_isa() in defs.bzl): elsewhere the cap would be refused and the test could only
fail, so Bazel reports it as SKIPPED instead.
"""

# The kernel tiers of each architecture, lowest first, with the /proc/cpuinfo flags each
# needs on top of the tiers below it (Linux lists a feature only when the kernel saves its
# registers, so the flags also say that the OS supports it). Keep in step with cpu_isa.cpp.
CPU_TIERS = {
    "aarch64": [
        ("scalar", []),
        ("neon", ["asimd"]),
        ("neon_dot", ["asimddp"]),
        ("neon_i8mm", ["i8mm"]),
    ],
    "x86_64": [
        ("scalar", []),
        ("avx2", ["avx2", "fma", "f16c"]),
        ("avx512", ["avx512f", "avx512bw", "avx512vl"]),
        ("avx512_vnni", ["avx512_vnni"]),
        ("amx", ["amx_tile", "amx_int8"]),
    ],
}

def host_tiers(arch, cpuinfo):
    """The tiers of `arch` whose flags /proc/cpuinfo's text lists.

    Args:
      arch: "x86_64" or "aarch64"; any other has the scalar tier alone.
      cpuinfo: the text of /proc/cpuinfo.

    Returns:
      The tier names, lowest first, up to the first whose flags are missing.
    """
    flags = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            for flag in value.replace("\t", " ").split(" "):
                flags[flag] = True
    tiers = []
    for tier, needs in CPU_TIERS.get(arch, [("scalar", [])]):
        if [f for f in needs if f not in flags]:
            break
        tiers.append(tier)
    return tiers

def _local_cpu_impl(rctx):
    arch = {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(rctx.os.arch, rctx.os.arch)
    cpuinfo = rctx.path("/proc/cpuinfo")
    text = rctx.read(cpuinfo) if cpuinfo.exists else ""
    tiers = host_tiers(arch, text)
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "HOST_CPU_ARCH = {}\nHOST_CPU_TIERS = {}\n".format(repr(arch), repr(tiers)))
    rctx.file("README", "CPU tiers on this {} host: {} (from /proc/cpuinfo).\n".format(arch, ", ".join(tiers)))

# local and configure as @local_gpu: the answer is never older than the Bazel server (a VM
# moved to another CPU restarts it), and `bazel fetch --configure --force` re-reads it.
local_cpu_repository = repository_rule(
    implementation = _local_cpu_impl,
    configure = True,
    local = True,
)

def _cpu_extension_impl(_module_ctx):
    local_cpu_repository(name = "local_cpu")

cpu = module_extension(implementation = _cpu_extension_impl)
