"""The model to export: its factory (--model), the spec it returns, and its calling convention.

The factory protocol is documented in deploy/default_model.py.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from .errors import EXIT_USAGE, ExportError, first_line

# deploy.default_model in this repository, my_ops.deploy.default_model in the wheel.
DEFAULT_MODEL = f"{__package__.rpartition('.')[0]}.default_model:make_model"


def load_factory(spec: str) -> Callable[..., Any]:
    mod_name, sep, attr = spec.partition(":")
    if (
        not sep
        or not mod_name
        or not attr
        or not all(part.isidentifier() for part in mod_name.split(".") + attr.split("."))
    ):
        raise ExportError(f"--model must look like package.module:factory, got {spec!r}")
    # Let `--model mymodel:make` find mymodel.py in the user's directory, as
    # `python -m` would; appended so it cannot shadow installed packages.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    if user_cwd not in sys.path:
        sys.path.append(user_cwd)
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is a user error here
        raise ExportError(f"cannot import {mod_name!r}: {first_line(e)}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExportError(f"{mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ExportError(f"{spec!r} is not callable (got {type(obj).__name__})")
    return obj


def make_spec(factory: Callable[..., Any], max_batch: int, kv_cache: int | None = None) -> Any:
    """The factory's spec; `kv_cache` (--kv-cache) is passed as kv_cache=, which the factory
    must take."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {}
    if "max_batch" in params:
        kwargs["max_batch"] = max_batch
    if kv_cache is not None:
        if "kv_cache" not in params:
            raise ExportError(
                f"--kv-cache: the model factory {getattr(factory, '__name__', factory)!r} takes "
                "no kv_cache parameter (a decoder factory is make(kv_cache: int), see "
                "my_ops.llama)",
                EXIT_USAGE,
            )
        kwargs["kv_cache"] = kv_cache
    try:
        spec = factory(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"model factory failed: {first_line(e)}") from e
    for name in ("module", "example_inputs", "dynamic_shapes"):
        if not hasattr(spec, name):
            raise ExportError(f"model factory result has no {name!r} attribute")
    return spec


def as_tuple(out: Any) -> tuple[Any, ...]:
    """A model's output as a tuple, whether it returned one tensor or several."""
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def to_device(xs: tuple[Any, ...], device: str) -> tuple[Any, ...]:
    return tuple(x.to(device) for x in xs)
