"""Locating and loading libmy_ops.so."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import my_ops
from my_ops import _library, _runfiles

PROBE = (
    "import torch, my_ops\n"
    "print('FILE', my_ops.__file__)\n"
    "print('LOADED', my_ops.is_loaded(), my_ops.loaded_path())\n"
    "try:\n"
    "    out = my_ops.RMSNorm(2)(torch.zeros(2))\n"
    "    print('RESULT', out.tolist())\n"
    "except my_ops.LibraryNotFoundError as e:\n"
    "    print('NOTFOUND', e.paths_tried)\n"
    "    print(e)\n"
)


def _clean_env(**overrides: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MY_OPS_LIBRARY", "RUNFILES_DIR", "TEST_SRCDIR", "RUNFILES_MANIFEST_FILE")
    }
    env.update(overrides)
    return env


def _probe(env: dict, pythonpath: list[str]) -> str:
    env = dict(env, PYTHONPATH=os.pathsep.join(pythonpath))
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=pythonpath[0],  # the package copy comes first, not the checkout in the cwd
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The probe must import the package copy, not the checkout.
    assert f"FILE {pythonpath[0]}" in proc.stdout, proc.stdout
    return proc.stdout


def _sys_path_without_my_ops() -> list[str]:
    package_root = str(Path(my_ops.__file__).resolve().parents[1])
    return [p for p in sys.path if p and os.path.realpath(p) != package_root]


@pytest.fixture(scope="module")
def real_library() -> str:
    path = my_ops.loaded_path()
    assert path is not None
    return path


@pytest.fixture()
def package_copy(tmp_path) -> Path:
    """A copy of the my_ops package at <tmp>/python/my_ops (a runfiles-like layout)."""
    root = tmp_path / "python"
    shutil.copytree(Path(my_ops.__file__).parent, root / "my_ops")
    return root


def test_missing_env_path_names_every_path_and_the_variable(tmp_path, package_copy):
    missing = tmp_path / "nope" / "libmy_ops.so"
    out = _probe(
        _clean_env(MY_OPS_LIBRARY=str(missing)), [str(package_copy), *_sys_path_without_my_ops()]
    )
    assert "LOADED False None" in out
    assert "NOTFOUND" in out and str(missing) in out
    assert "MY_OPS_LIBRARY" in out and "load_library" in out


@pytest.fixture()
def clean_env(monkeypatch):
    for var in ("MY_OPS_LIBRARY", "RUNFILES_DIR", "TEST_SRCDIR", "RUNFILES_MANIFEST_FILE"):
        monkeypatch.delenv(var, raising=False)
    # Runfiles objects are kept per environment; the tests swap the library.
    _runfiles._library_for.cache_clear()
    yield monkeypatch
    _runfiles._library_for.cache_clear()


def test_not_found_anywhere_lists_all_candidates(tmp_path, clean_env, package_copy):
    runfiles = tmp_path / "runfiles"
    clean_env.setenv("RUNFILES_DIR", str(runfiles))
    with pytest.raises(my_ops.LibraryNotFoundError) as info:
        _library.find_library(package_copy / "my_ops")
    message = str(info.value)
    for expected in (
        runfiles / "_main" / "ops" / "libmy_ops.so",
        tmp_path / "ops" / "libmy_ops.so",  # package-relative location
    ):
        assert str(expected) in message
        assert str(expected) in info.value.paths_tried
    assert "MY_OPS_LIBRARY" in message


def test_found_via_env_var(tmp_path, clean_env, real_library):
    clean_env.setenv("MY_OPS_LIBRARY", real_library)
    assert _library.find_library(tmp_path) == real_library


def test_env_var_to_missing_file_does_not_fall_through(tmp_path, clean_env, package_copy):
    lib = tmp_path / "ops" / "libmy_ops.so"
    lib.parent.mkdir()
    lib.touch()
    clean_env.setenv("MY_OPS_LIBRARY", str(tmp_path / "missing.so"))
    with pytest.raises(my_ops.LibraryNotFoundError, match="MY_OPS_LIBRARY"):
        _library.find_library(package_copy / "my_ops")


def test_found_via_runfiles_dir(tmp_path, clean_env, real_library):
    for var in ("RUNFILES_DIR", "TEST_SRCDIR"):
        lib = tmp_path / var / "_main" / "ops" / "libmy_ops.so"
        lib.parent.mkdir(parents=True)
        lib.symlink_to(real_library)
        clean_env.setenv(var, str(tmp_path / var))
        assert _library.find_library(tmp_path / "elsewhere" / "my_ops") == str(lib)
        clean_env.delenv(var)


class _FakeRunfiles:
    """What python.runfiles.runfiles.Create() returns, answering one path."""

    def __init__(self, answer: str, calls: list):
        self.answer, self.calls = answer, calls

    def Rlocation(self, key, source_repo=None):  # noqa: N802 - the library's name
        self.calls.append((key, source_repo))
        return self.answer


def _fake_runfiles_library(monkeypatch, create) -> None:
    module = types.ModuleType("python.runfiles")
    module.runfiles = types.SimpleNamespace(Create=create)
    monkeypatch.setitem(sys.modules, "python", types.ModuleType("python"))
    monkeypatch.setitem(sys.modules, "python.runfiles", module)


def test_runfiles_library_comes_before_the_variables(tmp_path, clean_env):
    # The library also reads a runfiles manifest (all that `bazel run` sets), which
    # RUNFILES_DIR and TEST_SRCDIR by hand cannot.
    calls: list = []
    answer = str(tmp_path / "from_the_library" / "libmy_ops.so")
    _fake_runfiles_library(clean_env, lambda: _FakeRunfiles(answer, calls))
    clean_env.setenv("RUNFILES_DIR", str(tmp_path / "rf"))
    clean_env.setenv("TEST_SRCDIR", str(tmp_path / "srcdir"))
    paths = _library.candidate_paths(tmp_path / "python" / "my_ops")
    assert paths[:4] == [
        str(tmp_path / "python" / "my_ops" / "lib" / "libmy_ops.so"),
        answer,
        str(tmp_path / "rf" / "_main" / "ops" / "libmy_ops.so"),
        str(tmp_path / "srcdir" / "_main" / "ops" / "libmy_ops.so"),
    ]
    # Keys as this repository names them, whichever file the package was loaded from.
    assert calls == [("_main/ops/libmy_ops.so", "")]


def test_a_runfiles_library_that_fails_leaves_the_variables(tmp_path, clean_env, real_library):
    def broken():
        raise OSError("cannot read the runfiles manifest")

    _fake_runfiles_library(clean_env, broken)
    lib = tmp_path / "rf" / "_main" / "ops" / "libmy_ops.so"
    lib.parent.mkdir(parents=True)
    lib.symlink_to(real_library)
    clean_env.setenv("RUNFILES_DIR", str(tmp_path / "rf"))
    assert _library.find_library(tmp_path / "elsewhere" / "my_ops") == str(lib)


def test_without_the_runfiles_library_the_variables_are_read(tmp_path, clean_env):
    clean_env.setitem(sys.modules, "python.runfiles", None)  # import fails
    clean_env.setenv("TEST_SRCDIR", str(tmp_path / "srcdir"))
    paths = _library.candidate_paths(tmp_path / "python" / "my_ops")
    assert paths[1] == str(tmp_path / "srcdir" / "_main" / "ops" / "libmy_ops.so")


def test_a_library_inside_the_package_wins_over_runfiles(tmp_path, clean_env, package_copy):
    # An installed wheel: <site-packages>/my_ops/lib/libmy_ops.so, whatever
    # runfiles tree the process happens to run in.
    packaged = package_copy / "my_ops" / "lib" / "libmy_ops.so"
    packaged.parent.mkdir()
    packaged.touch()
    other = tmp_path / "rf" / "_main" / "ops" / "libmy_ops.so"
    other.parent.mkdir(parents=True)
    other.touch()
    clean_env.setenv("RUNFILES_DIR", str(tmp_path / "rf"))
    assert _library.find_library(package_copy / "my_ops") == str(packaged)


def test_found_relative_to_package(tmp_path, clean_env, real_library, package_copy):
    # <root>/python/my_ops/../../ops/libmy_ops.so, as in a Bazel runfiles tree.
    lib = tmp_path / "ops" / "libmy_ops.so"
    lib.parent.mkdir()
    lib.symlink_to(real_library)
    assert _library.find_library(package_copy / "my_ops") == str(lib)


def test_found_relative_to_symlinked_package(tmp_path, clean_env, real_library, package_copy):
    # Package files that are symlinks into a source tree (Bazel runfiles) still find the
    # library next to the unresolved package directory.
    runfiles_pkg = tmp_path / "rf" / "_main" / "python" / "my_ops"
    runfiles_pkg.mkdir(parents=True)
    for f in (package_copy / "my_ops").iterdir():
        (runfiles_pkg / f.name).symlink_to(f)
    lib = tmp_path / "rf" / "_main" / "ops" / "libmy_ops.so"
    lib.parent.mkdir()
    lib.symlink_to(real_library)
    assert _library.find_library(runfiles_pkg) == str(lib)


def test_explicit_load_of_missing_path(tmp_path):
    with pytest.raises(my_ops.LibraryNotFoundError) as info:
        my_ops.load_library(tmp_path / "missing.so")
    assert str(tmp_path / "missing.so") in str(info.value)
    assert isinstance(info.value, ImportError)
    assert info.value.paths_tried == [str(tmp_path / "missing.so")]


def test_load_library_is_idempotent(real_library):
    assert my_ops.is_loaded()
    assert my_ops.load_library(real_library) == real_library
    assert my_ops.load_library() == real_library
    assert real_library in torch.ops.loaded_libraries
    x = torch.randn(3, 4)
    torch.testing.assert_close(
        my_ops.RMSNorm(4, eps=0.0)(x), my_ops.nn.reference(x, torch.ones(4), 0.0)
    )


def test_second_copy_is_refused(tmp_path, real_library):
    copy = tmp_path / "libmy_ops_copy.so"
    shutil.copy(real_library, copy)
    with pytest.raises(RuntimeError, match="already loaded"):
        my_ops.load_library(copy)


def test_candidate_order(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_OPS_LIBRARY", str(tmp_path / "env.so"))
    monkeypatch.setenv("RUNFILES_DIR", str(tmp_path / "rf"))
    monkeypatch.delenv("TEST_SRCDIR", raising=False)
    monkeypatch.delenv("RUNFILES_MANIFEST_FILE", raising=False)
    paths = _library.candidate_paths()
    assert paths[0] == str(tmp_path / "env.so")
    assert str(tmp_path / "rf" / "_main" / "ops" / "libmy_ops.so") in paths
    assert paths[-1].endswith(os.path.join("ops", "libmy_ops.so"))
    # Where the library sits beside the package in a Bazel runfiles tree.
    package_relative = Path(my_ops.__file__).parent / ".." / ".." / "ops" / "libmy_ops.so"
    assert os.path.normpath(package_relative) in paths


@pytest.mark.parametrize("key", ["CPU", "CUDA"])
def test_every_op_has_a_kernel_for_each_backend_built(real_library, key):
    # Registration alone, no device needed: a CUDA kernel missing from ops/registration.cpp
    # shows here on a machine without a GPU.
    my_ops.load_library(real_library)
    ops = sorted(s.name for s in torch._C._jit_get_all_schemas() if s.name.startswith("my_ops::"))
    assert ops, "libmy_ops.so registered no my_ops:: schema"
    built = key == "CPU" or os.environ["MY_OPS_CUDA_KERNELS"] == "1"
    # The out= companions (<op>_out) have CPU kernels only; an export for CUDA keeps the op.
    companions = {f"my_ops::{name}_out" for name in my_ops.ops.SPECS}
    expected = {op: built and (key == "CPU" or op not in companions) for op in ops}
    wrong = [
        op for op in ops if torch._C._dispatch_has_kernel_for_dispatch_key(op, key) != expected[op]
    ]
    assert not wrong, (
        f"{key} kernel expected (True) or not (False): {[(op, expected[op]) for op in wrong]}"
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_op_has_a_c_shim_for_each_backend_built(real_library, device):
    # The functions an AOTInductor package calls for our ops (tools/torch/c_shims.py), defined by
    # the library itself: a name torch's own libraries define would win over ours at load time.
    my_ops.load_library(real_library)
    schemas = {
        s.name[len("my_ops::") :]: s
        for s in torch._C._jit_get_all_schemas()
        if s.name.startswith("my_ops::")
    }
    ours = ctypes.CDLL(real_library, mode=os.RTLD_NOLOAD)
    torch_libs = [ctypes.CDLL(p, mode=os.RTLD_NOLOAD) for p in _torch_libraries()]
    for op, schema in sorted(schemas.items()):
        # An out= companion has a CPU kernel only, and so a CPU shim only.
        companion = any(a.is_out for a in schema.arguments)
        built = device == "cpu" or (os.environ["MY_OPS_CUDA_KERNELS"] == "1" and not companion)
        name = f"aoti_torch_{device}_{op}"
        assert _defines(ours, name) == built, f"{name} {'missing' if built else 'unexpected'}"
        assert not any(_defines(lib, name) for lib in torch_libs), f"torch defines {name} too"


def _torch_libraries() -> list[str]:
    """torch's own shared libraries that AOTInductor's shims come from, as loaded here."""
    names = {"libtorch_cpu.so", "libtorch_cuda.so"}
    return [p for p in _library._mapped_files() if os.path.basename(p) in names]


def _defines(library: ctypes.CDLL, name: str) -> bool:
    """Whether `library` itself defines `name` (dlsym also searches what it links)."""
    try:
        address = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
    except AttributeError:
        return False
    info = _DlInfo()
    _libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info))
    return os.path.realpath(info.dli_fname.decode()) == os.path.realpath(library._name)


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


_libc = ctypes.CDLL(None)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-p", "no:cacheprovider", *sys.argv[1:]]))
