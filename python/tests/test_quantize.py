"""``my_ops.quantize``: swapping a model's Linear layers for quantized ones."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from my_ops.quantize import QuantizedLinear, quantize_linear_layers
from testing_utils import run_this_file


class Block(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden, bias=False)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x + self.down(torch.relu(self.up(x))))


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


@pytest.mark.parametrize(("scheme", "min_cosine"), [("int8", 0.999), ("int4", 0.99)])
def test_every_linear_is_replaced_and_the_model_stays_close(scheme, min_cosine):
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        want = model(x)
        replaced = quantize_linear_layers(model, scheme)
        got = model(x)
    assert replaced == ["up", "down", "head"]
    assert all(isinstance(getattr(model, n), QuantizedLinear) for n in replaced)
    assert model.down.bias is None and model.up.bias is not None
    assert _cosine(got, want) > min_cosine


def test_skip_patterns_leave_layers_float():
    model = Block()
    assert quantize_linear_layers(model, "int8", skip=["head", "u*"]) == ["down"]
    assert type(model.head) is nn.Linear and type(model.up) is nn.Linear


def test_a_model_without_linear_layers_is_refused():
    with pytest.raises(ValueError, match="Sequential has no nn.Linear layer to quantize"):
        quantize_linear_layers(nn.Sequential(nn.ReLU()), "int8")
    with pytest.raises(ValueError, match="outside the skip patterns"):
        quantize_linear_layers(Block(), "int8", skip=["*"])


def test_bad_schemes_and_group_sizes_are_refused_before_any_change():
    model = Block(hidden=48)  # up's 48 in_features are not a multiple of 32
    with pytest.raises(ValueError, match="scheme must be one of int8, int4"):
        quantize_linear_layers(model, "int2")
    with pytest.raises(ValueError, match="up: in_features 48 is not a multiple"):
        quantize_linear_layers(model, "int4")
    with pytest.raises(ValueError, match="group_size must be a positive multiple of 32"):
        quantize_linear_layers(model, "int4", group_size=16)
    assert all(type(m) is nn.Linear for m in (model.up, model.down, model.head))


def _outlier_inputs(rows: int = 64, k: int = 128, seed: int = 0) -> torch.Tensor:
    # An LLM's activations: most channels about 1, a few 60 times larger in every token.
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k, generator=g)
    x[:, [3, 70]] *= 60
    return x


def test_smoothing_divides_out_the_outlier_channels():
    torch.manual_seed(0)
    linear = nn.Linear(128, 64)
    calibration, held_out = _outlier_inputs(seed=0), _outlier_inputs(seed=1)
    want = nn.functional.linear(held_out.double(), linear.weight.double(), linear.bias.double())
    errors = {}
    for alpha in (0.0, 0.5):
        model = nn.Sequential(linear)
        quantize_linear_layers(model, "int8", smooth_alpha=alpha, example_inputs=(calibration,))
        with torch.no_grad():
            errors[alpha] = float((model(held_out).double() - want).abs().max())
    # A per-token scale sized for the outliers leaves the other channels a few of 255 levels;
    # smoothed, the largest error drops 3.4 to 4.5 times (three seeds of the layer).
    assert errors[0.5] < errors[0.0] / 2, errors


def test_smooth_scales_are_smoothquants():
    torch.manual_seed(0)
    linear = nn.Linear(128, 16, bias=False)
    with torch.no_grad():
        linear.weight[:, 5] = 0  # a column of zeros: nothing to move
    x = _outlier_inputs()
    x[:, 9] = 0  # a channel the example never uses
    model = nn.Sequential(linear)
    quantize_linear_layers(model, "int8", smooth_alpha=0.75, example_inputs=(x,))
    got = model[0].smooth_scale
    # SmoothQuant's s_j = max|x_j| ** alpha / max|w_j| ** (1 - alpha), in float64.
    x_max = x.double().abs().amax(dim=0)
    w_max = linear.weight.double().abs().amax(dim=0)
    want = x_max**0.75 / w_max**0.25
    want[5] = want[9] = 1
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)


def test_smoothing_needs_an_example_and_an_alpha_in_range():
    with pytest.raises(ValueError, match="smooth_alpha needs example_inputs"):
        quantize_linear_layers(Block(), "int8", smooth_alpha=0.5)
    for alpha in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="smooth_alpha must be in"):
            quantize_linear_layers(Block(), "int8", smooth_alpha=alpha, example_inputs=())


@pytest.mark.parametrize("scheme", ["int8", "int4"])
@pytest.mark.parametrize("smooth_alpha", [0.0, 0.5])
def test_a_quantized_model_exports(scheme, smooth_alpha):
    # torch.export traces the ops through their fakes; the program runs them.
    torch.manual_seed(1)
    model = Block().eval()
    x = torch.randn(3, 64)
    quantize_linear_layers(model, scheme, smooth_alpha=smooth_alpha, example_inputs=(x,))
    assert (model.up.smooth_scale is not None) == bool(smooth_alpha)
    batch = torch.export.Dim("batch", min=1, max=8)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert f"my_ops.linear_{scheme}.default" in targets
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), model(x), rtol=0, atol=0)


if __name__ == "__main__":
    run_this_file(__file__)
