"""A model with tens of megabytes of weights, for //deploy:bench_weights.

LLaMA-style MLP blocks (norm, one fused gate/up projection, silu_and_mul, down projection,
residual) over a hidden size of 512: 4 blocks hold about 25 MB of float32 weights, the size
class of a small edge model, where shipping only the weights matters. `retrained` is the same
architecture after another training run: other values, same names, shapes and dtypes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

import my_ops
from deploy.default_model import ExportSpec, _det

HIDDEN = 512
MLP = 1024
LAYERS = 4


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.ones(HIDDEN))
        self.gate_up = nn.Linear(HIDDEN, 2 * MLP, bias=False)
        self.down = nn.Linear(MLP, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = my_ops.rms_norm(x, self.norm, 1e-6)
        return x + self.down(my_ops.silu_and_mul(self.gate_up(h)))


class Large(nn.Module):
    def __init__(self, generation: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(LAYERS))
        with torch.no_grad():
            for i, (name, p) in enumerate(sorted(self.named_parameters())):
                scale = 1.0 / math.sqrt(p.shape[-1]) if p.dim() > 1 else 0.05
                base = 1.0 if name.endswith("norm") else 0.0
                p.copy_(base + _det(tuple(p.shape), scale, offset=i + 1000.0 * generation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _spec(generation: int, max_batch: int) -> ExportSpec:
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    return ExportSpec(
        module=Large(generation).eval(),
        example_inputs=(_det((2, 8, HIDDEN), 1.0),),
        dynamic_shapes=({0: batch},),
        make_inputs=lambda b: (_det((b, 8, HIDDEN), 1.0, offset=float(b)),),
        max_batch=max_batch,
    )


def large(max_batch: int = 4) -> ExportSpec:
    return _spec(0, max_batch)


def retrained(max_batch: int = 4) -> ExportSpec:
    return _spec(1, max_batch)
