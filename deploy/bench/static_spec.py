"""An exporter spec with static shapes, for the benchmarks' models (tax_models, real_models).

deploy/default_model.py's factory protocol, for a model that takes one shape: every verify
batch is that shape, so ``make_inputs`` returns the example whatever the batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn


@dataclasses.dataclass
class StaticSpec:
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    atol: float
    rtol: float
    dynamic_shapes: Any = None
    max_batch: int = 1

    def make_inputs(self, batch: int) -> tuple[torch.Tensor, ...]:
        return self.example_inputs
