"""What one run of a real model costs the machine, ours against ONNX Runtime's process
(`tools/bazel run //deploy:bench_models -- --footprint`).

For each model, at its first sequence length, one command line per runner is started `starts`
times, the runners in turns (footprint.measure): peak RSS (wait4's ru_maxrss), wall time from
fork to exit (start to first result: one run of the model on its sample input), and the shared
libraries the process initialised. The runners:

  ours loader             the C++ loader on our package, whose weights are beside it
                          (weights.bin, mapped): the default export;
  ours SDK                a program on the SDK's library (sdk_app) on the same package;
  ours, weights inside    the loader on the same model exported with --weights-inside, whose
                          weights AOTInductor copies out of the model's library at load;
  onnxruntime process     a Python process that imports numpy and onnxruntime only, loads the
                          model's ONNX file (CPU execution provider) and runs it once on the
                          same input.

Targets: our loader's peak RSS <= 1.1 x the model's float32 weight bytes + 130 MiB and <= ONNX
Runtime's process in the same run (the weights in memory once); the SDK program's peak RSS and
start within 5 % of the loader's.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploy.bench import footprint

MIB = 1 << 20
# Peak RSS of our loader: this much above the model's float32 weights (the process and LibTorch's
# CPU libraries: 117 MiB for `loader --help` alone), and its weights held at most 1.1 times.
RSS_OVERHEAD_MIB = 130
RSS_WEIGHTS_FACTOR = 1.1
# The SDK program against the loader, on both figures.
SDK_TOLERANCE = 0.05

# One run of an ONNX file on .npy inputs, in a process that holds numpy and onnxruntime only.
ORT_FIRST_RESULT = """
import sys
import numpy as np
import onnxruntime as ort
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
inputs = [np.load(path) for path in sys.argv[2:]]
session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)})
"""

RUNNERS = ("ours loader", "ours SDK", "ours, weights inside", "onnxruntime process")


def weight_bytes(module: Any) -> int:
    """The bytes of a module's parameters and buffers, each storage once (a tied embedding and
    output projection are one tensor)."""
    seen: set[int] = set()
    total = 0
    for t in module.state_dict(keep_vars=True).values():
        storage = t.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def rss_target(weights: int) -> float:
    """The peak RSS our loader may reach, in bytes, for a model of `weights` float32 bytes."""
    return RSS_WEIGHTS_FACTOR * weights + RSS_OVERHEAD_MIB * MIB


def npy_inputs(sample: Path, folder: Path) -> list[str]:
    """The tensors of a torch.save file as .npy files in `folder`, for the ONNX Runtime process,
    which must not import torch."""
    import numpy as np
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, t in enumerate(torch.load(sample)):
        path = folder / f"input_{i}.npy"
        np.save(path, t.numpy())
        paths.append(str(path))
    return paths


def commands(
    sample: Path,
    package: Path,
    inside: Path,
    onnx: Path,
    tools: dict[str, str],
    scratch: Path,
) -> dict[str, list[str]]:
    """Each runner's command line for one run of the model on `sample`."""

    def cpp(binary: str, folder: Path, *extra: str) -> list[str]:
        model = str(folder / "model.pt2")
        return [binary, "--ops", tools["ops"], "--package", model, "--input", str(sample), *extra]

    out = ["--output", str(scratch / "output.pt")]
    ort = [sys.executable, "-c", ORT_FIRST_RESULT, str(onnx)]
    return {
        "ours loader": cpp(tools["loader"], package, *out),
        "ours SDK": cpp(tools["sdk_app"], package, "--bench", "0"),
        "ours, weights inside": cpp(tools["loader"], inside, *out),
        "onnxruntime process": [*ort, *npy_inputs(sample, scratch / "npy")],
    }


def rows(
    label: str,
    results: Sequence[footprint.Footprint],
    weights: int,
) -> tuple[list[tuple[str, ...]], list[str]]:
    """The table's rows for one model, and the targets it missed."""
    by = {r.name: r for r in results}
    peak = {name: statistics.median(r.peak_rss) for name, r in by.items()}
    start = {name: statistics.median(r.walls) for name, r in by.items()}
    target = rss_target(weights)
    ours, ort = peak["ours loader"], peak["onnxruntime process"]
    sdk_rss = peak["ours SDK"] / ours
    sdk_start = start["ours SDK"] / start["ours loader"]
    checks = {
        "ours loader": (
            f"<= {target / MIB:.0f} MiB and <= ONNX Runtime's",
            ours <= target and ours <= ort,
        ),
        "ours SDK": (
            f"RSS {sdk_rss:.3f}x, start {sdk_start:.3f}x the loader's: within 1 +- "
            f"{SDK_TOLERANCE:g}",
            abs(sdk_rss - 1) <= SDK_TOLERANCE and abs(sdk_start - 1) <= SDK_TOLERANCE,
        ),
    }
    table, missed = [], []
    for name in RUNNERS:
        r = by[name]
        what, ok = checks.get(name, ("", True))
        verdict = f"{what}: {'MET' if ok else 'MISSED'}" if what else ""
        if not ok:
            missed.append(f"{label} {name}: {what}")
        table.append(
            (
                label,
                name,
                f"{peak[name] / MIB:.0f} MiB (max {max(r.peak_rss) / MIB:.0f})",
                f"{peak[name] / weights:.2f}",
                f"{start[name]:.3f} s",
                str(len(r.libraries)),
                verdict,
            )
        )
    return table, missed


HEADER = (
    "model",
    "runner",
    "peak RSS, median",
    "/ fp32 weights",
    "start to result, median",
    "libraries",
    "target",
)


def measure_model(
    label: str,
    cmds: dict[str, list[str]],
    env: dict[str, str],
    starts: int,
    weights: int,
) -> tuple[list[tuple[str, ...]], list[str]]:
    """`starts` starts of every runner, in turns, and the model's rows."""
    results = footprint.measure([(name, cmds[name], env) for name in RUNNERS], starts)
    return rows(label, results, weights)


def describe_weights(label: str, weights: int) -> str:
    target = rss_target(weights) / MIB
    return f"{label}: float32 weights {weights / MIB:.0f} MiB, peak RSS target {target:.0f} MiB"


def scratch_for(work: Path, label: str) -> Path:
    folder = work / "footprint" / label
    os.makedirs(folder, exist_ok=True)
    return folder
