"""The op library's CPU kernel tiers on linux-aarch64, under qemu, one emulated core at a time.

The cross-built //ops:kernel_tiers_test checks every tier the core has against the portable
kernels (exact integer products, the float epilogues' rounding) and skips, naming it, each tier
the core lacks. Here each core must run exactly its tiers: a tier that the probe missed would be
skipped, one that it claimed wrongly would die of an illegal instruction.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import qemu_aarch64
from conftest import absolute_from_env

# qemu's cores and the tiers each has (ops/common/cpu_isa.h: getauxval's ASIMD, ASIMDDP, I8MM).
CORES = {
    "max": ["scalar", "neon", "neon_dot", "neon_i8mm"],
    "cortex-a76": ["scalar", "neon", "neon_dot"],
    "cortex-a53": ["scalar", "neon"],
}
TIERS = ["scalar", "neon", "neon_dot", "neon_i8mm"]
# The products' cases, each run at every tier the core has.
CASES = [
    "Int8ProductsAreExact",
    "Int8ChannelRangesWriteOnlyTheirChannels",
    "Int4ProductsAreExact",
    "RandomInputsWithinEpilogueRounding",
    "PackedLinearMatchesReference",
]


@pytest.mark.parametrize("core", sorted(CORES))
def test_each_core_runs_its_tiers_and_skips_the_others(core, tmp_path):
    binary = Path(absolute_from_env(os.environ["AARCH64_KERNEL_TIERS_TEST"]))
    prefix = qemu_aarch64.make_prefix(tmp_path / "prefix")
    argv = [str(binary), "--gtest_filter=" + ":".join(f"*{c}*" for c in CASES) + ":CpuIsa.*"]
    proc = qemu_aarch64.run(prefix, argv, tmp_path / "tmp", cpu=core)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = proc.stdout
    for case in CASES:
        for tier in TIERS:
            name = f"Tiers/CpuTier.{case}/{tier}"
            if tier in CORES[core]:
                assert re.search(rf"\[       OK \] {re.escape(name)} ", out), (name, out[-3000:])
            else:
                assert re.search(rf"\[  SKIPPED \] {re.escape(name)} ", out), (name, out[-3000:])
                assert f"this CPU lacks the {tier} tier" in out
    assert "[  PASSED  ]" in out
