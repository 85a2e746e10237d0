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
from my_ops.ops._spec import Choice, LastDimVector, NonNegativeFloat

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


def _is_input(role) -> bool:
    # Per-feature vectors are the model's weights; every other tensor (the primary, those
    # shaped like it or after it) is an input, shaped from the batch.
    return role.is_tensor and not isinstance(role, LastDimVector)


def _calls() -> list[Call]:
    calls = []
    for spec in my_ops.ops.SPECS.values():
        choices = {n: r.values for n, r in spec.arguments.items() if isinstance(r, Choice)}
        floats = {
            n: r.samples[0] for n, r in spec.arguments.items() if isinstance(r, NonNegativeFloat)
        }
        n_inputs = sum(_is_input(r) for r in spec.arguments.values())
        for combo in itertools.product(*choices.values()):
            scalars = {**dict(zip(choices, combo, strict=True)), **floats}
            calls.append(Call(spec, scalars, n_inputs))
    return calls


CALLS = _calls()


def _vector(length: int, offset: float) -> torch.Tensor:
    # Near 1, so that weights scale rather than cancel.
    return 1.0 + _det((length,), offset) * 0.1


class OpsModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vectors = nn.ParameterDict()
        for i, call in enumerate(CALLS):
            for name, role in call.spec.arguments.items():
                if isinstance(role, LastDimVector):
                    length = HIDDEN * call.spec.primary.last_dim_multiple
                    self.vectors[f"{i}_{name}"] = nn.Parameter(
                        _vector(length, i + 1.0), requires_grad=False
                    )
        self.norm_weight = nn.Parameter(_vector(HIDDEN, 2.0), requires_grad=False)
        self.norm = my_ops.RMSNorm(self.norm_weight.detach().clone(), eps=EPS)

    def arguments(self, i: int, call: Call, inputs) -> list:
        given = iter(inputs)
        args = []
        for name, role in call.spec.arguments.items():
            if _is_input(role):
                args.append(next(given))
            elif isinstance(role, LastDimVector):
                args.append(self.vectors[f"{i}_{name}"])
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
