"""A user model for the linux-aarch64 export test: every op of the library on its own.

The model calls each op of ``my_ops.ops.SPECS`` once per choice it offers (gelu's
``approximate``, ...), plus the RMSNorm custom class. Every output is one call's result on
the inputs, not a chain, so each is compared with its op's float64 reference by itself. The
hidden size, 131, is odd: the NEON kernels' 4-lane main loops and their scalar tails both
run. Factory protocol: see deploy/default_model.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import torch
from torch import nn

import my_ops
from my_ops.ops._spec import (
    Choice,
    LastDimVector,
    OptionalBias,
    PackedWeight,
    Positions,
    QuantizedWeight,
    WeightScale,
)

HIDDEN = 131
SEQ = 5
EPS = 1e-6


def _det(shape: tuple[int, ...], offset: float) -> torch.Tensor:
    # Platform-independent values (no RNG stream), spread over [-3, 3].
    n = math.prod(shape)
    v = torch.sin(torch.arange(n, dtype=torch.float64) * 0.61 + offset) * 3.0
    return v.reshape(shape).to(torch.float32)


@dataclasses.dataclass(frozen=True)
class Call:
    """One op call: which model inputs it takes, its fixed vectors and scalars."""

    spec: Any
    scalars: dict[str, Any]
    n_inputs: int  # the tensors but the per-feature vectors, in argument order

    @property
    def name(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.scalars.items())
        return f"{self.spec.name}({shown})"


# The roles of a model's weights: per-feature vectors and a quantized or packed layer's weight,
# scales and bias. Every other tensor (the primary, those shaped like it or after it) is an input,
# shaped from the batch.
_WEIGHT_ROLES = (LastDimVector, QuantizedWeight, PackedWeight, WeightScale, OptionalBias)

# A quantized layer's output channels: odd, so vector tails run too.
OUT_FEATURES = 7


def _is_input(role) -> bool:
    return role.is_tensor and not isinstance(role, _WEIGHT_ROLES)


def _weight(role, x_shape: tuple[int, ...], made: dict, offset: float) -> torch.Tensor:
    """A weight of ``role`` for a primary of ``x_shape``, from platform-independent values;
    ``made``: the call's weights and scalars so far."""
    if isinstance(role, LastDimVector):
        return _vector(x_shape[-1], offset)
    if isinstance(role, QuantizedWeight):
        values = _det(role.shape_of(x_shape, OUT_FEATURES), offset)
        if role.bits == 8:
            return (values * 40).round().to(torch.int8)
        return ((values + 3) * 42).round().clamp(0, 255).to(torch.uint8)
    if isinstance(role, PackedWeight):
        return _det(role.shape_of(x_shape, 1), offset)
    if isinstance(role, WeightScale):
        group_size = made[role.group_size] if role.group_size else None
        shape = role.shape_of(x_shape, made[role.weight].shape[0], group_size)
        return _det(shape, offset).abs() * 0.01 + 1e-3
    return _vector(role.out_features(made[role.weight]), offset)


def _calls() -> list[Call]:
    calls = []
    for spec in my_ops.ops.SPECS.values():
        choices = {n: r.values for n, r in spec.arguments.items() if isinstance(r, Choice)}
        # Every other scalar (a float, a group size) at its typical value.
        typical = {
            n: r.example(None, None)
            for n, r in spec.arguments.items()
            if not r.is_tensor and not isinstance(r, Choice)
        }
        n_inputs = sum(_is_input(r) for r in spec.arguments.values())
        for combo in itertools.product(*choices.values()):
            scalars = {**dict(zip(choices, combo, strict=True)), **typical}
            calls.append(Call(spec, scalars, n_inputs))
    return calls


CALLS = _calls()


def _vector(length: int, offset: float) -> torch.Tensor:
    # Near 1, so that weights scale rather than cancel.
    return 1.0 + _det((length,), offset) * 0.1


class OpsModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for i, call in enumerate(CALLS):
            x_shape = call.spec.primary.shape_for((1, SEQ, HIDDEN))
            made = dict(call.scalars)
            for name, role in call.spec.arguments.items():
                if isinstance(role, _WEIGHT_ROLES):
                    made[name] = _weight(role, x_shape, made, i + 1.0)
                    self.register_buffer(f"weight_{i}_{name}", made[name])
        self.norm_weight = nn.Parameter(_vector(HIDDEN, 2.0), requires_grad=False)
        self.norm = my_ops.RMSNorm(self.norm_weight.detach().clone(), eps=EPS)

    def arguments(self, i: int, call: Call, inputs) -> list:
        given = iter(inputs)
        args = []
        for name, role in call.spec.arguments.items():
            if _is_input(role):
                args.append(next(given))
            elif isinstance(role, _WEIGHT_ROLES):
                args.append(getattr(self, f"weight_{i}_{name}"))
            else:
                args.append(call.scalars[name])
        return args

    def each_call(self, inputs, implementation) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(every call's outputs, through implementation(spec), the inputs left over)."""
        outputs: list[torch.Tensor] = []
        offset = 0
        for i, call in enumerate(CALLS):
            args = self.arguments(i, call, inputs[offset : offset + call.n_inputs])
            offset += call.n_inputs
            result = implementation(call.spec)(*args)
            outputs += result if isinstance(result, tuple) else (result,)
        (rest,) = inputs[offset:]
        return outputs, rest

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs, x = self.each_call(inputs, lambda spec: spec.wrapper)
        return (*outputs, self.norm(x))


def output_checks() -> list[tuple[str, dict]]:
    """(name, float32 tolerance) of each output, in order."""
    checks = []
    for call in CALLS:
        n = len(call.spec.op._schema.returns)
        tol = dict(call.spec.tolerances[torch.float32])
        checks += [(f"{call.name} output {k}", tol) for k in range(n)]
    # The class: the suite's float32 tolerance (see my_ops.ops._spec.DEFAULT_TOLERANCES).
    checks.append(("RMSNorm.forward", {"rtol": 2e-5, "atol": 1e-5}))
    return checks


def reference(model: OpsModel, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The float64 references of forward's outputs, rounded once to float32."""
    outputs, x = model.each_call(inputs, lambda spec: spec.reference)
    return (*outputs, my_ops.nn.reference(x, model.norm_weight, EPS))


def inputs(batch: int) -> tuple[torch.Tensor, ...]:
    offsets = (0.3 * batch + 5.0 * k for k in itertools.count())
    tensors = []
    for call in CALLS:
        # The primary first (its shape made valid for the op), then each other input as its
        # role shapes it after the primary.
        x = _det(call.spec.primary.shape_for((batch, SEQ, HIDDEN)), next(offsets))
        for name, role in call.spec.arguments.items():
            if name == call.spec.primary_name:
                tensors.append(x)
            elif isinstance(role, Positions):
                # One per token (x's dims before heads), in another order than the tokens'.
                tokens = x.shape[:-2]
                order = torch.arange(math.prod(tokens)) * 3 + 1
                tensors.append((order % x.shape[role.seq_dim]).reshape(tokens))
            elif _is_input(role):
                tensors.append(role.example(x, lambda s: _det(s, next(offsets))))
    tensors.append(_det((batch, SEQ, HIDDEN), next(offsets)))
    return tuple(tensors)


@dataclasses.dataclass
class Spec:
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    dynamic_shapes: Any
    make_inputs: Any
    max_batch: int


def make_model(max_batch: int = 8) -> Spec:
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    example = inputs(2)
    return Spec(
        module=OpsModel().eval(),
        example_inputs=example,
        # forward takes *inputs: torch.export matches its dynamic shapes by that name.
        dynamic_shapes={"inputs": tuple({0: batch} for _ in example)},
        make_inputs=inputs,
        max_batch=max_batch,
    )
