"""The edge bundle runs from any folder with only LibTorch: no Python, no Bazel."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
from conftest import HOST_BUNDLE_FILES, absolute_from_env, writable_copy

from deploy.exporter.loading import load


def _runfile(env_var: str) -> Path:
    value = os.environ[env_var]
    path = Path(absolute_from_env(value))
    assert path.exists(), f"{env_var}={value} not found"
    return path


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(_runfile("BUNDLE_TAR")) as tar:
        tar.extractall(where, filter="data")
    return where / "my_ops_bundle"


def test_bundle_contents(bundle: Path) -> None:
    names = sorted(p.name for p in bundle.iterdir())
    assert names == sorted(HOST_BUNDLE_FILES)
    assert os.access(bundle / "run.sh", os.X_OK)
    assert os.access(bundle / "loader", os.X_OK)


def _run_bundle(bundle: Path, scratch: Path, *args: str) -> subprocess.CompletedProcess:
    libtorch_lib = _runfile("LIBTORCH_LIB").parent
    # env -i: no PATH to Python, no Bazel runfiles variables; only TMPDIR, so
    # the loader's scratch space stays inside the test's sandbox.
    return subprocess.run(
        [
            "env",
            "-i",
            f"TMPDIR={scratch}",
            "/bin/sh",
            str(bundle / "run.sh"),
            str(libtorch_lib),
            *args,
        ],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bundle_runs_without_python_or_bazel(bundle: Path, tmp_path: Path) -> None:
    result = _run_bundle(bundle, tmp_path)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == [], "run.sh left files behind"


def test_bundle_rejects_a_wrong_expected_output(bundle: Path, tmp_path: Path) -> None:
    # run.sh's verdict comes from the loader's --expect check: prove it can fail.
    expected = torch.load(bundle / "expected_output.pt")
    wrong = tmp_path / "bundle"
    subprocess.run(["cp", "-a", str(bundle), str(wrong)], check=True)
    torch.save(tuple(t + 1 for t in expected), wrong / "expected_output.pt")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = _run_bundle(wrong, scratch)
    assert result.returncode == 9, (result.returncode, result.stderr)  # the loader's --expect code
    assert "differs from" in result.stderr, result.stderr


def test_bundle_refuses_a_tampered_package(bundle: Path, tmp_path: Path) -> None:
    # run.sh keeps the loader's manifest check on: one flipped byte stops it.
    wrong = tmp_path / "bundle"
    subprocess.run(["cp", "-a", str(bundle), str(wrong)], check=True)
    package = wrong / "model.pt2"
    package.chmod(0o644)
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0x01
    package.write_bytes(bytes(data))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = _run_bundle(wrong, scratch)
    assert result.returncode == 10, result.stderr
    assert str(package) in result.stderr


def test_bundle_expected_output_matches_a_python_run(bundle: Path) -> None:
    import my_ops  # noqa: F401  (registers the ops that the package calls)

    inputs = torch.load(bundle / "sample_input.pt")
    expected = torch.load(bundle / "expected_output.pt")
    compiled = load(str(bundle / "model.pt2"))
    got = compiled(*inputs)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_run_sh_runs_the_bundle_with_a_weights_file(
    bundle: Path, retrained_weights: Path, tmp_path: Path
) -> None:
    # The bundle's package with another training run's weights, checked against that model's
    # eager outputs (the weights folder's own sample): what a fleet runs after an update.
    result = _run_bundle(bundle, tmp_path, "--weights", str(retrained_weights))
    assert result.returncode == 0, result.stderr
    assert "run.sh: OK" in result.stdout


def test_run_sh_refuses_weights_for_another_package(
    bundle: Path, retrained_weights: Path, tmp_path: Path
) -> None:
    weights = writable_copy(retrained_weights, tmp_path / "weights")
    manifest = json.loads((weights / "weights.json").read_text())
    manifest["package"]["sha256"] = "f" * 64
    (weights / "weights.json").write_text(json.dumps(manifest))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = _run_bundle(bundle, scratch, f"--weights={weights / 'weights.bin'}")
    assert result.returncode == 10, (result.returncode, result.stderr)
    assert "is for another package" in result.stderr, result.stderr


def test_run_sh_names_what_a_weights_folder_lacks(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    result = _run_bundle(bundle, tmp_path, "--weights", str(tmp_path / "weights"))
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "holds no weights.bin" in result.stderr, result.stderr


@pytest.mark.parametrize("given", [["--weights", ""], ["--weights="]], ids=["separate", "inline"])
def test_run_sh_refuses_an_empty_weights_value(
    bundle: Path, tmp_path: Path, given: list[str]
) -> None:
    # `run.sh --weights "$W"` with W unset must not run the package's own weights and call
    # that a pass.
    result = _run_bundle(bundle, tmp_path, *given)
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip() == "run.sh: error: --weights needs a non-empty value", (
        result.stderr
    )
    assert "run.sh: OK" not in result.stdout
