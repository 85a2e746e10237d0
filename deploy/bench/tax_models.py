"""The models of the custom-op tax table (tax.py): 8 x (Linear without bias -> op), twice.

For an op family and a size ROWS x HIDDEN, ``ours`` calls the op (``torch.ops.my_ops``,
which a package reaches through its C shim) and ``inductor`` calls the op's ``SPEC.eager``
composition instead, the same math in ATen ops, which Inductor compiles into its own kernels.
Both have the same Linears, the same op arguments (the op's ``SPEC.example_args``) and static
shapes. Each Linear maps the op's output width back to its input width, so an op that halves
the last dim (``silu_and_mul``) gets Linear(HIDDEN, 2 * HIDDEN).

Each model is an exporter factory (deploy/default_model.py's protocol), named
``<family>__<variant>__<rows>x<hidden>``: ``--model deploy.bench.tax_models:rms_norm__ours__1x64``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

import my_ops
from deploy.bench.static_spec import StaticSpec

# The first op of each family (ops/<folder>/): identity_conv is a copy, which Inductor
# removes from the composition altogether, so it has no tax to compare.
FAMILIES = ("fused_bias_gelu", "rms_norm", "silu_and_mul", "rotary_embedding")
VARIANTS = ("ours", "inductor")
SIZES = ((1, 64), (16, 256), (256, 1024), (4096, 1024))
LAYERS = 8


class Stack(nn.Module):
    def __init__(self, family: str, variant: str, rows: int, hidden: int) -> None:
        super().__init__()
        spec = my_ops.ops.SPECS[family]
        g = torch.Generator().manual_seed(0)
        layers = []
        args = []
        for _ in range(LAYERS):
            example = spec.example_args((rows, hidden), torch.float32, "cpu", g)
            width_in = example[list(spec.arguments).index(spec.primary_name)].shape[-1]
            out = spec.op(*example)
            width_out = (out[0] if isinstance(out, tuple) else out).shape[-1]
            linear = nn.Linear(width_out, width_in, bias=False)
            nn.init.normal_(linear.weight, std=width_out**-0.5, generator=g)
            layers.append(linear)
            args.append(example)
        self.linears = nn.ModuleList(layers)
        self.names = list(spec.arguments)
        self.primary = self.names.index(spec.primary_name)
        # The op's other tensor arguments, as buffers (constants of the package); scalars as is.
        self.scalars: list[dict[int, Any]] = []
        for i, example in enumerate(args):
            scalars = {}
            for j, value in enumerate(example):
                if j == self.primary:
                    continue
                if isinstance(value, torch.Tensor):
                    self.register_buffer(f"arg{i}_{j}", value)
                else:
                    scalars[j] = value
            self.scalars.append(scalars)
        self.fn = spec.op if variant == "ours" else spec.eager
        first = args[0][self.primary]
        self.input_shape = (*first.shape[:-1], layers[0].weight.shape[1])
        # Each Linear scaled so that its output has unit RMS on the example input: an op that
        # squares its input's scale (silu_and_mul) otherwise drives a deep stack to zero, and
        # denormals would time something no model runs.
        self.example = torch.randn(self.input_shape, generator=g)
        with torch.no_grad():
            h = self.example
            for i, linear in enumerate(self.linears):
                linear.weight.div_(linear(h).pow(2).mean().sqrt())
                h = self._layer(i, linear, h)

    def _layer(self, i: int, linear: nn.Linear, h: torch.Tensor) -> torch.Tensor:
        call = []
        for j in range(len(self.names)):
            if j == self.primary:
                call.append(linear(h))
            elif j in self.scalars[i]:
                call.append(self.scalars[i][j])
            else:
                call.append(getattr(self, f"arg{i}_{j}"))
        out = self.fn(*call)
        return out[0] if isinstance(out, tuple) else out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for i, linear in enumerate(self.linears):
            h = self._layer(i, linear, h)
        return h


def make(family: str, variant: str, rows: int, hidden: int) -> StaticSpec:
    module = Stack(family, variant, rows, hidden)
    # A deep stack of float32 ops, each rounding differently in Inductor's fused code.
    return StaticSpec(module=module, example_inputs=(module.example,), atol=1e-3, rtol=1e-3)


def name(family: str, variant: str, rows: int, hidden: int) -> str:
    return f"{family}__{variant}__{rows}x{hidden}"


for _family in FAMILIES:
    for _variant in VARIANTS:
        for _rows, _hidden in SIZES:
            globals()[name(_family, _variant, _rows, _hidden)] = functools.partial(
                make, _family, _variant, _rows, _hidden
            )
