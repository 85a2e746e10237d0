"""Python face of the ``my_ops`` PyTorch custom-op library.

Importing this package loads ``libmy_ops.so`` (see :mod:`my_ops._library` for the search
order). If the library cannot be found the import still succeeds; the first use of an op
raises :class:`LibraryNotFoundError` naming every path that was tried. Call
:func:`load_library` with an explicit path to load it by hand.
"""

from __future__ import annotations

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


def _register_python_side() -> None:
    _fakes.register()
    _autograd.register()


_library.add_post_load_hook(_register_python_side)
_library.try_load()
