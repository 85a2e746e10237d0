"""What gpu_check's own run under Bazel tests in its tests step (--tests PATH), in place
of python/tests: enough to show that the step runs pytest against the library the build
step just linked. The suite itself runs in the //python:*_test targets, and in full on
the GPU machine, where --tests is left at its default.
"""

from __future__ import annotations

import os

import pytest
import torch

import my_ops

DEVICES = os.environ.get("MY_OPS_TEST_DEVICES", "cpu").split(",")


def test_the_library_loaded_is_the_one_the_build_step_linked():
    # Bazel's own libmy_ops.so is in the runfiles too: passing on it would prove nothing.
    my_ops.load_library()
    assert os.path.samefile(my_ops.loaded_path(), os.environ[my_ops.ENV_VAR])


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_matches_aten(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=g, dtype=torch.float64)
    weight = torch.randn(96, generator=g, dtype=torch.float64)
    eps = 1e-5
    expected = torch.nn.functional.rms_norm(x, (96,), weight, eps)
    got = torch.ops.my_ops.rms_norm(x.float().to(device), weight.float().to(device), eps)
    torch.testing.assert_close(got.cpu(), expected.float(), rtol=1e-5, atol=1e-5)
