"""MY_OPS_CPU_ISA: the cap on the CPU kernels' instruction-set tier, and its refusals.

Each case runs in a fresh interpreter: the tier is picked once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import my_ops
from testing_utils import run_this_file

# The tiers of each architecture, lowest first (ops/common/cpu_isa.h).
ARCH_TIERS = {
    "x86_64": ["scalar", "avx2", "avx512", "avx512_vnni", "amx"],
    "aarch64": ["scalar", "neon", "neon_dot", "neon_i8mm"],
}
ARCH = os.uname().machine
TIERS = ARCH_TIERS.get(ARCH, ["scalar"])

_REPORT = "import my_ops; print(my_ops.cpu_isa())"


def _run(cap: str | None, script: str = _REPORT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != my_ops.CPU_ISA_ENV_VAR}
    if cap is not None:
        env[my_ops.CPU_ISA_ENV_VAR] = cap
    return subprocess.run(
        [sys.executable, "-c", script],
        env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_tiers_this_cpu_has_are_its_architectures_lowest_first():
    have = my_ops.cpu_isas()
    assert have[0] == "scalar"
    assert have == TIERS[: len(have)], (have, TIERS)


@pytest.mark.skipif(
    my_ops.CPU_ISA_ENV_VAR in os.environ, reason="this run is capped: the uncapped tier is not it"
)
def test_uncapped_runs_at_the_highest_tier():
    assert my_ops.cpu_isa() == my_ops.cpu_isas()[-1]
    proc = _run(None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == my_ops.cpu_isas()[-1]


@pytest.mark.parametrize("tier", TIERS)
def test_a_cap_runs_at_that_tier(tier):
    if tier not in my_ops.cpu_isas():
        pytest.skip(f"this CPU lacks the {tier} tier")
    proc = _run(tier)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == tier


def test_an_unknown_tier_is_refused_at_import_in_one_line():
    proc = _run("avx9000")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("my_ops._library.CpuIsaError: MY_OPS_CPU_ISA=avx9000: unknown tier"), (
        proc.stderr
    )
    assert ", ".join(TIERS) in last


def test_another_architectures_tier_is_refused():
    other = "neon" if ARCH == "x86_64" else "avx2"
    proc = _run(other)
    assert proc.returncode != 0
    assert f"MY_OPS_CPU_ISA={other}: unknown tier" in proc.stderr, proc.stderr


def test_a_tier_the_cpu_lacks_is_refused_naming_what_it_has():
    lacking = [t for t in TIERS if t not in my_ops.cpu_isas()]
    if not lacking:
        pytest.skip(f"this CPU has every {ARCH} tier: none to refuse")
    proc = _run(lacking[-1])
    assert proc.returncode != 0
    have = ", ".join(my_ops.cpu_isas())
    assert f"MY_OPS_CPU_ISA={lacking[-1]}: this CPU lacks that tier (it has {have})" in (
        proc.stderr
    ), proc.stderr


def test_the_refusal_is_a_value_error_a_caller_can_catch():
    script = "try:\n    import my_ops\nexcept ValueError as e:\n    print(type(e).__name__, e)\n"
    proc = _run("avx9000", script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CpuIsaError MY_OPS_CPU_ISA=avx9000: unknown tier"), proc.stdout


if __name__ == "__main__":
    run_this_file(__file__)
