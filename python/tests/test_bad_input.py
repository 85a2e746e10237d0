"""Bad inputs raise a RuntimeError naming the argument, and the process keeps working."""

from __future__ import annotations

import pytest
import torch

import my_ops
from my_ops import reference
from testing_utils import DEVICES, assert_close, run_this_file

N = 8


def _x(device="cpu", dtype=torch.float32, shape=(3, N)):
    return torch.randn(shape).to(device=device, dtype=dtype)


def _v(device="cpu", dtype=torch.float32, n=N):
    return torch.randn(n).to(device=device, dtype=dtype)


def _bad_cases(device):
    """(id, callable, regex naming the argument)."""
    x, v = _x(device), _v(device)
    cases = [
        # 0-d scalar input.
        ("identity-0d-x", lambda: my_ops.identity_conv(x[0, 0]), r"\bx\b"),
        ("gelu-0d-x", lambda: my_ops.fused_bias_gelu(x[0, 0], v[:1]), r"\bx\b"),
        ("rms-0d-x", lambda: my_ops.fused_add_rms_norm(x[0, 0], x[0, 0], v[:1]), r"\bx\b"),
        # Integer / bool dtypes.
        ("identity-int-x", lambda: my_ops.identity_conv(x.int()), r"\bx\b"),
        ("identity-bool-x", lambda: my_ops.identity_conv(x > 0), r"\bx\b"),
        (
            "gelu-int-x",
            lambda: my_ops.fused_bias_gelu(x.int(), v.int()),
            r"\bx\b",
        ),
        ("gelu-int-bias", lambda: my_ops.fused_bias_gelu(x, v.long()), "bias"),
        ("rms-int-x", lambda: my_ops.fused_add_rms_norm(x.int(), x.int(), v.int()), r"\bx\b"),
        ("rms-int-residual", lambda: my_ops.fused_add_rms_norm(x, x.int(), v), "residual"),
        ("rms-int-weight", lambda: my_ops.fused_add_rms_norm(x, x, v.int()), "weight"),
        ("gelu-bool-x", lambda: my_ops.fused_bias_gelu(x > 0, v > 0), r"\bx\b"),
        # Wrong bias / weight length or rank.
        ("gelu-bias-len", lambda: my_ops.fused_bias_gelu(x, _v(device, n=N + 1)), "bias"),
        ("gelu-bias-2d", lambda: my_ops.fused_bias_gelu(x, x), "bias"),
        ("gelu-bias-0d", lambda: my_ops.fused_bias_gelu(x, v[0]), "bias"),
        ("rms-weight-len", lambda: my_ops.fused_add_rms_norm(x, x, _v(device, n=N - 1)), "weight"),
        ("rms-weight-2d", lambda: my_ops.fused_add_rms_norm(x, x, x), "weight"),
        # Residual shape.
        ("rms-residual-shape", lambda: my_ops.fused_add_rms_norm(x, x[:2], v), "residual"),
        ("rms-residual-bcast", lambda: my_ops.fused_add_rms_norm(x, v, v), "residual"),
        # Mixed floating dtypes.
        ("gelu-bias-dtype", lambda: my_ops.fused_bias_gelu(x, v.double()), "bias"),
        ("rms-weight-dtype", lambda: my_ops.fused_add_rms_norm(x, x, v.half()), "weight"),
        # eps.
        ("rms-neg-eps", lambda: my_ops.fused_add_rms_norm(x, x, v, -1e-6), "eps"),
        ("rms-nan-eps", lambda: my_ops.fused_add_rms_norm(x, x, v, float("nan")), "eps"),
        # approximate.
        ("gelu-approx", lambda: my_ops.fused_bias_gelu(x, v, "erf"), "approximate"),
        ("gelu-approx-case", lambda: my_ops.fused_bias_gelu(x, v, "TANH"), "approximate"),
        ("gelu-approx-empty", lambda: my_ops.fused_bias_gelu(x, v, ""), "approximate"),
        # The custom class.
        ("class-neg-eps", lambda: torch.classes.my_ops.RMSNorm(v, -1.0), "eps"),
        ("class-2d-weight", lambda: torch.classes.my_ops.RMSNorm(x, 1e-6), "weight"),
        ("class-int-weight", lambda: torch.classes.my_ops.RMSNorm(v.int(), 1e-6), "weight"),
        (
            "class-forward-len",
            lambda: torch.classes.my_ops.RMSNorm(v, 1e-6).forward(_x(device, shape=(2, 3))),
            "weight",
        ),
        (
            "class-forward-0d",
            lambda: torch.classes.my_ops.RMSNorm(v, 1e-6).forward(x[0, 0]),
            r"\bx\b",
        ),
        (
            "class-forward-residual",
            lambda: torch.classes.my_ops.RMSNorm(v, 1e-6).forward_residual(x, x[:1]),
            "residual",
        ),
        ("module-neg-eps", lambda: my_ops.RMSNorm(N, eps=-0.5), "eps"),
    ]
    return cases + _device_mix_cases(device)


def _device_mix_cases(device):
    """Arguments split between ``device`` and the cpu, in both orders.

    Only a run on a non-cpu device has a second device to mix with, so a cpu run has no
    such cases rather than cases skipped on machines without a GPU.
    """
    if device == "cpu":
        return []
    return _mixed(device, "cpu", "") + _mixed("cpu", device, "-x-on-cpu")


def _mixed(first, other, suffix):
    x, v = _x(first), _v(first)
    xo, vo = x.to(other), v.to(other)
    return [
        (f"gelu-device-bias{suffix}", lambda: my_ops.fused_bias_gelu(x, vo), "bias"),
        (f"rms-device-residual{suffix}", lambda: my_ops.fused_add_rms_norm(x, xo, v), "residual"),
        (f"rms-device-weight{suffix}", lambda: my_ops.fused_add_rms_norm(x, x, vo), "weight"),
        (
            f"class-device{suffix}",
            lambda: torch.classes.my_ops.RMSNorm(vo, 1e-6).forward(x),
            "weight",
        ),
    ]


_CASES = [(device, case[0]) for device in DEVICES for case in _bad_cases(device)]


def _valid_calls_still_work(device):
    x, r, v = _x(device), _x(device), _v(device)
    assert_close(my_ops.fused_bias_gelu(x, v), reference.bias_gelu(x, v))
    y, h = my_ops.fused_add_rms_norm(x, r, v)
    y_ref, h_ref = reference.add_rms_norm(x, r, v)
    assert_close(y, y_ref)
    assert_close(h, h_ref)
    assert_close(my_ops.identity_conv(x), x)
    assert_close(torch.classes.my_ops.RMSNorm(v, 1e-6).forward(x), reference.rms_norm(x, v))


@pytest.mark.parametrize(("device", "case_id"), _CASES)
def test_bad_input_raises_naming_argument(device, case_id):
    cases = {c[0]: c for c in _bad_cases(device)}
    _, call, pattern = cases[case_id]
    with pytest.raises(RuntimeError, match=pattern):
        call()
    _valid_calls_still_work(device)


@pytest.mark.parametrize("device", DEVICES)
def test_many_errors_then_valid(device):
    # Errors must not leak state (e.g. a poisoned CUDA context or a held lock).
    for _ in range(20):
        for _, call, _pattern in _bad_cases(device):
            with pytest.raises(RuntimeError):
                call()
    _valid_calls_still_work(device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@pytest.mark.parametrize("device", DEVICES)
def test_errors_under_torch_compile(device):
    # The fake implementations reject the same inputs at trace time.
    torch._dynamo.reset()
    compiled = torch.compile(my_ops.fused_bias_gelu, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="bias"):
        compiled(_x(device), _v(device, n=N + 1))
    with pytest.raises(Exception, match="approximate"):
        compiled(_x(device), _v(device), "erf")
    x, v = _x(device), _v(device)
    assert_close(compiled(x, v), reference.bias_gelu(x, v))


if __name__ == "__main__":
    run_this_file(__file__)
