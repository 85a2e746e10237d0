"""The model ``//deploy:export`` exports when ``--model`` is not given.

A small transformer-style block that exercises every piece of the op library: a
gelu stem (``identity_conv``, ``fused_bias_gelu``), attention with rotary position
embeddings on its queries and keys (``rotary_embedding``, LLaMA's half-split layout)
and a fused residual add and RMS norm (``fused_add_rms_norm``), a LLaMA-style SwiGLU MLP
(``silu_and_mul``) and the ``torch.classes.my_ops.RMSNorm`` custom class (held by
``my_ops.RMSNorm``).

Factory protocol (also used by ``--model module:factory``)
---------------------------------------------------------
``factory(max_batch=N)`` (or ``factory()`` if it takes no ``max_batch``
parameter) returns an object with these attributes:

``module``          torch.nn.Module to export; put in eval mode by the exporter.
``example_inputs``  tuple of tensors passed positionally to ``module``.
``dynamic_shapes``  the ``dynamic_shapes`` argument for ``torch.export.export``
                    (or None for static shapes).
``make_inputs``     optional ``callable(batch: int) -> tuple[Tensor, ...]`` giving
                    inputs at a batch size; used for verification at batch 1, 7
                    and ``max_batch``. When missing, the exporter draws random
                    inputs shaped like ``example_inputs`` with dim 0 replaced by
                    the batch size.
``max_batch``       optional int, the largest batch size the package must accept.
``atol``, ``rtol``  optional verification tolerances (default 1e-4 / 1e-4).

Tensors may live on CPU; the exporter moves module and inputs to ``--device``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import my_ops

HIDDEN = 64
HEADS = 4
MLP = 128
MAX_SEQ = 64


@dataclasses.dataclass
class ExportSpec:
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: Any
    make_inputs: Callable[[int], tuple[torch.Tensor, ...]] | None = None
    max_batch: int = 16
    atol: float = 1e-4
    rtol: float = 1e-4


def _det(shape: tuple[int, ...], scale: float, offset: float = 0.0) -> torch.Tensor:
    # arange-based values are identical on every platform and torch version,
    # unlike RNG streams, so expected outputs stay reproducible across machines.
    n = math.prod(shape)
    v = torch.sin(torch.arange(n, dtype=torch.float64) * 0.7311 + offset)
    return (v * scale).to(torch.float32).reshape(shape)


class Block(nn.Module):
    def __init__(
        self, hidden: int = HIDDEN, heads: int = HEADS, mlp: int = MLP, generation: int = 0
    ) -> None:
        super().__init__()
        # Another generation is the same architecture with other weights: a retrained model.
        self.generation = generation
        self.heads = heads
        self.stem = nn.Linear(hidden, hidden, bias=False)
        self.stem_bias = nn.Parameter(torch.zeros(hidden))
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        # SwiGLU: one projection gives the gate and the up halves side by side.
        self.gate_up = nn.Linear(hidden, 2 * mlp, bias=False)
        self.down = nn.Linear(mlp, hidden)
        self.attn_norm_weight = nn.Parameter(torch.ones(hidden))
        self.eps = 1e-6
        # Custom-class norm: its weight lives inside the TorchBind object, so
        # it is set here rather than by _init_weights.
        self.final_norm = my_ops.RMSNorm(
            1.0 + _det((hidden,), 0.1, offset=99.0 + 1000.0 * generation), eps=1e-5
        )
        # RoPE tables for every position up to MAX_SEQ, sliced to the sequence at run time.
        # Buffers, not parameters: _init_weights leaves them as computed.
        cos, sin = my_ops.ops.rotary_embedding.tables(MAX_SEQ, hidden // heads)
        self.register_buffer("rope_cos", cos)
        self.register_buffer("rope_sin", sin)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        for i, (name, p) in enumerate(sorted(self.named_parameters())):
            scale = 1.0 / math.sqrt(p.shape[-1]) if p.dim() > 1 else 0.05
            base = 1.0 if name == "attn_norm_weight" else 0.0
            p.copy_(base + _det(tuple(p.shape), scale, offset=i + 1000.0 * self.generation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        x = my_ops.fused_bias_gelu(self.stem(my_ops.identity_conv(x)), self.stem_bias, "tanh")
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        # [batch, seq, heads, head_dim], the layout the op takes: no transpose before it.
        cos, sin = self.rope_cos[:s], self.rope_sin[:s]
        q = my_ops.rotary_embedding(q, cos, sin)
        k = my_ops.rotary_embedding(k, cos, sin)
        attn = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        attn = self.proj(attn.transpose(1, 2).reshape(b, s, h))
        normed, residual = my_ops.fused_add_rms_norm(attn, x, self.attn_norm_weight, self.eps)
        mlp = self.down(my_ops.silu_and_mul(self.gate_up(normed)))
        return self.final_norm(mlp + residual)


def _inputs(batch: int, seq: int) -> tuple[torch.Tensor, ...]:
    return (_det((batch, seq, HIDDEN), 1.0, offset=0.5 * batch + seq),)


def make_model(max_batch: int = 16, generation: int = 0) -> ExportSpec:
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    seq = torch.export.Dim("seq", min=1, max=MAX_SEQ)

    def make_inputs(b: int) -> tuple[torch.Tensor, ...]:
        # Vary seq with batch so verification also covers the dynamic seq dim.
        return _inputs(b, [5, 16, 33, MAX_SEQ][b % 4])

    return ExportSpec(
        module=Block(generation=generation).eval(),
        # Example sizes > 1 keep export from specialising the dims to 1.
        example_inputs=_inputs(2, 8),
        dynamic_shapes=({0: batch, 1: seq},),
        make_inputs=make_inputs,
        max_batch=max_batch,
    )


def make_retrained_model(max_batch: int = 16) -> ExportSpec:
    """The default model after another training run: its architecture, other weights.

    What ``export --weights-only --base DIR`` takes for the package the default model's
    export wrote to DIR (see the README, "Ship new weights").
    """
    return make_model(max_batch, generation=1)
