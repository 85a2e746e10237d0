"""Loading libmy_ops.so by hand before ``import my_ops``, as most tutorials do.

Each case runs in a fresh interpreter: the order in which the library and the package
are loaded is the thing under test, and this process has both loaded already.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import my_ops
from testing_utils import run_this_file

# Loads the library the way the torch tutorials do, then imports the package, then uses
# the raw torch.ops / torch.classes entry points (the package's own wrappers would load
# the library on first use and hide a missing registration).
_BY_HAND_FIRST = r"""
import os
import sys

import torch

lib = os.environ["LOAD_ORDER_LIBRARY"]
torch.ops.load_library(lib)

import my_ops
from op_table import SPECS, assert_matches_reference, make_args, tensor_args

assert my_ops.is_loaded(), "import my_ops did not take over the library loaded by hand"
assert my_ops.loaded_path() == os.path.realpath(lib), my_ops.loaded_path()

torch.manual_seed(0)
# float64 throughout, so the float64 reference is exact up to libm rounding (a few ulp).
for spec in SPECS:
    args = make_args(spec, (3, 8), torch.float64, "cpu")

    class Model(torch.nn.Module):
        def forward(self, *tensors):
            given = iter(tensors)
            return spec.op(*(next(given) if torch.is_tensor(a) else a for a in args))

    tensors = tuple(tensor_args(args))
    ep = torch.export.export(Model(), tensors, strict=False)
    assert spec.op in {n.target for n in ep.graph.nodes}, ep.graph
    assert_matches_reference(spec, args, ep.module()(*tensors))
    result = torch.library.opcheck(spec.op, args)
    assert all(v == "SUCCESS" for v in result.values()), (spec.name, result)

x, weight = torch.randn(3, 8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
ep = torch.export.export(my_ops.RMSNorm(weight, 1e-5), (x,), strict=False)
targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
assert any("call_torchbind" in t for t in targets), targets
want = my_ops.nn.reference(x, weight, 1e-5)
torch.testing.assert_close(ep.module()(x), want, rtol=1e-9, atol=1e-10)

# Asking the package to load again must neither open the library again nor register the
# fakes and autograd formulas a second time (a second one shows up as "(inactive)").
assert my_ops.load_library() == os.path.realpath(lib)
assert my_ops.load_library(lib) == os.path.realpath(lib)
other = os.environ.get("LOAD_ORDER_OTHER_COPY")
if other:
    try:
        my_ops.load_library(other)
    except RuntimeError as e:
        assert "already loaded" in str(e), e
    else:
        raise AssertionError("a second copy of the library was loaded")
for spec in SPECS:
    dump = torch._C._dispatch_dump(spec.qualname)
    assert "Meta:" in dump and "(inactive)" not in dump, dump
print("LOAD_ORDER_OK")
"""

# Only the library, never the package: what torch says about the missing fakes.
_WITHOUT_PACKAGE = r"""
import os
import sys

import torch

torch.ops.load_library(os.environ["LOAD_ORDER_LIBRARY"])
names = sorted(
    s.name.split("::")[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("my_ops::")
)
for name in names:
    print("PYSTUB", name, torch._C._dispatch_pystub(f"my_ops::{name}", ""))
first = getattr(torch.ops.my_ops, names[0]).default
meta_args = [
    torch.empty(2, 4, device="meta") if isinstance(a.type, torch.TensorType) else a.default_value
    for a in first._schema.arguments
]
try:
    first(*meta_args)
except NotImplementedError as e:
    print("META_ERROR", e)
print("IMPORTED_BY_TORCH", "my_ops" in sys.modules)

import my_ops
from op_table import make_args

# The fakes are registered from the module the library names (torch checks that on the
# first fake call), so a meta call now works.
out = first(*make_args(my_ops.ops.SPECS[names[0]], (2, 4), torch.float32, "meta"))
out = out if isinstance(out, tuple) else (out,)
print("META_AFTER_IMPORT", *sorted({str(o.device) for o in out}))
"""


def _clean_env(**extra: str) -> dict:
    # Without these, the package would find the library itself (runfiles) and the order
    # under test would not happen.
    hidden = ("MY_OPS_LIBRARY", "RUNFILES_DIR", "TEST_SRCDIR", "RUNFILES_MANIFEST_FILE")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env.update(extra)
    return env


def _run(script: str, package_root: Path, env: dict) -> subprocess.CompletedProcess:
    own_root = os.path.realpath(Path(my_ops.__file__).resolve().parents[1])
    path = [str(package_root)] + [p for p in sys.path if p and os.path.realpath(p) != own_root]
    return subprocess.run(
        [sys.executable, "-c", script],
        env=dict(env, PYTHONPATH=os.pathsep.join(path)),
        cwd=package_root,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _assert_ok(proc: subprocess.CompletedProcess) -> None:
    output = f"exit {proc.returncode}\n{proc.stdout}{proc.stderr[-4000:]}"
    assert proc.returncode == 0, output
    assert "LOAD_ORDER_OK" in proc.stdout, output


@pytest.fixture()
def real_library() -> str:
    path = my_ops.loaded_path()
    assert path is not None and os.path.isfile(path)
    return path


@pytest.fixture()
def package_copy(tmp_path) -> Path:
    """The package alone, where the library is not beside it, so it cannot find one."""
    root = tmp_path / "site"
    shutil.copytree(
        Path(my_ops.__file__).parent, root / "my_ops", ignore=shutil.ignore_patterns("*.pyc")
    )
    return root


def test_library_loaded_by_torch_before_import(real_library, package_copy):
    proc = _run(_BY_HAND_FIRST, package_copy, _clean_env(LOAD_ORDER_LIBRARY=real_library))
    _assert_ok(proc)


def test_other_copy_loaded_by_torch_before_import(tmp_path, real_library, package_copy):
    # The package would find real_library through MY_OPS_LIBRARY; opening it as well as the
    # copy loaded by hand would register the namespace twice, which aborts the process.
    copy = tmp_path / "elsewhere" / "libmy_ops.so"
    copy.parent.mkdir()
    shutil.copy(real_library, copy)
    env = _clean_env(
        LOAD_ORDER_LIBRARY=str(copy),
        LOAD_ORDER_OTHER_COPY=real_library,
        MY_OPS_LIBRARY=real_library,
    )
    proc = _run(_BY_HAND_FIRST, package_copy, env)
    _assert_ok(proc)


def test_library_names_the_package_that_holds_the_fakes(real_library, package_copy):
    proc = _run(_WITHOUT_PACKAGE, package_copy, _clean_env(LOAD_ORDER_LIBRARY=real_library))
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}{proc.stderr[-4000:]}"
    lines = proc.stdout.splitlines()
    for name in my_ops.ops.SPECS:
        assert f"PYSTUB {name} ('my_ops', '')" in lines, proc.stdout
    error = next((line for line in lines if line.startswith("META_ERROR")), "")
    assert "import the 'my_ops' Python module" in error, proc.stdout
    # torch only names the package; it never imports it on its own.
    assert "IMPORTED_BY_TORCH False" in lines, proc.stdout
    assert "META_AFTER_IMPORT meta" in lines, proc.stdout + proc.stderr


if __name__ == "__main__":
    run_this_file(__file__)
