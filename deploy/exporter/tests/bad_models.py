"""Broken model factories for the export CLI tests."""

from __future__ import annotations

import types

import torch

NOT_CALLABLE = 42


def raises():
    raise ValueError("factory exploded\nwith a second line that must not be shown")


def incomplete():
    return types.SimpleNamespace(example_inputs=(), dynamic_shapes=None)


def import_error_in_factory():
    import surely_not_a_module_xyz  # noqa: F401


class _Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Branching on a dynamic dim conflicts with the declared range.
        if x.shape[0] > 4:
            return x * 2
        return x + 1


def data_dependent(max_batch: int = 16):
    return types.SimpleNamespace(
        module=_Branchy(),
        example_inputs=(torch.randn(3, 4),),
        dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=max_batch)},),
    )
