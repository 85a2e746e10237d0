"""A user model for the linux-aarch64 export test: each op of the library on its own.

Every output is one op's result on the inputs, not a chain, so each is compared
with its float64 reference (my_ops.reference) by itself. The hidden size, 131,
is odd: the NEON kernels' 4-lane main loops and their scalar tails both run.
Factory protocol: see deploy/default_model.py.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

import my_ops

HIDDEN = 131
SEQ = 5
EPS = 1e-6


def _det(shape: tuple[int, ...], offset: float) -> torch.Tensor:
    # Platform-independent values (no RNG stream), spread over [-3, 3].
    n = math.prod(shape)
    v = torch.sin(torch.arange(n, dtype=torch.float64) * 0.61 + offset) * 3.0
    return v.reshape(shape).to(torch.float32)


class OpsModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(_det((HIDDEN,), 1.0) * 0.1, requires_grad=False)
        self.weight = nn.Parameter(1.0 + _det((HIDDEN,), 2.0) * 0.1, requires_grad=False)
        self.norm = my_ops.RMSNorm(self.weight.detach().clone(), eps=EPS)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
        normed, summed = my_ops.fused_add_rms_norm(x, residual, self.weight, EPS)
        return (
            my_ops.identity_conv(x),
            my_ops.fused_bias_gelu(x, self.bias),
            my_ops.fused_bias_gelu(x, self.bias, "tanh"),
            normed,
            summed,
            self.norm(x),
        )


def reference(model: OpsModel, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The float64 references of forward's outputs, rounded once to float32."""
    ref = my_ops.reference
    normed, summed = ref.add_rms_norm(x, residual, model.weight, EPS)
    return (
        ref.identity(x),
        ref.bias_gelu(x, model.bias),
        ref.bias_gelu(x, model.bias, "tanh"),
        normed,
        summed,
        ref.rms_norm(x, model.weight, EPS),
    )


def inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _det((batch, SEQ, HIDDEN), 0.3 * batch), _det((batch, SEQ, HIDDEN), 5.0 + batch)


@dataclasses.dataclass
class Spec:
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: Any
    make_inputs: Any
    max_batch: int


def make_model(max_batch: int = 8) -> Spec:
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    return Spec(
        module=OpsModel().eval(),
        example_inputs=inputs(2),
        dynamic_shapes=({0: batch}, {0: batch}),
        make_inputs=inputs,
        max_batch=max_batch,
    )
