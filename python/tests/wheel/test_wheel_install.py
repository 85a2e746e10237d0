"""The x86-64 wheel installed into a fresh venv, used from outside the source tree.

The venv gets the locked torch (and the other locked packages) through a .pth file
naming their folders in the runfiles, not copies, then `pip install --no-index
--no-deps` of the wheel. Every command runs from a temporary folder with an
environment that names no runfiles, no MY_OPS_* variable and no PYTHONPATH, so
whatever works here works because of what the wheel itself holds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from wheel_testing import make_venv, run_in, runfile, wheel_path

# A package that exists only in the venv: the user's model imports it.
_TINY_PACKAGE = "tinyscale"
_USER_MODEL = """
import torch
import tinyscale
import my_ops


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 32, bias=False)
        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, 32))
        self.norm = my_ops.RMSNorm(32)

    def forward(self, x):
        y = my_ops.fused_bias_gelu(self.linear(x), self.bias)
        return self.norm(y) * tinyscale.SCALE


class Spec:
    def __init__(self, max_batch):
        torch.manual_seed(0)
        self.module = Block()
        self.example_inputs = (torch.randn(4, 32),)
        batch = torch.export.Dim("batch", min=1, max=max_batch)
        self.dynamic_shapes = ({0: batch},)
        self.max_batch = max_batch


def make(max_batch=16):
    return Spec(max_batch)
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _tiny_wheel(folder: Path) -> Path:
    """tinyscale-1.0-py3-none-any.whl, written here so that it exists nowhere else."""
    dist = f"{_TINY_PACKAGE}-1.0.dist-info"
    files = {
        f"{_TINY_PACKAGE}/__init__.py": b"SCALE = 0.5\n",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {_TINY_PACKAGE}\nVersion: 1.0\n".encode()
        ),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{dist}/RECORD,,"])
    path = folder / f"{_TINY_PACKAGE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{dist}/RECORD", record + "\n")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("wheel")
    return make_venv(root, [wheel_path(), _tiny_wheel(root)])


def _run(venv: dict, *cmd, timeout: int = 900) -> subprocess.CompletedProcess:
    return run_in(venv, *cmd, timeout=timeout)


def test_my_ops_is_the_installed_one(venv) -> None:
    proc = _run(
        venv,
        venv["python"],
        "-c",
        "import my_ops, os; print(os.path.realpath(my_ops.__file__)); "
        "print(os.path.realpath(my_ops.loaded_path()))",
    )
    assert proc.returncode == 0, proc.stderr
    package, library = proc.stdout.split()
    venv_dir = os.path.realpath(venv["bin"].parent)
    assert package.startswith(venv_dir + os.sep), package
    assert library == os.path.join(os.path.dirname(package), "lib", "libmy_ops.so")
    # Not a file of the source tree or of this test's runfiles.
    for elsewhere in (os.environ.get("TEST_SRCDIR", ""), os.environ.get("RUNFILES_DIR", "")):
        if elsewhere:
            assert not package.startswith(os.path.realpath(elsewhere)), package


def test_every_op_from_the_wheel(venv) -> None:
    script = venv["work"] / "check_installed_ops.py"
    script.write_bytes(Path(runfile("python/tests/wheel/check_installed_ops.py")).read_bytes())
    proc = _run(venv, venv["python"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ALL OK" in proc.stdout, proc.stdout
    assert "lib/libmy_ops.so" in proc.stdout


@pytest.fixture(scope="module")
def exported(venv) -> Path:
    (venv["work"] / "usermodel.py").write_text(_USER_MODEL)
    out = venv["work"] / "uo"
    proc = _run(venv, venv["bin"] / "my-ops-export", "--model", "usermodel:make", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify" in proc.stdout, proc.stdout
    return out


def test_export_of_a_model_that_imports_a_venv_only_package(venv, exported: Path) -> None:
    # The package is importable in the venv only, not in this test's interpreter.
    with pytest.raises(ImportError):
        __import__(_TINY_PACKAGE)
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["compiler"]["how"].startswith("g++ from PATH"), manifest["compiler"]
    assert manifest["target"] == "linux-x86_64"
    assert sorted(os.listdir(exported)) == sorted(
        [
            "model.pt2",
            "weights.bin",
            "weights.json",
            "sample_input.pt",
            "expected_output.pt",
            "manifest.json",
            "architecture.json",
        ]
    )


def test_my_ops_run_runs_the_export(venv, exported: Path) -> None:
    proc = _run(
        venv,
        venv["bin"] / "my-ops-run",
        "--package",
        exported / "model.pt2",
        "--input",
        exported / "sample_input.pt",
        "--output",
        venv["work"] / "output.pt",
        "--expect",
        exported / "expected_output.pt",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (venv["work"] / "output.pt").is_file()


def test_my_ops_run_passes_the_loaders_errors_through(venv) -> None:
    proc = _run(venv, venv["bin"] / "my-ops-run", "--package", "missing.pt2")
    # The loader's own usage error and exit status (2), not the launcher's.
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("loader: error: "), proc.stderr


def test_my_ops_run_refuses_an_empty_flag_value(venv) -> None:
    # `my-ops-run --public-key "$KEY"` with KEY unset: the loader's usage error, not a run that
    # checks no signature.
    required = ["--package", "m.pt2", "--input", "i.pt", "--output", "o.pt"]
    proc = _run(venv, venv["bin"] / "my-ops-run", *required, "--public-key", "")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == ["loader: error: --public-key needs a non-empty value"]


def test_bundle_from_the_wheel_runs_with_env_i(venv, exported: Path, tmp_path: Path) -> None:
    tarball = tmp_path / "b.tar.gz"
    proc = _run(venv, venv["bin"] / "my-ops-bundle", exported, "--out", tarball)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with tarfile.open(tarball) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
        tar.extractall(tmp_path / "x", filter="data")
    top = "my_ops_bundle"
    # The layout //deploy:bundle has: the same names, with the same modes.
    with tarfile.open(runfile(os.environ["MY_OPS_BUNDLE"])) as tar:
        assert modes == {m.name: m.mode for m in tar.getmembers()}
    assert modes[f"{top}/loader"] == modes[f"{top}/run.sh"] == 0o755
    libtorch = os.path.dirname(runfile(os.environ["LIBTORCH_LIB"]))
    # env -i: no Python, no venv, no runfiles; only LibTorch's folder, as on an edge host.
    proc = subprocess.run(
        ["env", "-i", f"TMPDIR={tmp_path}", str(tmp_path / "x" / top / "run.sh"), libtorch],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout


def test_bundle_refuses_an_export_whose_package_was_swapped(venv, exported, tmp_path) -> None:
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for name in os.listdir(exported):
        (swapped / name).write_bytes((exported / name).read_bytes())
    with open(swapped / "model.pt2", "ab") as f:
        f.write(b"\0")
    tarball = tmp_path / "b.tar.gz"
    proc = _run(venv, venv["bin"] / "my-ops-bundle", swapped, "--out", tarball)
    assert proc.returncode == 10, proc.stdout + proc.stderr  # integrity, as the loader says it
    assert "does not match manifest" in proc.stderr
    assert not tarball.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".b.tar.gz")] == []


def test_cross_target_from_the_wheel_says_so_in_one_line(venv) -> None:
    out = venv["work"] / "cross"
    proc = _run(venv, venv["bin"] / "my-ops-export", "--target", "linux-aarch64", "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("export: error: --target linux-aarch64"), lines
    assert not out.exists()


def test_python_dash_m_is_the_same_exporter(venv) -> None:
    proc = _run(venv, venv["python"], "-m", "my_ops.deploy.exporter", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: export "), proc.stdout
    script = _run(venv, venv["bin"] / "my-ops-export", "--help")
    assert script.stdout == proc.stdout
    # And the same flags and text as the Bazel build's exporter.
    bazel = subprocess.run(
        [runfile(os.environ["MY_OPS_EXPORTER"]), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bazel.returncode == 0, bazel.stderr
    assert bazel.stdout == proc.stdout


_EXPORT_FROM_PYTHON = """
import os, sys, tempfile
import torch
from my_ops.deploy import ExportError, export, load
import usermodel

spec = usermodel.make(8)
model = spec.module.train()
environ, tempdir = dict(os.environ), tempfile.gettempdir()
exported = export(
    model, spec.example_inputs, "from_python", dynamic_shapes=spec.dynamic_shapes, max_batch=8,
    mode="no-autotune",
)
assert model.training and dict(os.environ) == environ and tempfile.gettempdir() == tempdir
try:
    export(model, spec.example_inputs, "unused", max_batch=0)
except ExportError as e:
    print("refused:", e.code, e)
compiled = load(exported.package)
x = torch.randn(3, 32)
with torch.no_grad():
    got, want = compiled(x), model.eval()(x)
got = got[0] if isinstance(got, (list, tuple)) else got
torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
print("exported", exported.package, sorted(exported.times))
"""


def test_the_exporter_is_a_function_of_the_installed_package(venv) -> None:
    (venv["work"] / "usermodel.py").write_text(_USER_MODEL)
    script = venv["work"] / "export_from_python.py"
    script.write_text(_EXPORT_FROM_PYTHON)
    proc = _run(venv, venv["python"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refused: 2 max_batch must be >= 1" in proc.stdout, proc.stdout
    package = venv["work"] / "from_python" / "model.pt2"
    assert f"exported {package} ['compile', 'export', " in proc.stdout, proc.stdout
    assert not (venv["work"] / "unused").exists()
