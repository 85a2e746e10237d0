"""Python face of the ``my_ops`` PyTorch custom-op library.

Importing this package loads ``libmy_ops.so`` (see :mod:`my_ops._library` for the search
order). If the library was already loaded by other means (``torch.ops.load_library``),
the import uses that copy. Either way the fake impls, fake classes and autograd formulas
are registered once, before any op is used through torch.export or torch.compile. If
the library cannot be found the import still succeeds; the first use of an op raises
:class:`LibraryNotFoundError` naming every path that was tried. Call
:func:`load_library` with an explicit path to load it by hand.

Each op is ``my_ops.<op>`` (a typed wrapper); its module ``my_ops.ops.<op>`` holds its
fake, autograd formula, float64 reference and spec (see :mod:`my_ops.ops`).
"""

from __future__ import annotations

import sys

import torch

from . import _library, nn, ops, pack, quantize
from ._library import (
    CPU_ISA_ENV_VAR,
    ENV_VAR,
    CompanionUnavailableError,
    CpuIsaError,
    LibraryNotFoundError,
    candidate_paths,
    companion_path,
    cpu_isa,
    cpu_isa_environment,
    cpu_isas,
    is_loaded,
    load_library,
    loaded_path,
)
from .nn import RMSNorm

OP_WRAPPERS = {spec.wrapper.__name__: spec.wrapper for spec in ops.SPECS.values()}
# In-place forms (<op>_): my_ops.<op>_ beside my_ops.<op>, from the op's module.
OP_WRAPPERS.update(
    {
        spec.in_place_name: getattr(sys.modules[spec.wrapper.__module__], spec.in_place_name)
        for spec in ops.SPECS.values()
        if spec.in_place is not None
    }
)
globals().update(OP_WRAPPERS)

__all__ = [
    "CPU_ISA_ENV_VAR",
    "ENV_VAR",
    "CompanionUnavailableError",
    "CpuIsaError",
    "LibraryNotFoundError",
    "RMSNorm",
    "candidate_paths",
    "companion_path",
    "cpu_isa",
    "cpu_isa_environment",
    "cpu_isas",
    "is_loaded",
    "load_library",
    "loaded_path",
    "ops",
    "pack",
    "quantize",
    *sorted(OP_WRAPPERS),
]


def _register_fake(qualname: str, fake) -> None:
    # libmy_ops.so names this module (set_python_module) as the home of its fakes, and
    # torch rejects a fake registered from any other module, so the call is made here.
    torch.library.register_fake(qualname)(fake)


_python_side_registered = False


def _register_python_side() -> None:
    global _python_side_registered
    if _python_side_registered:
        return
    ops.register_all(_register_fake)
    if _library.companion_path() is not None:  # The class is the companion's.
        torch._library.register_fake_class("my_ops::RMSNorm")(nn.FakeRMSNorm)
    _python_side_registered = True


_library.add_post_load_hook(_register_python_side)
_library.try_load()
