"""libcpuid_cap.so (MY_OPS_CPUID_CAP): what a capped process's CPUID reports.

The probe's bits are first checked against the kernel's own /proc/cpuinfo flags (so the probe
reads the right bits); then, under each tier the host has below its highest, the features that
define the tiers above it must be gone and those at or below it as the kernel lists them.
"""

import os
import subprocess
from pathlib import Path

import pytest

# The /proc/cpuinfo flags that define each x86-64 kernel tier, lowest first (as MY_OPS_CPU_ISA's
# tiers are defined in ops/common/cpu_isa.cpp); scalar needs none.
TIERS = [
    ("scalar", []),
    ("avx2", ["avx2", "fma", "f16c"]),
    ("avx512", ["avx512f", "avx512bw", "avx512vl"]),
    ("avx512_vnni", ["avx512_vnni"]),
    ("amx", ["amx_tile", "amx_int8"]),
]
CAPPED_FEATURES = {"scalar": ["avx"]}  # scalar hides AVX itself too


def _cpuinfo_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    raise AssertionError("/proc/cpuinfo has no flags line")


def _runfile(var: str) -> str:
    return str(Path(os.environ["TEST_SRCDIR"]) / os.environ[var])


PROBE = _runfile("MY_OPS_CPUID_PROBE")
CAP_LIBRARY = _runfile("MY_OPS_CPUID_CAP_LIBRARY")
FLAGS = _cpuinfo_flags()
HOST_TIERS = [
    t for i, (t, _) in enumerate(TIERS) if all(f in FLAGS for _, fs in TIERS[: i + 1] for f in fs)
]


def _capped_env(cap: str) -> dict[str, str]:
    # The library after what is preloaded already: under --config=asan, the ASan runtime first.
    preload = [p for p in (os.environ.get("LD_PRELOAD", ""), CAP_LIBRARY) if p]
    return dict(os.environ, MY_OPS_CPUID_CAP=cap, LD_PRELOAD=":".join(preload))


def _probe(cap: str | None) -> tuple[dict[str, dict[str, int]], list[str]]:
    env = dict(os.environ)
    env.pop("MY_OPS_CPUID_CAP", None)
    if cap is not None:
        env = _capped_env(cap)
    out = subprocess.run([PROBE], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    bits: dict[str, dict[str, int]] = {}
    rest = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] in "01":
            bits.setdefault(parts[0], {})[parts[1]] = int(parts[2])
        else:
            rest.append(line)
    return bits, rest


def test_probe_reads_the_bits_the_kernel_lists():
    bits, rest = _probe(None)
    for when in ("start", "own-handler", "signal-handler"):
        assert bits[when] == {name: int(name in FLAGS) for name in bits[when]}, when
    assert rest == ["fault reached the program's handler"] * 2


@pytest.mark.parametrize("tier", [t for t, _ in TIERS])
def test_cap_hides_the_tiers_above(tier):
    # A tier the host lacks, or its highest, has nothing to hide: skipped, saying which.
    if tier not in HOST_TIERS or tier == HOST_TIERS[-1]:
        pytest.skip(
            f"this CPU's tiers are {', '.join(HOST_TIERS)}: capping at {tier} hides nothing it has"
        )
    if "cpuid_fault" not in FLAGS:
        pytest.skip("this CPU or hypervisor has no CPUID faulting (flag cpuid_fault)")
    names = [t for t, _ in TIERS]
    kept = [f for t, fs in TIERS[: names.index(tier) + 1] for f in fs]
    hidden = [f for _, fs in TIERS[names.index(tier) + 1 :] for f in fs] + CAPPED_FEATURES.get(
        tier, []
    )
    bits, rest = _probe(tier)
    for when in ("start", "own-handler", "signal-handler"):
        for f in kept:
            assert bits[when][f] == int(f in FLAGS), (when, f)
        for f in hidden:
            assert bits[when][f] == 0, (when, f)
    # A real fault still reaches the handler the program installed after the cap's own.
    assert rest == ["fault reached the program's handler"] * 2


def test_unknown_tier_is_one_line_and_exit_2():
    out = subprocess.run([PROBE], env=_capped_env("avx3"), capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "libcpuid_cap: MY_OPS_CPUID_CAP=avx3: not a tier (scalar, avx2, avx512, avx512_vnni, amx)"
    ]
