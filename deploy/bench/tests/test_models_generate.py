"""bench_models --generate reads the rates from the loader's own --generate line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from deploy.bench import models_generate
from deploy.testing.fixtures import absolute_from_env


def _file(variable: str, suffix: str = "") -> str:
    for path in os.environ[variable].split():
        if path.endswith(suffix):
            return os.path.realpath(absolute_from_env(path))
    pytest.fail(f"no {suffix} in ${variable}")


def test_one_generate_run_gives_both_rates(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.pt"
    torch.save(torch.arange(5), prompt)
    package = Path(_file("MY_OPS_DECODER_PACKAGE", "/model.pt2")).parent
    prefill, decode, tokens = models_generate.generate_once(
        _file("MY_OPS_LOADER"),
        _file("MY_OPS_LIBRARY"),
        package,
        prompt,
        1,
        dict(os.environ, TMPDIR=str(tmp_path)),
        lambda: None,
        new_tokens=20,
    )
    # A two-layer model of width 64: thousands of tokens per second either way.
    assert prefill > 100
    assert decode > 100
    assert len(tokens) == 20
    assert all(0 <= t < 512 for t in tokens)


def test_a_failed_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="loader --generate failed"):
        models_generate.generate_once(
            _file("MY_OPS_LOADER"),
            _file("MY_OPS_LIBRARY"),
            tmp_path,  # no package here
            tmp_path / "prompt.pt",
            1,
            dict(os.environ, TMPDIR=str(tmp_path)),
            lambda: None,
        )
