"""tools/bazel run //deploy:bench_weights: what shipping only the weights saves.

For the default model and a larger one (weights_models.py, about 25 MB of float32 weights) it
exports the package twice, with the weights beside it (the default: weights.bin, which the
runtime maps) and inside the model's .so (--weights-inside), and a weights file for each from
another training run (export --weights-only). Then it prints:

  sizes    the package (model.pt2) against the weights file (weights.bin + weights.json);
  times    through the deploy API, which the loader is built on (weights_timer.cpp), median
           over --rounds rounds in one process: a full load of the package (Model::open:
           copies, hashes, checks, loads), an update with the weights file
           (Model::update_weights), and a call with the new weights (p50 of --calls).

Exports go to the compile cache as usual, so a second run spends its time in the timings.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The weights inside the model's .so, where a CPU package's go beside it by default.
INSIDE_OPTIONS = ("--weights-inside",)
MODELS = {
    "default": ("deploy.default_model:make_model", "deploy.default_model:make_retrained_model"),
    "large": ("deploy.bench.weights_models:large", "deploy.bench.weights_models:retrained"),
}
_ROUND = re.compile(r"open_ms ([0-9.]+) update_ms ([0-9.]+) run_p50_ms ([0-9.]+)")


@dataclass(frozen=True)
class Row:
    model: str
    layout: str
    package_bytes: int
    weights_bytes: int
    open_ms: float
    update_ms: float
    run_ms: float


def _resolve(value: str | None, env: str, flag: str) -> str:
    path = value or os.environ.get(env)
    if not path:
        sys.exit(f"bench_weights: error: give --{flag} or set ${env}")
    return os.path.abspath(path)


def _export(exporter: list[str], args: list[str], env: dict[str, str], what: str) -> None:
    print(f"export: {what} ...", end=" ", flush=True)
    proc = subprocess.run([*exporter, *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_weights: error: export of {what} failed:\n{proc.stderr}")
    print("done", flush=True)


def _time(timer: str, ops: str, package: Path, weights: Path, rounds: int, calls: int) -> tuple:
    cmd = [timer, "--ops", ops, "--package", str(package / "model.pt2")]
    cmd += ["--weights", str(weights / "weights.bin"), "--input", str(weights / "sample_input.pt")]
    cmd += ["--rounds", str(rounds), "--calls", str(calls)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_weights: error: {' '.join(cmd)} failed:\n{proc.stderr}")
    found = [tuple(float(g) for g in m.groups()) for m in _ROUND.finditer(proc.stdout)]
    if len(found) != rounds:
        sys.exit(f"bench_weights: error: expected {rounds} rounds from the timer:\n{proc.stdout}")
    return tuple(statistics.median(col) for col in zip(*found, strict=True))


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_weights", description=__doc__.split("\n\n")[0])
    p.add_argument("--export", help="the exporter (default: $MY_OPS_EXPORT)")
    p.add_argument("--timer", help="weights_timer (default: $MY_OPS_WEIGHTS_TIMER)")
    p.add_argument("--ops", help="libmy_ops.so (default: $MY_OPS_LIBRARY)")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per package (default: 7)")
    p.add_argument("--calls", type=int, default=200, help="timed calls per round (default: 200)")
    p.add_argument("--models", default=",".join(MODELS), help="which models (default: %(default)s)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        p.error("--rounds and --calls must be >= 1")
    models = args.models.split(",")
    if unknown := [m for m in models if m not in MODELS]:
        p.error(f"--models: unknown {unknown}; choose from {','.join(MODELS)}")
    exporter = [_resolve(args.export, "MY_OPS_EXPORT", "export")]
    timer = _resolve(args.timer, "MY_OPS_WEIGHTS_TIMER", "timer")
    # The file itself: the API opens nothing through a symbolic link (a runfile is one).
    ops = os.path.realpath(_resolve(args.ops, "MY_OPS_LIBRARY", "ops"))
    env = dict(os.environ)
    # The exporter imports the bench's models as this process does.
    env["PYTHONPATH"] = os.pathsep.join(q for q in sys.path if q)
    env["MY_OPS_LIBRARY"] = ops

    work = Path(tempfile.mkdtemp(prefix="my_ops_bench_weights."))
    rows: list[Row] = []
    try:
        for model in models:
            original, retrained = MODELS[model]
            for layout, extra in (("beside the package", ()), ("in the .so", INSIDE_OPTIONS)):
                tag = f"{model}, weights {layout}"
                package = work / f"{model}-{len(extra)}"
                weights = work / f"{model}-{len(extra)}-weights"
                # A tuned package freezes its weights and takes no weights file.
                base_args = ["--model", original, "--out", str(package), "--mode", "no-autotune"]
                _export(exporter, [*base_args, *extra], env, tag)
                args_w = ["--weights-only", "--base", str(package), "--model", retrained]
                _export(exporter, [*args_w, "--out", str(weights)], env, f"{tag}: weights file")
                timed = _time(timer, ops, package, weights, args.rounds, args.calls)
                # The package's bytes include the weights beside it, where they are.
                beside = package / "weights.bin"
                rows.append(
                    Row(
                        model,
                        layout,
                        (package / "model.pt2").stat().st_size
                        + (beside.stat().st_size if beside.exists() else 0),
                        (weights / "weights.bin").stat().st_size
                        + (weights / "weights.json").stat().st_size,
                        *timed,
                    )
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _print(rows, args.rounds, args.calls)
    return 0


def _print(rows: list[Row], rounds: int, calls: int) -> None:
    print(f"\nsizes and times (median of {rounds} rounds in one process; call: p50 of {calls})")
    header = (
        "model",
        "weights",
        "package",
        "weights file",
        "file/package",
        "full load",
        "update",
        "update/load",
        "call",
    )
    table = [header]
    for r in rows:
        table.append(
            (
                r.model,
                r.layout,
                _mb(r.package_bytes),
                _mb(r.weights_bytes),
                f"{r.weights_bytes / r.package_bytes:.3f}",
                f"{r.open_ms:.1f} ms",
                f"{r.update_ms:.1f} ms",
                f"{r.update_ms / r.open_ms:.3f}",
                f"{r.run_ms:.3f} ms",
            )
        )
    widths = [max(len(t[i]) for t in table) for i in range(len(header))]
    for i, t in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    sys.exit(main())
