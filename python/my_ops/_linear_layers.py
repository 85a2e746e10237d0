"""Finding and replacing a model's ``nn.Linear`` layers: what :mod:`my_ops.quantize` and
:mod:`my_ops.pack` share."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence

from torch import nn


def linear_layers(model: nn.Module, skip: Sequence[str] = ()) -> list[tuple[str, nn.Linear]]:
    """``(qualified name, layer)`` of every ``nn.Linear`` of ``model`` (exactly that class)
    whose name matches none of the ``skip`` patterns (``fnmatch``)."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is nn.Linear and not any(fnmatch.fnmatchcase(name, p) for p in skip)
    ]


def replace_layers(
    model: nn.Module, layers: list[tuple[str, nn.Module]], make: Callable[[nn.Module], nn.Module]
) -> None:
    """Replace, in place, each named layer of ``model`` by ``make(layer)``."""
    for name, layer in layers:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, make(layer))
