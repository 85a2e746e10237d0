"""The wheels' bytecode (bytecode.bzl): each heavy wheel's modules come with unchecked-hash
.pyc files beside them in the runfiles, which Python loads instead of compiling the source;
and the compiler's own rules (cache tag, a source that does not compile)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMPILER = Path(__file__).absolute().parent / "compile_bytecode.py"
# PEP 552's flags word: hash-based (bit 0), not checked against the source (bit 1 clear).
UNCHECKED_HASH = 0b01


@pytest.mark.parametrize(
    "module", ["torch", "torch.nn.modules.module", "torch._dynamo", "numpy", "sympy", "pytest"]
)
def test_a_wheels_module_is_loaded_from_its_bytecode(module):
    loaded = importlib.import_module(module)
    cached = importlib.util.cache_from_source(loaded.__file__)
    assert os.path.isfile(cached), f"{module}: no bytecode beside {loaded.__file__}"
    header = Path(cached).read_bytes()[:16]
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(header[4:8], "little") == UNCHECKED_HASH


def test_python_reads_the_bytecode_instead_of_compiling(tmp_path):
    # A fresh interpreter, bytecode writing off as in the tests, says where each module's
    # code came from (-v): sympy's from the .pyc beside it.
    import sympy

    cached = importlib.util.cache_from_source(sympy.__file__)
    proc = subprocess.run(
        [sys.executable, "-v", "-c", "import sympy"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"code object from '{cached}'" in proc.stderr


def _compile(
    tmp_path: Path, source: str, cache_tag: str
) -> tuple[subprocess.CompletedProcess, Path]:
    (tmp_path / "m.py").write_text(source)
    target = tmp_path / "out" / "m.pyc"
    target.parent.mkdir()
    pairs = tmp_path / "pairs"
    pairs.write_text(f"{tmp_path / 'm.py'}\n{target}\n")
    proc = subprocess.run(
        [sys.executable, "-I", "-B", str(COMPILER), cache_tag, str(pairs)],
        capture_output=True,
        text=True,
    )
    return proc, target


def test_another_pythons_cache_tag_is_refused_in_one_line(tmp_path):
    proc, target = _compile(tmp_path, "x = 1\n", "cpython-27")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and sys.implementation.cache_tag in lines[0], lines
    assert "cpython-27" in lines[0] and not target.exists()


def test_a_source_that_does_not_compile_gets_an_empty_pyc(tmp_path):
    proc, target = _compile(tmp_path, "print 'python 2'\n", sys.implementation.cache_tag)
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() == b""


def test_a_source_gets_unchecked_hash_bytecode(tmp_path):
    proc, target = _compile(tmp_path, "x = 1\n", sys.implementation.cache_tag)
    assert proc.returncode == 0, proc.stderr
    data = target.read_bytes()
    assert data[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(data[4:8], "little") == UNCHECKED_HASH
