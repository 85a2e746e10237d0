"""Shared helpers for the my_ops test suite: devices, dtypes, tolerances, input layouts."""

from __future__ import annotations

import math
import os
import re
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

import my_ops  # (loads libmy_ops.so)
from my_ops.ops._spec import DEFAULT_TOLERANCES

DEVICES_VARIABLE = "MY_OPS_TEST_DEVICES"


def _devices_under_test() -> list[str]:
    """``MY_OPS_TEST_DEVICES`` (comma separated: ``cpu``, ``cuda``, ``cuda:N``), if set.

    Unset, a checkout tests what the machine has: cpu, and cuda when torch sees a GPU. The
    Bazel targets always set it, so which cases a target runs never depends on the machine.
    """
    value = os.environ.get(DEVICES_VARIABLE)
    if value is None:
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    return [name.strip() for name in value.split(",") if name.strip()]


DEVICES = _devices_under_test()

# Whether the companion library (the RMSNorm class) is loaded: under the torch release it is
# built for. test_companion.py checks that it is exactly then; the other suites leave the class
# out of their cases without it.
HAS_COMPANION = my_ops.companion_path() is not None


def _why_no_cuda() -> str:
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    # Initializing CUDA raises with the driver's own explanation, e.g. that no NVIDIA
    # driver is installed or that CUDA_VISIBLE_DEVICES hides every GPU.
    try:
        torch.cuda.init()
    except Exception as e:
        return str(e).splitlines()[0]
    return "torch.cuda.is_available() is False"


def devices_problem() -> str | None:
    """Why the devices that ``MY_OPS_TEST_DEVICES`` asks for cannot be tested here, else None.

    Named devices are a demand, not a preference: a run whose cuda cases were all skipped
    would report the same as one where they passed, so the run fails instead (conftest.py).
    """
    value = os.environ.get(DEVICES_VARIABLE)
    if value is None:
        return None
    asked = f"{DEVICES_VARIABLE}={value!r}"
    if not DEVICES:
        return f"{asked} names no device; use e.g. cpu, cuda or cpu,cuda"
    unknown = [d for d in DEVICES if d != "cpu" and not re.fullmatch(r"cuda(:\d+)?", d)]
    if unknown:
        return f"{asked}: unknown device {', '.join(unknown)} (known: cpu, cuda, cuda:N)"
    cuda = [d for d in DEVICES if d.startswith("cuda")]
    if cuda and not torch.cuda.is_available():
        return (
            f"{asked} asks for the cuda cases, but torch finds no usable CUDA device "
            f"({_why_no_cuda()}); they fail rather than skip, so a run without a working "
            "GPU cannot pass"
        )
    count = torch.cuda.device_count() if cuda else 0
    missing = [d for d in cuda if ":" in d and int(d.split(":")[1]) >= count]
    if missing:
        return f"{asked}: no device {', '.join(missing)} (torch sees {count} CUDA device(s))"
    return None


FLOAT_DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]

# The suite's default tolerances per dtype, with their justification, live beside the
# op specs (my_ops.ops._spec); an op may declare tighter ones.
TOLERANCES = DEFAULT_TOLERANCES


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    msg: str = "",
    tolerances=TOLERANCES,
    *,
    equal_nan: bool = False,
) -> None:
    """Compare in float64 with the tolerance of ``expected.dtype`` (in ``tolerances``, an
    op's own or the suite's); dtype/shape/device must match.

    ``|actual - expected| <= atol + rtol * |expected|`` elementwise. No NaN is allowed,
    unless ``equal_nan``: then NaN must appear exactly where the reference has one. A fast
    vectorized check runs first; otherwise torch.testing decides (matching infinities) and
    reports any mismatch in detail.
    """
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.device == expected.device, (actual.device, expected.device)
    t = tolerances[expected.dtype]
    a, e = actual.detach().double(), expected.detach().double()
    if equal_nan:
        nan = e.isnan()
        assert torch.equal(a.isnan(), nan), (
            f"{msg}\nNaN where the reference has none, or not where it has"
        )
        a, e = a.masked_fill(nan, 0.0), e.masked_fill(nan, 0.0)
    if bool(((a - e).abs() <= t["atol"] + t["rtol"] * e.abs()).all()):
        return
    torch.testing.assert_close(
        a.cpu(), e.cpu(), **t, msg=(lambda m: f"{msg}\n{m}") if msg else None
    )


# Shapes: empty (0 rows), one element, odd sizes, large (~1e6 elements).
SHAPES = {
    "empty": (0, 16),
    "one": (1, 1),
    "odd": (3, 7, 13),
    "vector": (5,),
    "large": (257, 4099),
}

LAYOUTS = ["contiguous", "offset", "sliced", "rows", "transposed"]


def make_input(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    layout: str = "contiguous",
    scale: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A tensor of ``shape`` with the requested memory layout.

    * ``offset``: contiguous, starting one element into its storage (no row is 16-byte
      aligned, so CUDA kernels take their per-row head/tail path).
    * ``sliced``: a view with step 2 in the last dimension (stride 2, storage offset 1).
    * ``rows``: every other row (first-dim step 2; last dim stays dense).
    * ``transposed``: a view of a tensor stored with the last two dims swapped (last-dim
      stride != 1); where the second-to-last dim is missing or 1 (a transpose would still be
      contiguous) it falls back to ``sliced``.
    """
    if layout == "offset":  # contiguous, but one element into its storage: rows unaligned
        base = torch.randn(math.prod(shape) + 1, dtype=torch.float64, generator=generator) * scale
        t = base.to(dtype=dtype, device=device)[1:].view(shape)
    elif layout == "sliced" or (layout == "transposed" and (len(shape) < 2 or shape[-2] == 1)):
        big = list(shape)
        big[-1] = 2 * shape[-1] + 1
        base = torch.randn(big, dtype=torch.float64, generator=generator) * scale
        t = base.to(dtype=dtype, device=device)[..., 1::2]
    elif layout == "rows" and len(shape) >= 2:
        big = [2 * shape[0], *shape[1:]]
        base = torch.randn(big, dtype=torch.float64, generator=generator) * scale
        t = base.to(dtype=dtype, device=device)[::2]
    elif layout == "transposed":
        swapped = list(shape)
        swapped[-1], swapped[-2] = swapped[-2], swapped[-1]
        base = torch.randn(swapped, dtype=torch.float64, generator=generator) * scale
        t = base.to(dtype=dtype, device=device).transpose(-1, -2)
    else:
        base = torch.randn(shape, dtype=torch.float64, generator=generator) * scale
        t = base.to(dtype=dtype, device=device)
    assert tuple(t.shape) == tuple(shape)
    if layout in ("sliced", "transposed") and t.numel() > 1 and shape[-1] > 1:
        assert not t.is_contiguous()
    return t


def hypothesis_settings(max_examples: int = 50):
    # No example database: the Bazel sandbox / runfiles tree may be read-only.
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def run_this_file(path: str) -> None:
    """Entry point so each test file also works as a plain script / Bazel main."""
    sys.exit(pytest.main([path, "-p", "no:cacheprovider", *sys.argv[1:]]))
