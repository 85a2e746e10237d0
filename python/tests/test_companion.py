"""The companion library, libmy_ops_torch<release>.so: what the stable ABI cannot express (the
RMSNorm TorchBind class, the C++ autograd entries), built for one torch release.

Under that release (MY_OPS_COMPANION_RELEASE, the build's) `import my_ops` loads it with the
ops; under any other it is left out, the ops keep working with Python's autograd formulas, and
the module that needs the class says, in one line, which torch it needs. These tests run under
both (python/BUILD.bazel: companion_test and companion_torch_2_13_test), each checking what
its torch must give.
"""

from __future__ import annotations

import os

import pytest
import torch

import my_ops
from my_ops import _library
from testing_utils import run_this_file

BUILT_FOR = os.environ["MY_OPS_COMPANION_RELEASE"]
RUNNING = ".".join(torch.__version__.split("+")[0].split(".")[:3])
SAME_RELEASE = RUNNING == BUILT_FOR


def test_the_companion_is_loaded_exactly_under_its_release():
    path = my_ops.companion_path()
    if SAME_RELEASE:
        assert path is not None and os.path.basename(path) == f"libmy_ops_torch{BUILT_FOR}.so"
    else:
        assert path is None
        with pytest.raises(RuntimeError):
            torch.classes.my_ops.RMSNorm  # noqa: B018 (registered by the companion only)


def test_the_module_works_or_names_the_torch_it_needs():
    weight = torch.rand(16) + 0.5
    if SAME_RELEASE:
        module = my_ops.RMSNorm(weight, eps=1e-5)
        x = torch.randn(3, 16)
        want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5)
        torch.testing.assert_close(module(x), (want * weight.double()).float())
        return
    with pytest.raises(my_ops.CompanionUnavailableError) as info:
        my_ops.RMSNorm(weight)
    assert str(info.value) == (
        f"my_ops: my_ops.nn.RMSNorm needs torch {BUILT_FOR}; this is torch {torch.__version__} "
        "(the ops work without it)"
    )


def test_gradients_flow_with_or_without_the_companion():
    # Python's autograd formulas serve every release; the companion's C++ entry only routes
    # calls that need no gradient around them.
    x = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, w: my_ops.rms_norm(a, w, 1e-6), (x, weight))


def test_the_release_of_a_version_string():
    assert _library.torch_release("2.13.0+cpu") == "2.13.0"
    assert _library.companion_name("2.14.1+cu130") == "libmy_ops_torch2.14.1.so"


if __name__ == "__main__":
    run_this_file(__file__)
