"""What the quantized linear layers promise beyond every op's suites.

The suites compare both ops with their float64 references (``my_ops.ops._quantized``),
which redo the activation quantization; here the integer products are checked exactly
against ATen with inputs whose quantization is exact, non-finite rows give NaN, and the
weight quantizers stay within half a step. (test_op_contract.py checks that a call that
needs a gradient is refused, as for every inference op.)
"""

from __future__ import annotations

import pytest
import torch

import my_ops
from my_ops.ops._quantized import (
    pack_int4,
    quantize_weight_int4,
    quantize_weight_int8,
    unpack_int4,
)
from testing_utils import DEVICES, run_this_file

OPS = ["linear_int8", "linear_int4"]


def _exact_rows(rows: int, k: int, g: torch.Generator) -> torch.Tensor:
    # Integers with -128 and 127 in every row: scale (127 + 128) / 255 = 1, zero point 128,
    # so each row quantizes to itself and q - zero is x.
    x = torch.randint(-128, 128, (rows, k), generator=g).float()
    x[:, 0], x[:, -1] = -128, 127
    return x


@pytest.mark.parametrize("device", DEVICES)
def test_linear_int8_products_are_exact(device):
    g = torch.Generator().manual_seed(0)
    # Few rows and many, whole tiles of 16 rows and a part of one, blocks of channels whole and
    # not, an in_features that is not a multiple of 4.
    for rows, k, n in (
        (1, 8, 3),
        (3, 257, 19),
        (5, 257, 19),
        (17, 257, 19),
        (16, 1024, 33),
        (37, 512, 29),
    ):
        x = _exact_rows(rows, k, g)
        w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
        scale = torch.ones(n)
        # Integers below 2**24 in magnitude: float32 holds them, and the sums, exactly.
        want = (x.double() @ w.double().t()).float()
        got = my_ops.linear_int8(x.to(device), w.to(device), scale.to(device))
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        # A power-of-two scale and an integer bias keep it exact.
        bias = torch.randint(-50, 50, (n,), generator=g).float()
        got = my_ops.linear_int8(
            x.to(device), w.to(device), (scale / 4).to(device), bias.to(device)
        )
        torch.testing.assert_close(got.cpu(), want / 4 + bias, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_linear_int4_products_are_exact(device, group_size):
    g = torch.Generator().manual_seed(1)
    for rows, k, n in ((1, 128, 3), (7, 256, 17), (16, 1024, 33), (37, 512, 29)):
        x = _exact_rows(rows, k, g)
        values = torch.randint(-8, 8, (n, k), generator=g)
        groups = k // group_size
        # Powers of two, one per group: every product and partial sum stays exact.
        scale = 2.0 ** torch.randint(-3, 3, (n, groups), generator=g).float()
        dequantized = values.double() * scale.double().repeat_interleave(group_size, dim=1)
        want = (x.double() @ dequantized.t()).float()
        got = my_ops.linear_int4(
            x.to(device), pack_int4(values).to(device), scale.to(device), group_size
        )
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_int4_packing_is_low_bits_first():
    # Independent of pack_int4: byte j holds k = 2j in its low four bits, as w + 8.
    values = torch.tensor([[-8, 7, 0, -1]])
    assert pack_int4(values).tolist() == [[0x00 | (15 << 4), 8 | (7 << 4)]]
    assert unpack_int4(pack_int4(values)).tolist() == values.tolist()


def _call(op: str, x, w, bias=None):
    if op == "linear_int8":
        q, s = quantize_weight_int8(w)
        return my_ops.linear_int8(x, q.to(x.device), s.to(x.device), bias)
    q, s = quantize_weight_int4(w, 32)
    return my_ops.linear_int4(x, q.to(x.device), s.to(x.device), 32, bias)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
# Few rows and channels, and enough of both for every CPU kernel (tiles of 16 rows, AMX tiles of
# 16 channels).
@pytest.mark.parametrize("rows, channels", [(4, 6), (20, 40)])
def test_a_row_with_an_infinity_or_nan_gives_nan_and_leaves_the_others(device, op, rows, channels):
    x = torch.randn(rows, 64, device=device)
    w = torch.randn(channels, 64)
    clean = _call(op, x, w)
    x[1, 3] = float("inf")
    x[2, 9] = float("nan")
    got = _call(op, x, w)
    assert got[1].isnan().all() and got[2].isnan().all()
    others = [0] + list(range(3, rows))
    assert not got[others].isnan().any()
    torch.testing.assert_close(got[others], clean[others], rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_quantized_layers_stay_close_to_the_float_layer(op):
    # Not the reference (the suites have it): how much quantization costs on typical data,
    # against the float layer. int8 per channel and per token keeps a cosine above 0.999;
    # int4 in groups of 32, above 0.99.
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 576, generator=g)
    w = torch.randn(1536, 576, generator=g) / 24
    want = torch.nn.functional.linear(x, w)
    got = _call(op, x, w)
    cosine = torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0)
    assert cosine > (0.999 if op == "linear_int8" else 0.99), cosine


def test_weight_quantizers_stay_within_half_a_step():
    g = torch.Generator().manual_seed(3)
    w = torch.randn(9, 256, generator=g)
    w[4] = 0.0  # a channel of zeros keeps scale 1
    q, s = quantize_weight_int8(w)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and s[4] == 1
    assert ((q.float() * s[:, None] - w).abs() <= s[:, None] / 2 * (1 + 1e-6)).all()
    packed, s4 = quantize_weight_int4(w, 64)
    assert packed.shape == (9, 128) and s4.shape == (9, 4) and s4.dtype == torch.float16
    step = s4.repeat_interleave(64, dim=1)
    assert ((unpack_int4(packed).float() * step - w).abs() <= step / 2 * (1 + 1e-6)).all()
    with pytest.raises(ValueError, match="group_size 48"):
        quantize_weight_int4(w, 48)


def test_int4_scales_fit_float16_or_raise():
    w = torch.randn(4, 64)
    _, s32 = quantize_weight_int4(w, 32, scale_dtype=torch.float32)
    _, s16 = quantize_weight_int4(w, 32)
    assert s32.dtype == torch.float32 and s16.dtype == torch.float16
    # float16's rounding of max |w| / 7: within half of its 2**-10 relative step.
    torch.testing.assert_close(s16.float(), s32, rtol=2.0**-11, atol=0)
    tiny = torch.full((1, 32), 1e-12)  # max |w| / 7 under float16's smallest step
    _, s = quantize_weight_int4(tiny, 32)
    assert s.item() == 2.0**-24
    with pytest.raises(ValueError, match="does not fit float16"):
        quantize_weight_int4(torch.full((1, 32), 1e6), 32)
    with pytest.raises(ValueError, match="scale_dtype must be"):
        quantize_weight_int4(w, 32, scale_dtype=torch.bfloat16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [3, 20])
def test_int4_float16_scales_give_what_their_float32_values_give(device, rows):
    # Every kernel (a few rows and the tiled ones) reads float16 scales as the float32 they are.
    x = torch.randn(rows, 128, device=device)
    q, s16 = quantize_weight_int4(torch.randn(40, 128), 32)
    q, s16 = q.to(device), s16.to(device)
    got = my_ops.linear_int4(x, q, s16, 32)
    want = my_ops.linear_int4(x, q, s16.float(), 32)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("device", [d for d in DEVICES if d.startswith("cuda")] or ["cuda"])
def test_cuda_kernels_give_nan_for_a_scale_the_cpu_refuses(device):
    # A check of the scales' values would cost the GPU a synchronisation per call: the CUDA
    # kernels write NaN in the channel instead, where the CPU kernels raise.
    if device not in DEVICES:
        pytest.skip("the cuda cases run in the cuda targets, on a machine with a GPU")
    x = torch.randn(3, 64, device=device)
    w8 = torch.ones(2, 64, dtype=torch.int8, device=device)
    s8 = torch.tensor([0.5, 0.0], device=device)
    out = my_ops.linear_int8(x, w8, s8)
    assert out[:, 1].isnan().all() and out[:, 0].isfinite().all()
    w4 = torch.full((2, 32), 0x98, dtype=torch.uint8, device=device)
    s4 = torch.tensor([[0.5, 0.5], [0.5, float("inf")]], device=device)
    out = my_ops.linear_int4(x, w4, s4, 32)
    assert out[:, 1].isnan().all() and out[:, 0].isfinite().all()


if __name__ == "__main__":
    run_this_file(__file__)
