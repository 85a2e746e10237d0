"""The x86-64 wheel installed into a fresh venv with torch 2.13.0, the oldest release it
supports (a CPU build), rather than the locked one: pip accepts the wheel's requirements, every
op runs, and the class that needs the companion says which torch it needs.
"""

from __future__ import annotations

import pytest
from wheel_testing import make_venv, run_in, runfile, wheel_path

OLDEST_TORCH = "2.13.0"


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> dict:
    return make_venv(tmp_path_factory.mktemp("wheel"), [wheel_path()])


def test_the_venvs_torch_is_the_oldest_supported_one(venv) -> None:
    proc = run_in(venv, venv["python"], "-c", "import torch; print(torch.__version__)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split("+")[0] == OLDEST_TORCH


def test_pip_finds_the_wheels_requirements_met(venv) -> None:
    proc = run_in(venv, venv["python"], "-m", "pip", "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_op_from_the_wheel(venv) -> None:
    proc = run_in(venv, venv["python"], runfile("python/tests/wheel/check_installed_ops.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ALL OK"


def test_rms_norm_runs_and_the_module_names_the_torch_it_needs(venv) -> None:
    script = """
import torch
import my_ops

x, w = torch.randn(3, 16, dtype=torch.float64), torch.rand(16, dtype=torch.float64)
want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
torch.testing.assert_close(my_ops.rms_norm(x, w, 1e-6), want)
assert my_ops.companion_path() is None
try:
    my_ops.RMSNorm(16)
except my_ops.CompanionUnavailableError as e:
    print(e)
"""
    proc = run_in(venv, venv["python"], "-c", script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("my_ops: my_ops.nn.RMSNorm needs torch 2.14.1;")


def test_my_ops_run_says_which_torch_its_loader_needs(venv) -> None:
    proc = run_in(venv, venv["bin"] / "my-ops-run", "--help")
    assert proc.returncode == 2  # the loader's usage status
    assert proc.stderr.splitlines() == [
        "my-ops-run: error: the loader is built for torch 2.14.1; this environment has torch "
        "2.13.0+cpu (pip install torch==2.14.1)"
    ]
