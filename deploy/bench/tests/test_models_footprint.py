"""bench_models --footprint: each model's weight bytes, and the verdicts of its table."""

from __future__ import annotations

import pytest
import torch

from deploy.bench import footprint, models_footprint

MIB = models_footprint.MIB


def _results(peaks_mib: dict[str, float], starts: dict[str, float]) -> list[footprint.Footprint]:
    return [
        footprint.Footprint(
            name, [starts[name]] * 3, [int(peaks_mib[name] * MIB)] * 3, ["libc.so.6"], {}
        )
        for name in models_footprint.RUNNERS
    ]


PEAKS = {
    "ours loader": 650.0,
    "ours SDK": 660.0,
    "ours, weights inside": 1200.0,
    "onnxruntime process": 950.0,
}
STARTS = {
    "ours loader": 1.00,
    "ours SDK": 1.03,
    "ours, weights inside": 1.5,
    "onnxruntime process": 0.9,
}
# SmolLM2-135M's float32 weights: the target is 1.1 x 517 MiB + 130 MiB.
WEIGHTS = 517 * MIB


def test_the_rss_target_is_the_weights_once_and_the_runtime():
    assert models_footprint.rss_target(WEIGHTS) == pytest.approx((1.1 * 517 + 130) * MIB)


def test_a_loader_within_its_targets_is_met():
    rows, missed = models_footprint.rows("smollm2", _results(PEAKS, STARTS), WEIGHTS)
    assert missed == []
    verdicts = {row[1]: row[-1] for row in rows}
    assert verdicts["ours loader"].endswith("MET")
    assert verdicts["ours SDK"].endswith("MET")
    assert [row[1] for row in rows] == list(models_footprint.RUNNERS)


@pytest.mark.parametrize(
    ("changed", "what"),
    [
        # above 1.1 x 517 + 130 = 698.7 MiB (the SDK program with it)
        ({"ours loader": 700.0, "ours SDK": 705.0}, "ours loader"),
        # ONNX Runtime's process below ours
        ({"onnxruntime process": 640.0}, "ours loader"),
        # 5.1 % above the loader
        ({"ours SDK": 683.0}, "ours SDK"),
    ],
)
def test_each_target_can_be_missed(changed, what):
    rows, missed = models_footprint.rows("smollm2", _results(PEAKS | changed, STARTS), WEIGHTS)
    assert len(missed) == 1 and missed[0].startswith(f"smollm2 {what}:"), missed
    assert {row[1]: row[-1] for row in rows}[what].endswith("MISSED")


def test_an_sdk_start_off_by_more_than_five_percent_is_missed():
    _, missed = models_footprint.rows(
        "minilm", _results(PEAKS, STARTS | {"ours SDK": 1.06}), WEIGHTS
    )
    assert [m.split(":")[0] for m in missed] == ["minilm ours SDK"]


def test_weight_bytes_count_a_tied_tensor_once():
    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("scale", torch.ones(3, dtype=torch.float64))

    assert models_footprint.weight_bytes(Tied()) == 10 * 4 * 4 + 3 * 8
