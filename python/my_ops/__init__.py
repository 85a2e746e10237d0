"""Python face of the ``my_ops`` PyTorch custom-op library.

Importing this package loads ``libmy_ops.so`` (see :mod:`my_ops._library` for the search
order). If the library was already loaded by other means (``torch.ops.load_library``),
the import uses that copy. Either way the fake impls, fake classes and autograd formulas
are registered once, before any op is used through torch.export or torch.compile. If
the library cannot be found the import still succeeds; the first use of an op raises
:class:`LibraryNotFoundError` naming every path that was tried. Call
:func:`load_library` with an explicit path to load it by hand.
"""

from __future__ import annotations

import torch

from . import _autograd, _fakes, _library, reference
from ._library import (
    ENV_VAR,
    LibraryNotFoundError,
    candidate_paths,
    is_loaded,
    load_library,
    loaded_path,
)
from .nn import RMSNorm
from .ops import fused_add_rms_norm, fused_bias_gelu, identity_conv

__all__ = [
    "ENV_VAR",
    "LibraryNotFoundError",
    "RMSNorm",
    "candidate_paths",
    "fused_add_rms_norm",
    "fused_bias_gelu",
    "identity_conv",
    "is_loaded",
    "load_library",
    "loaded_path",
    "reference",
]


_python_side_registered = False


def _register_python_side() -> None:
    global _python_side_registered
    if _python_side_registered:
        return
    # libmy_ops.so names this module (set_python_module) as the home of its fakes, and
    # torch rejects a fake registered from any other module, so this loop stays here.
    for qualname, fake in _fakes.FAKE_IMPLS.items():
        torch.library.register_fake(qualname)(fake)
    for qualname, fake_class in _fakes.FAKE_CLASSES.items():
        torch._library.register_fake_class(qualname)(fake_class)
    _autograd.register()
    _python_side_registered = True


_library.add_post_load_hook(_register_python_side)
_library.try_load()
