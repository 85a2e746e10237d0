"""Python and C++ must use one torch build: the locked wheel, as LibTorch sees it."""

import hashlib
import os
import pathlib
import re

import torch


def _runfile(path: str) -> pathlib.Path:
    return pathlib.Path(os.environ["RUNFILES_DIR"]) / path


def _locked_torch_version() -> str:
    lock = _runfile(os.environ["REQUIREMENTS_LOCK"]).read_text()
    match = re.search(r"^torch==(\S+)", lock, re.MULTILINE)
    assert match, "requirements_lock.txt does not pin torch"
    return match.group(1)


def test_python_torch_is_the_locked_version():
    assert torch.__version__.split("+")[0] == _locked_torch_version()


def test_libtorch_reports_the_same_version():
    cpp_version = _runfile(os.environ["LIBTORCH_VERSION_FILE"]).read_text().strip()
    assert cpp_version == torch.__version__


def test_libtorch_libraries_are_the_python_wheel_files():
    def digest(path: pathlib.Path) -> str:
        return hashlib.sha256(path.read_bytes()).hexdigest()

    python_lib = pathlib.Path(torch.__file__).parent / "lib" / "libc10.so"
    cpp_lib = _runfile(os.environ["LIBTORCH_C10"])
    assert digest(python_lib) == digest(cpp_lib)


def test_cxx11_abi_matches_the_build_setting():
    assert torch.compiled_with_cxx11_abi() == (os.environ["LIBTORCH_CXX11_ABI"] == "1")


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-q"]))
