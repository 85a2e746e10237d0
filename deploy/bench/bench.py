"""Export time and latency of the default model, in one run: //deploy:bench.

First the export (bench_export.py): the whole command with today's settings
and no cache, with an empty cache, after a model change, and unchanged (a
cache hit). Then, at batch 1 on the package that export wrote:
  * per-call p50 of Python AOTI (aoti_load_package) and of the C++ loader
    (--bench), in REPEATS alternating rounds, each process pinned to one CPU
    with one thread, and eager's for reference;
  * per-call p50 of a program on the SDK's shared library (sdk_app.cpp: the
    deploy API from an application's side) against the loader's, the same way;
  * process start to first result: the C++ loader vs a Python script doing
    the same load + run + save;
  * the footprint of one run (footprint.py): peak RSS, start to first
    result and the libraries mapped, the loader as built against the loader
    with libtorch.so (what it linked before: LibTorch's whole CUDA stack).

Targets: see bench_export.py for the export's; C++ per-call p50 <= 0.8x
Python AOTI's and <= 1.05x that of the package today's settings compiled, the
SDK app's <= 1.05x the loader's, each
judged by the median over rounds of the ratio of two timings taken back to
back (a burst of background load that hits one side of one round moves that
round only); C++ start-to-first-result <= 0.3x Python's; the footprint's
targets are in footprint.py. Then the custom-op
tax table (tax.py), judged the same way.
Exit status 1 when a target is missed (--no-check: always 0).

Paths come from flags or the environment (MY_OPS_LOADER, MY_OPS_LIBRARY), as
in the tests. --package skips the export table and measures that package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deploy.bench import footprint, tax
from deploy.bench.bench_export import export_rows, export_runs

PER_CALL_TARGET = 0.8
# The faster compile may not cost the package more than 5% per call.
TODAY_LATENCY_TARGET = 1.05
# An application on the SDK's shared library may not pay more than 5% per call over the loader.
SDK_APP_TARGET = 1.05
STARTUP_TARGET = 0.3

# Per-call latency of the package in Python (and of the model in eager with
# "eager"): argv = package, inputs, calls[, eager]. Prints p50 and p99 in ms.
PY_PER_CALL = """
import sys, time, torch, my_ops
from deploy.exporter.loading import load
torch.set_num_threads(1)
def p50_p99(fn, n):
    for _ in range(max(10, n // 10)):
        fn()
    s = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); s.append((time.perf_counter() - t0) * 1e3)
    s.sort()
    return s[len(s) // 2], s[min(len(s) - 1, int(0.99 * len(s)))]
inputs = torch.load(sys.argv[2])
n = int(sys.argv[3])
if sys.argv[4:] == ["eager"]:
    from deploy import default_model
    m = default_model.make_model().module.eval()
    with torch.no_grad():
        print(*p50_p99(lambda: m(*inputs), n))
else:
    m = load(sys.argv[1])
    print(*p50_p99(lambda: m(*inputs), n))
"""

# Same work as `loader --package P --input I --output O`, for the start-up race.
PY_FIRST_RESULT = """
import sys, torch, my_ops
from deploy.exporter.loading import load
m = load(sys.argv[1])
inputs = torch.load(sys.argv[2])
out = m(*inputs)
torch.save(tuple(out) if isinstance(out, (list, tuple)) else (out,), sys.argv[3])
"""


def _resolve(path: str | None, env: str, what: str) -> str:
    value = path or os.environ.get(env)
    if not value:
        sys.exit(f"bench: error: pass --{what} or set {env}")
    # `bazel run` starts us in the runfiles tree, where data paths are relative
    # links; the loader opens files themselves, never through a symbolic link.
    p = os.path.realpath(value)
    if not os.path.exists(p):
        sys.exit(f"bench: error: {what} not found: {value}")
    return p


def _pin_to_one_cpu() -> None:
    # Both sides of the per-call ratio run on the same CPU, one thread each,
    # so the ratio compares the callers, not the scheduler's mood.
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def _p50_p99(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_pin_to_one_cpu)
    if proc.returncode != 0:
        sys.exit(f"bench: error: {cmd[0]} failed:\n{proc.stdout}{proc.stderr}")
    words = proc.stdout.split()
    if "p50" in words:  # the loader's --bench line
        return float(words[words.index("p50") + 1]), float(words[words.index("p99") + 1])
    return float(words[-2]), float(words[-1])


def _median_wall(cmd: list[str], env: dict[str, str], runs: int) -> float:
    # The first run only warms the page cache, so both sides start equal.
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", help="C++ loader binary (default: $MY_OPS_LOADER)")
    p.add_argument(
        "--paired-timer", help="the tax table's C++ runner (default: $MY_OPS_PAIRED_TIMER)"
    )
    p.add_argument(
        "--sdk-app",
        help="a program on the SDK's library, timed as the loader (default: $MY_OPS_SDK_APP)",
    )
    p.add_argument("--ops", help="libmy_ops.so (default: $MY_OPS_LIBRARY)")
    p.add_argument(
        "--package", help="model.pt2 of the default model (default: export it, timing the export)"
    )
    p.add_argument("--iters", type=int, default=2000, help="timed calls per round and side")
    p.add_argument("--repeats", type=int, default=7, help="per-call rounds (default: 7)")
    p.add_argument("--starts", type=int, default=5, help="process starts per variant")
    p.add_argument("--no-check", action="store_true", help="do not fail on missed targets")
    p.add_argument(
        "--footprint",
        choices=("on", "off", "only"),
        default="on",
        help="the footprint table (peak RSS, start to first result, libraries; see footprint.py): "
        "on (default), off, or only that table",
    )
    p.add_argument(
        "--tax",
        choices=("on", "off", "only"),
        default="on",
        help="the custom-op tax table (see tax.py): on (default), off, or only that table",
    )
    p.add_argument(
        "--tax-families",
        default=",".join(tax.FAMILIES),
        help=f"op families of the tax table (default: {','.join(tax.FAMILIES)})",
    )
    p.add_argument(
        "--tax-sizes",
        default=",".join(f"{r}x{h}" for r, h in tax.SIZES),
        help="ROWSxHIDDEN sizes of the tax table (default: %(default)s)",
    )
    p.add_argument(
        "--tax-isas",
        default=",".join(tax.ISAS),
        help="--isa values of the tax table's exports (default: %(default)s)",
    )
    args = p.parse_args(argv)
    if args.iters < 1 or args.repeats < 1 or args.starts < 1:
        p.error("--iters, --repeats and --starts must be >= 1")
    try:
        args.tax_cells = tax.parse_cells(args.tax_families, args.tax_sizes, args.tax_isas)
    except ValueError as e:
        p.error(str(e))

    loader = _resolve(args.loader, "MY_OPS_LOADER", "loader")
    args.sdk_app = _resolve(args.sdk_app, "MY_OPS_SDK_APP", "sdk-app")
    ops = _resolve(args.ops, "MY_OPS_LIBRARY", "ops")
    os.environ["MY_OPS_LIBRARY"] = ops

    work = Path(tempfile.mkdtemp(prefix="my_ops_bench."))
    try:
        return _run(args, loader, ops, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print_table(title: str, rows: list[tuple[str, ...]]) -> None:
    print(f"\n{title}")
    header = ("measurement", "value", "ratio", "target")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _run(args: argparse.Namespace, loader: str, ops: str, work: Path) -> int:
    env = dict(os.environ)
    # The children import my_ops and deploy.default_model as this process does.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["TMPDIR"] = str(work / "tmp")
    (work / "tmp").mkdir()
    missed: list[str] = []

    if args.tax == "only":
        missed += _tax_tables(args, ops, work, env, None)
        print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
        return 1 if missed and not args.no_check else 0
    if args.package:
        # Under `bazel run` a relative path is relative to the user's directory.
        user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")
        package = os.path.abspath(os.path.join(user_cwd, args.package))
    else:
        runs = export_runs(work, env)
        rows, export_missed = export_rows(runs)
        _print_table(f"export of the default model, whole command, {os.cpu_count()} CPUs", rows)
        missed += export_missed
        package = str(work / "out" / "model.pt2")

    sample = work / "in.pt"
    _save_sample(sample)
    if args.footprint != "off":
        missed += _footprint_table(args, loader, ops, package, sample, work, env)
        if args.footprint == "only":
            print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
            return 1 if missed and not args.no_check else 0
    one_thread = env | {"OMP_NUM_THREADS": "1"}
    py = [sys.executable, "-c", PY_PER_CALL, package, str(sample), str(args.iters)]
    base = [loader, "--ops", ops, "--package", package, "--input", str(sample)]
    cpp = [*base, "--output", str(work / "b.pt"), "--bench", str(args.iters)]
    eager = _p50_p99([*py, "eager"], one_thread)
    today = work / "today" / "model.pt2"
    cpp_today = [loader, "--ops", ops, "--package", str(today), "--input", str(sample),
                 "--output", str(work / "t.pt"), "--bench", str(args.iters)]  # fmt: skip
    sdk_app = [args.sdk_app, "--ops", ops, "--package", package, "--input", str(sample),
               "--bench", str(args.iters)]  # fmt: skip
    rounds, versus_today, sdk_rounds = [], [], []
    for _ in range(args.repeats):
        aoti_p50 = _p50_p99(py, one_thread)[0]
        cpp_p50 = _p50_p99(cpp, one_thread)[0]
        rounds.append((aoti_p50, cpp_p50, cpp_p50 / aoti_p50))
        if today.exists():
            versus_today.append(cpp_p50 / _p50_p99(cpp_today, one_thread)[0])
        sdk_p50 = _p50_p99(sdk_app, one_thread)[0]
        sdk_rounds.append((sdk_p50, sdk_p50 / cpp_p50))
    ratios = sorted(r[2] for r in rounds)
    sdk_ratios = [r[1] for r in sdk_rounds]

    script = work / "first_result.py"
    script.write_text(PY_FIRST_RESULT)
    py_start = _median_wall(
        [sys.executable, str(script), package, str(sample), str(work / "p.pt")],
        env, args.starts,
    )  # fmt: skip
    cpp_start = _median_wall([*base, "--output", str(work / "c.pt")], env, args.starts)
    start_ratio = cpp_start / py_start

    def ms(values: list[float]) -> str:
        return "/".join(f"{v:.3f}" for v in (min(values), statistics.median(values), max(values)))

    rows = [
        ("per-call p50, eager Python", f"{eager[0]:.3f} ms", "", ""),
        ("per-call p50, Python AOTI (min/med/max)", ms([r[0] for r in rounds]) + " ms", "", ""),
        ("per-call p50, C++ loader (min/med/max)", ms([r[1] for r in rounds]) + " ms", "", ""),
        ("per-call p50, app on the SDK's library (min/med/max)",
         ms([r[0] for r in sdk_rounds]) + " ms", "", ""),
        (f"SDK app / C++ loader p50, {args.repeats} rounds (min/med/max)",
         "/".join(f"{v:.2f}" for v in (min(sdk_ratios), statistics.median(sdk_ratios),
                                        max(sdk_ratios))), "",
         f"median <= {SDK_APP_TARGET}x"),
        (f"C++ / Python AOTI p50, {args.repeats} rounds (min/med/max)",
         f"{ratios[0]:.2f}/{statistics.median(ratios):.2f}/{ratios[-1]:.2f}", "",
         f"median <= {PER_CALL_TARGET}x"),
        *(
            [("C++ p50, this package / today's settings' (min/med/max)",
              f"{min(versus_today):.2f}/{statistics.median(versus_today):.2f}/"
              f"{max(versus_today):.2f}", "", f"median <= {TODAY_LATENCY_TARGET}x")]
            if versus_today else []
        ),
        ("start to first result, Python", f"{py_start * 1e3:.0f} ms", "", ""),
        ("start to first result, C++", f"{cpp_start * 1e3:.0f} ms",
         f"{start_ratio:.2f}x Python", f"<= {STARTUP_TARGET}x"),
    ]  # fmt: skip
    _print_table(
        f"batch 1: {args.iters} calls per round and side, one thread pinned to one CPU; "
        f"{args.starts} starts per variant",
        rows,
    )
    if statistics.median(ratios) > PER_CALL_TARGET:
        missed.append(f"per-call {statistics.median(ratios):.2f}x > {PER_CALL_TARGET}x (median)")
    if statistics.median(sdk_ratios) > SDK_APP_TARGET:
        missed.append(f"SDK app per-call {statistics.median(sdk_ratios):.2f}x the loader's")
    if versus_today and statistics.median(versus_today) > TODAY_LATENCY_TARGET:
        missed.append(f"per-call {statistics.median(versus_today):.2f}x today's package")
    if start_ratio > STARTUP_TARGET:
        missed.append(f"start-up {start_ratio:.2f}x > {STARTUP_TARGET}x")
    if args.tax == "on":
        missed += _tax_tables(args, ops, work, env, Path(package).parent)
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed and not args.no_check else 0


def _footprint_table(
    args: argparse.Namespace, loader: str, ops: str, package: str, sample: Path, work: Path,
    env: dict[str, str],
) -> list[str]:  # fmt: skip
    """The loader as built against the loader with libtorch.so, one run at batch 1 each start."""
    cmd = [loader, "--ops", ops, "--package", package, "--input", str(sample),
           "--output", str(work / "f.pt")]  # fmt: skip
    ours = ("loader", cmd, env)
    (probe,) = footprint.measure([ours], 0)
    with_torch = env | {"LD_PRELOAD": footprint.libtorch_preload(probe.libraries)}
    results = footprint.measure(
        [ours, ("loader with libtorch.so (its link before)", cmd, with_torch)], args.starts
    )
    rows, missed = footprint.footprint_rows(results, baseline=results[1])
    _print_table(f"footprint of one run at batch 1, {args.starts} starts per variant", rows)
    return missed


def _exporter() -> list[str]:
    exe = os.environ.get("MY_OPS_EXPORT")
    return [os.path.realpath(exe)] if exe else [sys.executable, "-m", "deploy.exporter"]


def _tax_tables(
    args: argparse.Namespace, ops: str, work: Path, env: dict, default: Path | None
) -> list[str]:
    """The custom-op tax table, the default model with and without C shims, and eager calls."""
    one_thread = env | {"OMP_NUM_THREADS": "1"}
    timer = _resolve(args.paired_timer, "MY_OPS_PAIRED_TIMER", "paired-timer")
    folders = tax.export_all(args.tax_cells, _exporter(), work, env)
    print("tax: timing the A/A bands (a package against itself, per --isa and size)", flush=True)
    bands = tax.measure_bands(args.tax_cells, folders, timer, ops, one_thread)
    results = []
    for cell in args.tax_cells:
        print(f"tax: timing {cell.label}", flush=True)
        results.append((cell.label, tax.measure_cell(cell, folders, timer, ops, one_thread)))
    rows, missed = tax.rows(results, bands=[bands[(c.isa, c.size)] for c in args.tax_cells])
    _print_table(
        "A/A bands: one package against itself in the same rounds, lowest..highest per-round ratio",
        tax.band_rows(bands),
    )
    _print_table(
        "custom-op tax: 8 x (Linear without bias -> op), ours / Inductor's per-call p50, one "
        "thread pinned to one CPU; ratio: median over interleaved rounds; met at <= 1.00 or "
        "inside the A/A band of its size",
        rows,
    )
    if default is not None:
        shims_off = tax.export_default_without_c_shims(_exporter(), work, env)
        measured = tax.measure(default, shims_off, args.iters, args.repeats, timer, ops,
                               one_thread)  # fmt: skip
        rows, _ = tax.rows([("default model, C shims / --no-c-shims", measured)], target=None)
        _print_table("the default model at batch 1, with and without C shims", rows)
    _print_table(
        "eager calls at 4 x 64 after import my_ops, no grad: our op / its SPEC.eager composition",
        tax.eager_rows(one_thread),
    )
    return missed


def _save_sample(path: Path) -> None:
    import torch

    from deploy import default_model

    torch.save(default_model.make_model().make_inputs(1), path)


if __name__ == "__main__":
    sys.exit(main())
