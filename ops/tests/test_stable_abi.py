"""libmy_ops.so is built on LibTorch's stable ABI: it calls LibTorch's C functions only.

Its dynamic symbol table is the proof. The symbols it takes from LibTorch (those it leaves
undefined that the locked release's libraries, LOCKED_LIBTORCH, define) must be C names, since a
mangled C++ name would tie the library to one release's ABI, and must be defined by every torch
release the library supports, whose libtorch_cpu.so files the test is given
(TORCH_CPU_LIBRARIES).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile


def _runfile(env: str) -> Path:
    return Path(os.environ["TEST_SRCDIR"]) / os.environ[env]


def _runfiles(env: str) -> list[Path]:
    return [Path(os.environ["TEST_SRCDIR"]) / p for p in os.environ[env].split()]


LIBRARY = _runfile("MY_OPS_LIBRARY")
LOCKED_LIBTORCH = _runfiles("LOCKED_LIBTORCH")
TORCH_CPU_LIBRARIES = _runfiles("TORCH_CPU_LIBRARIES")


def _dynamic_symbols(path: Path) -> list[tuple[str, bool, str]]:
    """(name, defined, binding) of each dynamic symbol."""
    with open(path, "rb") as f:
        dynsym = ELFFile(f).get_section_by_name(".dynsym")
        return [
            (s.name, s["st_shndx"] != "SHN_UNDEF", s["st_info"]["bind"])
            for s in dynsym.iter_symbols()
            if s.name
        ]


def _defined(path: Path) -> set[str]:
    return {name for name, defined, _ in _dynamic_symbols(path) if defined}


def _needed(path: Path) -> list[str]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        return [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


# A mangled name in namespace std (std::, or a substitution such as Ss for std::string): c10
# exports its copies of some of libstdc++'s, which the library takes from libstdc++ itself.
_STD = re.compile(r"^_Z(T[VIS])?N?[KVRO]*S[tsaiod]")


def _from_libtorch(path: Path) -> list[str]:
    """The symbols `path` leaves undefined that the locked LibTorch defines (std's aside)."""
    libtorch = set().union(*map(_defined, LOCKED_LIBTORCH))
    return sorted(
        name
        for name, defined, _ in _dynamic_symbols(path)
        if not defined and name in libtorch and not _STD.match(name)
    )


def test_the_library_takes_only_c_functions_from_libtorch():
    taken = _from_libtorch(LIBRARY)
    assert any(name.startswith("aoti_torch_") for name in taken), taken  # it does call LibTorch
    cxx = [name for name in taken if name.startswith("_Z")]
    assert not cxx, f"{LIBRARY.name} calls LibTorch's C++ API: {cxx[:10]}"


def test_the_library_needs_libtorch_cpu_so_which_every_torch_has():
    # torch's Python module does not make LibTorch's symbols global: without this entry,
    # torch.ops.load_library fails on the first of them.
    assert "libtorch_cpu.so" in _needed(LIBRARY)


@pytest.mark.parametrize("torch_cpu", TORCH_CPU_LIBRARIES, ids=lambda p: p.parts[-5])
def test_every_function_it_takes_is_defined_by_each_supported_torch(torch_cpu: Path):
    defined = _defined(torch_cpu)
    missing = [name for name in _from_libtorch(LIBRARY) if name not in defined]
    assert not missing, f"{torch_cpu} does not define {missing}"
