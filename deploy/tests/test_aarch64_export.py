"""A user's model exported with --target linux-aarch64 runs under qemu-aarch64, op by op.

The model (aarch64_ops_model.py) returns each op's output on its own; each is
compared with the op's float64 reference computed on this machine, at two
batch sizes. So this is also the numerics test of the op library's NEON
kernels, run on (emulated) aarch64 through the C++ loader.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import aarch64_ops_model
import pytest
import qemu_aarch64
import torch
from conftest import absolute_from_env, run_export

# Each output against its op's float64 reference rounded once to float32, with
# the op's own float32 tolerance (its spec): the suite's 2e-5 / 1e-5 by default
# (~170 ulp; rms norms over 131 values lose about sqrt(131) * 6e-8), exact for
# a copy.
BATCHES = (1, 3)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("export")
    out = base / "out"
    proc = run_export(
        [
            "--target",
            "linux-aarch64",
            "--model",
            "aarch64_ops_model:make_model",
            "--max-batch",
            "4",
            "--out",
            str(out),
        ],
        base / "tmp",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    assert "verify  ... skipped" in proc.stdout, proc.stdout
    return out


def test_package_is_for_aarch64(exported: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["target"] == "linux-aarch64"
    assert manifest["isa"] == "armv8-a"
    assert {"asimd", "fp"} <= set(manifest["cpu_features"])
    with zipfile.ZipFile(exported / "model.pt2") as z:
        metadata = [n for n in z.namelist() if n.endswith("wrapper_metadata.json")]
        assert len(metadata) == 1
        meta = json.loads(z.read(metadata[0]))
    assert meta["AOTI_MACHINE"] == "aarch64"
    # Inductor generated NEON code, not the host's AVX2 or scalar code.
    assert meta["AOTI_CPU_ISA"] == "ASIMD"


@pytest.mark.parametrize("batch", BATCHES)
def test_each_op_matches_its_float64_reference(exported: Path, batch: int, tmp_path: Path) -> None:
    prefix = qemu_aarch64.make_prefix(tmp_path)
    inputs = aarch64_ops_model.inputs(batch)
    torch.save(inputs, tmp_path / "input.pt")
    # Real paths: the loader opens nothing through a symbolic link.
    loader = os.path.realpath(absolute_from_env(os.environ["AARCH64_LOADER"]))
    library = os.path.realpath(absolute_from_env(os.environ["AARCH64_OPS_LIBRARY"]))
    out = tmp_path / "output.pt"
    argv = [
        loader,
        "--ops",
        library,
        "--package",
        str(exported / "model.pt2"),
        "--manifest",
        str(exported / "manifest.json"),
        "--input",
        str(tmp_path / "input.pt"),
        "--output",
        str(out),
    ]
    result = qemu_aarch64.run(prefix, argv, tmp_path / "tmp")
    assert result.returncode == 0, result.stderr
    got = torch.load(out)
    want = aarch64_ops_model.reference(aarch64_ops_model.OpsModel(), *inputs)
    checks = aarch64_ops_model.output_checks()
    assert len(got) == len(want) == len(checks)
    for (name, tol), g, w in zip(checks, got, want, strict=True):
        assert (g.shape, g.dtype) == (w.shape, w.dtype), name
        torch.testing.assert_close(g, w, **tol, msg=lambda m, n=name: f"{n}: {m}")
