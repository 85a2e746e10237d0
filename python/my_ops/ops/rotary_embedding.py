"""``rotary_embedding``: rotary position embedding (RoPE), as LLaMA-family models apply it to
queries and keys.

``x`` is ``[..., seq, heads, head_dim]``; ``cos`` and ``sin`` are ``[positions,
rotary_dim / 2]`` tables, one angle per position and pair of features (the half-size tables:
the full-size tables that some models build repeat every angle twice). A token's row of the
tables is its index along ``seq``, or, given ``positions``, ``positions[token]``: a decode
step at position p passes ``positions=[p]`` and the whole tables. Each pair ``(a, b)`` of
the first ``rotary_dim`` features becomes ``(a cos - b sin, b cos + a sin)``; the pairs are
``(i, i + rotary_dim / 2)`` by default (the half-split layout of GPT-NeoX and LLaMA) and
``(2i, 2i + 1)`` with ``interleaved=True`` (GPT-J). Features past ``rotary_dim`` (a partial
rotation: GPT-NeoX's ``rotary_pct``, Phi's ``partial_rotary_factor``) are copied.
"""

from __future__ import annotations

import torch

from .. import _library
from . import _checks
from ._roles import Flag, Positions, PositionTable
from ._spec import Autograd, BadCase, BenchTargets, OpSpec, Primary


def rotary_embedding(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor | None = None,
    interleaved: bool | None = None,
) -> torch.Tensor:
    """Rotate each pair of features of ``x`` by the angle of its position.

    Args:
        x: floating point tensor ``[..., seq, heads, head_dim]``, head_dim even.
        cos: ``[positions, rotary_dim / 2]``, the cosines of the angles, x's dtype and
            device; ``seq`` rows without ``positions``. ``rotary_dim`` (at most head_dim)
            is how many of each head's features rotate; the rest are copied.
        sin: their sines, of cos's shape.
        positions: int64 rows of the tables, ``[seq]`` or x's ``[..., seq]``, on x's device;
            by default each token's index along seq. A position outside the tables is
            refused (on CUDA, by a device-side assert).
        interleaved: pairs ``(2i, 2i + 1)`` (GPT-J) instead of ``(i, i + rotary_dim / 2)``
            (GPT-NeoX, LLaMA); by default the schema's (False). The schema lists it after
            ``positions`` (tensors first, see ops/registration.cpp): pass it by name.

    Returns:
        A new tensor shaped like ``x``; fp16/bf16 compute in fp32 and round once.
        Differentiable w.r.t. ``x``, ``cos`` and ``sin``.
    """
    _library.ensure_loaded()
    if isinstance(positions, bool):
        # The fourth argument was interleaved before positions came: say so, not "expected
        # Tensor".
        raise TypeError(
            "rotary_embedding: the fourth argument is positions (a tensor or None); pass "
            f"interleaved={positions} by name"
        )
    if interleaved is None:
        return torch.ops.my_ops.rotary_embedding(x, cos, sin, positions)
    return torch.ops.my_ops.rotary_embedding(x, cos, sin, positions, interleaved)


def fake(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions, interleaved: bool):
    return _checks.new_like(x)


def _pairs(t: torch.Tensor, interleaved: bool, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first and second members of the ``half`` rotated pairs of features (views of t)."""
    if interleaved:
        return t[..., 0 : 2 * half : 2], t[..., 1 : 2 * half : 2]
    return t[..., :half], t[..., half : 2 * half]


def _table_rows(table: torch.Tensor, positions: torch.Tensor | None) -> torch.Tensor:
    """Each token's row of ``table``, shaped to broadcast over x: ``[..., seq, 1, width]``."""
    rows = table if positions is None else table[positions]
    return rows.unsqueeze(-2)


def _sum_to_table(t: torch.Tensor, positions: torch.Tensor | None, rows: int) -> torch.Tensor:
    """[..., seq, heads, width] summed into the tables' rows: over the heads, then over every
    token at the same row."""
    if positions is None:
        return t.sum(dim=[*range(t.dim() - 3), t.dim() - 2])
    per_token = t.sum(dim=-2)  # [..., seq, width]
    index = positions.expand(per_token.shape[:-1]).reshape(-1)
    width = per_token.shape[-1]
    table = per_token.new_zeros(rows, width)
    return table.index_add(0, index, per_token.reshape(-1, width))


def _setup_context(ctx, inputs, output) -> None:
    x, cos, sin, positions, interleaved = inputs
    ctx.save_for_backward(x, cos, sin, positions)
    ctx.interleaved = interleaved


def _backward(ctx, grad):
    x, cos, sin, positions = ctx.saved_tensors
    # A rotation's transpose is the rotation by the opposite angle: sin -> -sin; the copied
    # features pass their gradient through, as the op copies them.
    grad_x = torch.ops.my_ops.rotary_embedding(grad, cos, -sin, positions, ctx.interleaved)
    cdt = _checks.compute_dtype(x)
    half = cos.shape[-1]
    a, b = _pairs(x.to(cdt), ctx.interleaved, half)
    ga, gb = _pairs(grad.to(cdt), ctx.interleaved, half)
    # d/dcos of (a cos - b sin, b cos + a sin) is (a, b); d/dsin is (-b, a).
    rows = cos.shape[0]
    grad_cos = _sum_to_table(ga * a + gb * b, positions, rows).to(cos.dtype)
    grad_sin = _sum_to_table(gb * a - ga * b, positions, rows).to(sin.dtype)
    return grad_x, grad_cos, grad_sin, None, None


def reference(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor | None = None,
    interleaved: bool = False,
) -> torch.Tensor:
    """The rotation of every pair in float64, written pair by pair, in x's dtype."""
    half = cos.shape[-1]
    c = _table_rows(cos.double(), positions)  # the same angle for every head
    s = _table_rows(sin.double(), positions)
    xd = x.double()
    a, b = _pairs(xd, interleaved, half)
    ra, rb = a * c - b * s, b * c + a * s
    if interleaved:
        rotated = torch.stack([ra, rb], dim=-1).flatten(-2)
    else:
        rotated = torch.cat([ra, rb], dim=-1)
    return torch.cat([rotated, xd[..., 2 * half :]], dim=-1).to(x.dtype)


def eager(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor | None = None,
    interleaved: bool = False,
) -> torch.Tensor:
    """As the Hugging Face LLaMA, GPT-J and GPT-NeoX code write it: the tables gathered by
    position, full-size tables, a rotated copy of x, the features past rotary_dim apart."""
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    rotary_dim = 2 * cos.shape[-1]
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    if interleaved:
        cos_full = cos.repeat_interleave(2, dim=-1)
        sin_full = sin.repeat_interleave(2, dim=-1)
        rotated = torch.stack([-x_rot[..., 1::2], x_rot[..., 0::2]], dim=-1).flatten(-2)
    else:
        cos_full = torch.cat([cos, cos], dim=-1)
        sin_full = torch.cat([sin, sin], dim=-1)
        half = rotary_dim // 2
        rotated = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    out = x_rot * cos_full.unsqueeze(-2) + rotated * sin_full.unsqueeze(-2)
    return torch.cat([out, x_pass], dim=-1)


def tables(
    seq: int,
    head_dim: int,
    base: float = 10000.0,
    dtype=torch.float32,
    device=None,
    rotary_dim: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(cos, sin)`` tables of LLaMA's RoPE for positions ``0 .. seq - 1``: angle
    ``p * base ** (-2i / rotary_dim)`` for position p and pair i (rotary_dim: head_dim by
    default), computed in float64 and rounded once to ``dtype``."""
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
    return angles.cos().to(dtype=dtype, device=device), angles.sin().to(dtype=dtype, device=device)


def _edge_samples(device: str) -> list[tuple]:
    # LLaMA's tables; tables of 0, +-1 and 0.5, whose products are exact in every dtype;
    # values that underflow float16; and in half precision, pairs whose rotation cancels
    # to exactly zero or overflows float16 (60000 * sqrt(2) > 65504).
    samples = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        cos, sin = tables(8, 16, dtype=dtype, device=device)
        quarter = torch.tensor([[1.0, 0.0, 0.0, 1.0, -1.0, 0.0, 0.5, 0.0]] * 8)
        c_exact = quarter.to(device=device, dtype=dtype)
        s_exact = quarter.flip(-1).to(device=device, dtype=dtype)
        big = torch.full((1, 8, 2, 16), 60000.0).to(device=device, dtype=dtype)
        tiny = torch.full((1, 8, 2, 16), 1e-30).to(device=device, dtype=dtype)
        x = torch.linspace(-4.0, 4.0, 8 * 3 * 16).reshape(1, 8, 3, 16).to(device, dtype)
        diag = torch.full((8, 8), 0.70710678).to(device=device, dtype=dtype)
        for interleaved in (False, True):
            samples += [
                (x, cos, sin, None, interleaved),
                (x, c_exact, s_exact, None, interleaved),
                (tiny, cos, sin, None, interleaved),
            ]
            if dtype in (torch.float16, torch.bfloat16):
                # Only where the products are exact in float32 (an 11- or 8-bit table times
                # 60000): with float32 tables, whether a * c - b * s cancels exactly depends
                # on whether the compiler fuses it into an FMA, one rounding of a ~4e4
                # product (~2e-3), which is the op's float32 error at that magnitude but
                # beyond the suite's absolute tolerance for outputs near zero.
                samples.append((big, diag, diag, None, interleaved))
            samples += _position_samples(x, dtype, device, interleaved)
    return samples


def _position_samples(x: torch.Tensor, dtype, device: str, interleaved: bool) -> list[tuple]:
    # x [1, 8, 3, 16] against tables of 12 positions: positions in any order, repeated, per
    # token, a decode step of one token at the tables' last row; full and partial rotations
    # (rotary_dim 8 and 2 of 16, and 0: a copy).
    pos = torch.tensor([11, 0, 5, 5, 3, 7, 2, 9], device=device)
    per_token = (torch.arange(16, device=device) * 5 % 12).view(2, 8)
    step = x[:, -1:]
    samples = []
    for rotary_dim in (16, 8, 2, 0):
        cos, sin = tables(12, 16, dtype=dtype, device=device, rotary_dim=rotary_dim or 2)
        cos, sin = cos[:, : rotary_dim // 2], sin[:, : rotary_dim // 2]
        samples += [
            (x, cos, sin, pos, interleaved),
            (torch.cat([x, x.flip(-1)]), cos, sin, per_token, interleaved),
            (step, cos, sin, torch.tensor([11], device=device), interleaved),
        ]
    return samples


def _bad_cases(device: str) -> list[BadCase]:
    def call(positions, rows=6, positions_device=device):
        def make(d):
            x = torch.randn(1, 4, 2, 8).to(d)
            cos, sin = tables(rows, 8, device=d)
            return x, cos, sin, torch.tensor(positions).to(positions_device), False

        return make

    if device != "cpu":
        # A CUDA kernel refuses a position outside the tables with a device-side assert,
        # which leaves the process's CUDA context unusable: not a case to run among others.
        return [
            BadCase("positions-on-cpu", call([0, 1, 2, 3], positions_device="cpu"), "positions")
        ]
    return [
        # Values only the kernels see: rows the tables do not hold.
        BadCase("positions-past-the-tables", call([0, 1, 2, 6]), "positions", values_only=True),
        BadCase("positions-negative", call([0, -1, 2, 3]), "positions", values_only=True),
        # Fewer rows than x's seq dim are fine with positions, which the tables must hold.
        BadCase(
            "tables-shorter-than-a-position",
            call([0, 1, 2, 3], rows=3),
            "positions",
            values_only=True,
        ),
    ]


SPEC = OpSpec(
    name="rotary_embedding",
    wrapper=rotary_embedding,
    fake=fake,
    reference=reference,
    eager=eager,
    defaults={"positions": None, "interleaved": False},
    arguments={
        "x": Primary(last_dim_multiple=2, min_dim=3),
        "cos": PositionTable(),
        "sin": PositionTable(like="cos"),
        "positions": Positions(),
        "interleaved": Flag(),
    },
    autograd=Autograd(_backward, _setup_context),
    edge_samples=_edge_samples,
    bad_cases=_bad_cases,
    # cpu: 5.5x eager in float32 and 2.2x in bfloat16 at 4096 x 1024 on a busy 2-core host,
    # where its bandwidth against clone's was too noisy to set a target. cuda: the target
    # the other elementwise kernels meet, for the half-split packed path that //ops:bench
    # takes; tools/gpu_check is where it is measured.
    bench={
        "cpu": BenchTargets(min_vs_eager=1.5),
        "cuda": BenchTargets(min_clone_bandwidth=0.7),
    },
)
