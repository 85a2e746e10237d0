"""Concurrent runs of one package give bit-identical outputs.

1,000 runs from 8 threads sharing 4 model runners are compared bit for bit
with the output of 1,000 sequential runs (the loader checks every run against
its first one, and its first one against the sequential output file), then
the two output files are compared byte for byte. The wall times of both are
printed (see the test log).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from conftest import EXIT_CODES, error_lines, run_loader

RUNS = 1000


def _args(
    ops_library: str, package: Path, output: Path, *extra: str, runs: int = RUNS
) -> list[str]:
    return [
        "--ops", ops_library,
        "--package", str(package / "model.pt2"),
        "--input", str(package / "sample_input.pt"),
        "--output", str(output),
        "--runs", str(runs),
        *extra,
    ]  # fmt: skip


def _wall_ms(stdout: str) -> float:
    match = re.search(r"^runs (\d+) .* wall ([\d.]+) ms$", stdout, re.M)
    assert match, stdout
    assert int(match.group(1)) == RUNS
    return float(match.group(2))


def test_concurrent_runs_match_a_sequential_run(
    loader_bin: str, ops_library: str, default_package: Path, tmp_path: Path
) -> None:
    sequential = tmp_path / "sequential.pt"
    concurrent = tmp_path / "concurrent.pt"
    seq = run_loader(loader_bin, _args(ops_library, default_package, sequential), tmp_path / "t1")
    assert seq.returncode == 0, seq.stderr
    conc = run_loader(
        loader_bin,
        _args(ops_library, default_package, concurrent,
              "--threads", "8", "--runners", "4", "--expect", str(sequential), "--exact"),
        tmp_path / "t2",
    )  # fmt: skip
    assert conc.returncode == 0, conc.stderr
    assert "bit for bit" in conc.stdout
    assert concurrent.read_bytes() == sequential.read_bytes()
    # And both are right, not merely equal.
    expected = torch.load(default_package / "expected_output.pt")
    for got, want in zip(torch.load(concurrent), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)

    seq_ms, conc_ms = _wall_ms(seq.stdout), _wall_ms(conc.stdout)
    print(
        f"{RUNS} runs: sequential {seq_ms:.0f} ms, 8 threads / 4 runners {conc_ms:.0f} ms, "
        f"ratio sequential/concurrent {seq_ms / conc_ms:.2f}"
    )


def test_a_single_flipped_bit_is_caught(
    loader_bin: str, ops_library: str, default_package: Path, tmp_path: Path
) -> None:
    # The comparison above must be able to fail: one bit off in one element.
    reference = tmp_path / "reference.pt"
    proc = run_loader(
        loader_bin, _args(ops_library, default_package, reference, runs=1), tmp_path / "t1"
    )
    assert proc.returncode == 0, proc.stderr
    outputs = torch.load(reference)
    first = outputs[0].clone()
    first.view(-1).view(torch.int32)[0] ^= 1
    torch.save((first, *outputs[1:]), tmp_path / "flipped.pt")
    out = tmp_path / "out.pt"
    proc = run_loader(
        loader_bin,
        _args(ops_library, default_package, out, "--threads", "4", "--runners", "2",
              "--expect", str(tmp_path / "flipped.pt"), "--exact", runs=20),
        tmp_path / "t2",
    )  # fmt: skip
    assert proc.returncode == EXIT_CODES["expect_mismatch"], proc.stderr
    assert "bit-identical" in error_lines(proc.stderr)[0]
    # An allclose comparison would have let it through.
    proc = run_loader(
        loader_bin,
        _args(ops_library, default_package, out, "--expect", str(tmp_path / "flipped.pt"), runs=1),
        tmp_path / "t3",
    )
    assert proc.returncode == 0, proc.stderr
