"""bench_models' parity rule (parity.py): the cosine, and the LLM's next token unless the
original's top two logits are a near-tie."""

from __future__ import annotations

import pytest
import torch

from deploy.bench import parity
from deploy.bench.parity import NEAR_TIE_LOGITS, Agreement, accurate, compare, token_text

# The original's logits: token 1 first, token 2 second, `gap` apart.
_GAP = 0.5


def _want(gap: float) -> torch.Tensor:
    return torch.tensor([0.0, 10.0, 10.0 - gap, 3.0])


def test_compare_measures_the_originals_top_two_gap_and_the_token():
    got = torch.tensor([0.0, 9.0, 9.6, 3.0])  # token 2 ahead
    a = compare(got, _want(_GAP), "smollm2")
    assert a.margin == pytest.approx(_GAP)
    assert not a.same_token
    assert a.cosine == pytest.approx(
        float(torch.nn.functional.cosine_similarity(got.double(), _want(_GAP).double(), dim=0))
    )


def test_a_model_without_a_next_token_has_no_token_and_no_margin():
    a = compare(torch.ones(4), torch.ones(4), "minilm")
    assert a.same_token and a.margin == float("inf")
    assert token_text(a, quantized=True) == ""


def test_a_quantized_runner_may_swap_a_near_tie():
    a = Agreement(0.9999, same_token=False, margin=_GAP)
    assert _GAP < NEAR_TIE_LOGITS
    assert accurate(a, 0.999, token_required=True, quantized=True)
    assert "near-tie" in token_text(a, quantized=True)


def test_a_quantized_runner_must_keep_a_clear_top_token():
    a = Agreement(0.9999, same_token=False, margin=2 * NEAR_TIE_LOGITS)
    assert not accurate(a, 0.999, token_required=True, quantized=True)
    assert token_text(a, quantized=True) == ", OTHER TOKEN"


def test_a_float_runner_must_keep_even_a_near_tie():
    a = Agreement(0.99999, same_token=False, margin=_GAP)
    assert not accurate(a, parity.PARITY, token_required=True, quantized=False)


def test_the_cosine_is_required_whatever_the_token():
    a = Agreement(0.998, same_token=True, margin=2 * NEAR_TIE_LOGITS)
    assert not accurate(a, 0.999, token_required=True, quantized=True)
    assert accurate(a, 0.998, token_required=True, quantized=True)
