"""requires_cpu_isa(): build a test only where the host CPU has a kernel tier."""

load("@local_cpu//:defs.bzl", "HOST_CPU_ARCH", "HOST_CPU_TIERS")
load(":cpu.bzl", "CPU_TIERS")

def host_cpu_tiers():
    """The kernel tiers of the host's architecture, lowest first, whether it has them or not."""
    return [tier for tier, _ in CPU_TIERS.get(HOST_CPU_ARCH, [("scalar", [])])]

def requires_cpu_isa(tier):
    """target_compatible_with for a test that caps the kernels at `tier` (MY_OPS_CPU_ISA).

    Compatible where the host has the tier and it is not the host's highest (the uncapped
    suites run that one already); incompatible, so reported as SKIPPED, elsewhere.
    """
    if tier in HOST_CPU_TIERS and tier != HOST_CPU_TIERS[-1]:
        return []
    return ["@platforms//:incompatible"]
