"""Models that are not the default model's architecture, for `export --weights-only` to refuse.

Each differs from deploy/default_model.py's Block in one way only, so that the exporter's one
line must name that difference.
"""

from __future__ import annotations

import torch
from torch import nn

import my_ops
from deploy.default_model import Block, ExportSpec, make_model


def _spec(module: nn.Module, max_batch: int) -> ExportSpec:
    spec = make_model(max_batch)
    spec.module = module.eval()
    return spec


class _Renamed(Block):
    """The stem Linear registered as input_proj: its constants are input_proj.*."""

    stem = property(lambda self: self._modules["input_proj"])

    def __init__(self) -> None:
        super().__init__()
        self._modules["input_proj"] = self._modules.pop("stem")


def renamed(max_batch: int = 16) -> ExportSpec:
    return _spec(_Renamed(), max_batch)


def reshaped(max_batch: int = 16) -> ExportSpec:
    return _spec(Block(mlp=96), max_batch)


class _DoubleLinear(nn.Module):
    """A Linear whose weights are float64, computing in float64 between float32 activations."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().double())
        self.bias = nn.Parameter(linear.bias.detach().double())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x.double(), self.weight, self.bias).float()


def retyped(max_batch: int = 16) -> ExportSpec:
    block = Block()
    block.proj = _DoubleLinear(block.proj)
    return _spec(block, max_batch)


def other_eps(max_batch: int = 16) -> ExportSpec:
    block = Block()
    block.final_norm = my_ops.RMSNorm(torch.ones(block.stem_bias.shape), eps=1e-6)
    return _spec(block, max_batch)


class _OtherGraph(Block):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One more operation, no other constant.
        return super().forward(x) * 2.0


def other_graph(max_batch: int = 16) -> ExportSpec:
    return _spec(_OtherGraph(), max_batch)
