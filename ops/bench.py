"""Benchmark the my_ops kernels against eager and torch.compile'd ATen compositions.

For every op of the registry (``my_ops.ops.SPECS``), and for ``RMSNorm.forward`` (the
custom class's residual-free path), it reports the median time of our kernel, of the
eager composition (``spec.eager``) and of ``torch.compile`` of the same composition
(compile time measured separately, after warm-up), plus effective bandwidth, (bytes read +
bytes written) / time, relative to ``torch.clone`` of the same tensor (2 * bytes / time)
measured in the same run. The targets come from each op's spec (``spec.bench``, per device
type) and, for the class, from ``my_ops.nn.BENCH``.

    bazel run //ops:bench -- --rows 16384 --cols 1024 --device cpu
    bazel run //ops:bench -- --ops fused_bias_gelu,RMSNorm.forward --json /tmp/bench.json
    bazel run //ops:bench -- --dtype bfloat16 --cols 4100 --offset 1   # unaligned rows
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import my_ops
except ImportError:  # plain `python ops/bench.py` from a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import my_ops

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


@dataclass(frozen=True)
class Subject:
    """What one group of rows measures: ours and its eager composition, on the same args."""

    name: str
    # (shape, dtype, device, generator) -> (our callable, args): ours may hold state (the
    # class's TorchBind object); args are plain tensors and floats, which eager and
    # torch.compile take.
    prepare: Callable
    eager: Callable
    bench: Mapping  # device type -> my_ops.ops._spec.BenchTargets
    primaries: tuple[int, ...]  # the args shaped like the primary input (see --offset)
    # What ours must agree with before it is timed: the op's float64 reference. (Eager is what a
    # user runs without the op, which a quantized op only approximates.)
    reference: Callable


def op_subject(spec) -> Subject:
    shaped = (my_ops.ops._spec.Primary, my_ops.ops._spec.LikePrimary)
    roles = list(spec.arguments.values())
    primaries = tuple(i for i, role in enumerate(roles) if isinstance(role, shaped))

    def prepare(shape, dtype, device, generator):
        return spec.wrapper, spec.example_args(shape, dtype, device, generator)

    return Subject(spec.name, prepare, spec.eager, spec.bench, primaries, spec.reference)


def _prepare_class(shape, dtype, device, generator):
    # The rms_norm op's arguments, and the TorchBind object holding the same weight and eps;
    # its forward is called as an exported model calls it.
    x, weight, eps = my_ops.ops.SPECS["rms_norm"].example_args(shape, dtype, device, generator)
    obj = torch.classes.my_ops.RMSNorm(weight, eps)
    return (lambda x, weight, eps: obj.forward(x)), (x, weight, eps)


CLASS_SUBJECT = Subject(
    "RMSNorm.forward",
    _prepare_class,
    my_ops.ops.rms_norm.eager,
    my_ops.nn.BENCH,
    (0,),
    my_ops.ops.rms_norm.reference,
)
SUBJECTS = {name: op_subject(spec) for name, spec in my_ops.ops.SPECS.items()}
SUBJECTS[CLASS_SUBJECT.name] = CLASS_SUBJECT


def at_offset(t: torch.Tensor, offset: int) -> torch.Tensor:
    """A copy of ``t`` laid out contiguously ``offset`` elements into a larger storage."""
    storage = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    view = storage[offset:].view(t.shape)
    view.copy_(t)
    return view


@dataclass
class Result:
    op: str
    impl: str
    ms: float
    nbytes: int
    compile_s: float | None = None

    @property
    def gbps(self) -> float:
        return self.nbytes / (self.ms * 1e-3) / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once_ms(fn: Callable, args: tuple, device: torch.device) -> float:
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1e3


def time_interleaved_ms(
    candidates: dict[str, tuple[Callable, tuple]], device: torch.device, iters: int, warmup: int
) -> dict[str, float]:
    """Median time in ms of each ``fn(*args)`` (CUDA: events around each call).

    The candidates run round-robin (one call of each per iteration) so that all of them see
    the same machine conditions; ratios between them stay meaningful on a busy host.
    """
    for fn, args in candidates.values():
        for _ in range(warmup):
            fn(*args)
    _sync(device)
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(iters):
        for name, (fn, args) in candidates.items():
            samples[name].append(_time_once_ms(fn, args, device))
    return {name: statistics.median(v) for name, v in samples.items()}


def compile_and_time(fn: Callable, args: tuple, device: torch.device) -> tuple[Callable, float]:
    """torch.compile ``fn`` and return it with the compile time (first call) in seconds."""
    compiled = torch.compile(fn, fullgraph=True)
    _sync(device)
    t0 = time.perf_counter()
    compiled(*args)
    _sync(device)
    return compiled, time.perf_counter() - t0


def _check_same(op: str, ours, ref, dtype: torch.dtype) -> None:
    ours = ours if isinstance(ours, tuple) else (ours,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    tol = {torch.float32: 1e-4, torch.float64: 1e-8}.get(dtype, 3e-2)
    for a, b in zip(ours, ref, strict=True):
        if not torch.allclose(a.float(), b.float(), rtol=tol, atol=tol):
            raise SystemExit(f"{op}: our kernel disagrees with its float64 reference")


def _nbytes(args: tuple, outputs) -> int:
    # Each input read once and each output written once: the traffic of an ideal kernel.
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    tensors = [a for a in args if isinstance(a, torch.Tensor)] + list(outputs)
    return sum(t.numel() * t.element_size() for t in tensors)


def bench_device(args, device: torch.device, subjects) -> tuple[list[Result], float]:
    dtype = DTYPES[args.dtype]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.cols, generator=g).to(device=device, dtype=dtype)
    results: list[Result] = []
    clone_ms: list[float] = []
    for subject in subjects:
        ours_fn, op_args = subject.prepare((args.rows, args.cols), dtype, device, g)
        op_args = list(op_args)
        for i in subject.primaries if args.offset else ():
            op_args[i] = at_offset(op_args[i], args.offset)
        op_args = tuple(op_args)
        ours = ours_fn(*op_args)
        _check_same(subject.name, ours, subject.reference(*op_args), dtype)
        nbytes = _nbytes(op_args, ours)
        candidates = {
            "my_ops": (ours_fn, op_args),
            "eager": (subject.eager, op_args),
            "torch.clone": (torch.clone, (x,)),
        }
        compile_s = None
        if not args.no_compile:
            compiled, compile_s = compile_and_time(subject.eager, op_args, device)
            candidates["compiled"] = (compiled, op_args)
        ms = time_interleaved_ms(candidates, device, args.iters, args.warmup)
        clone_ms.append(ms.pop("torch.clone"))
        for impl, t in ms.items():
            compile_time = compile_s if impl == "compiled" else None
            results.append(Result(subject.name, impl, t, nbytes, compile_time))
    # Clone runs interleaved with every op; the fastest of its medians is the (conservative)
    # bandwidth reference.
    results.insert(
        0, Result("clone", "torch.clone", min(clone_ms), 2 * x.numel() * x.element_size())
    )
    return results, results[0].gbps


def print_table(device: torch.device, results: list[Result], clone_gbps: float) -> dict:
    by_key = {(r.op, r.impl): r for r in results}
    header = (
        f"{'op':<20} {'impl':<12} {'median ms':>10} {'GB/s':>8} {'x vs eager':>11} "
        f"{'x vs compiled':>14} {'clone BW frac':>14} {'compile s':>10}"
    )
    print(f"\n== device: {device} ==")
    print(header)
    print("-" * len(header))
    for r in results:
        eager = by_key.get((r.op, "eager"))
        compiled = by_key.get((r.op, "compiled"))
        vs_eager = f"{eager.ms / r.ms:.2f}x" if eager else "-"
        vs_compiled = f"{compiled.ms / r.ms:.2f}x" if compiled else "-"
        comp = f"{r.compile_s:.1f}" if r.compile_s is not None else "-"
        print(
            f"{r.op:<20} {r.impl:<12} {r.ms:>10.3f} {r.gbps:>8.1f} {vs_eager:>11} "
            f"{vs_compiled:>14} {r.gbps / clone_gbps:>14.2f} {comp:>10}"
        )
    print("(x vs eager / x vs compiled: speedup = their time / this time; >1 means faster;")
    print(" compile s = first call of torch.compile'd composition, including compilation)")
    return by_key


# Each target a spec may set (BenchTargets' fields): what it compares, the baseline row it
# needs ("torch.clone" is always measured) and the sense of the comparison.
TARGET_KINDS = (
    ("min_vs_eager", "time vs eager", "eager", ">="),
    ("max_vs_compiled", "time / compiled time", "compiled", "<="),
    ("min_clone_bandwidth", "bandwidth / clone bandwidth", "torch.clone", ">="),
)


def check_targets(device: torch.device, subjects, by_key: dict, clone_gbps: float) -> list[dict]:
    """Each subject's targets for this device type (its spec's ``bench``), measured.

    A target whose baseline was not measured (torch.compile's, under --no-compile) is
    listed with ``met`` None and why, never left out.
    """
    checks = []
    for subject in subjects:
        targets = subject.bench.get(device.type)
        if targets is None:
            continue
        ours = by_key[(subject.name, "my_ops")]
        for metric, what, baseline, sense in TARGET_KINDS:
            target = getattr(targets, metric)
            if target is None:
                continue
            check = {
                "op": subject.name,
                "metric": metric,
                "what": f"{what} {sense} {target}",
                "target": target,
                "value": None,
                "met": None,
            }
            checks.append(check)
            if baseline == "torch.clone":
                value = ours.gbps / clone_gbps
            elif (base := by_key.get((subject.name, baseline))) is None:
                check["not_run"] = f"no {baseline} baseline" + (
                    " (--no-compile)" if baseline == "compiled" else ""
                )
                continue
            else:
                value = base.ms / ours.ms if metric == "min_vs_eager" else ours.ms / base.ms
            check["value"] = value
            check["met"] = value >= target if sense == ">=" else value <= target
    print("targets:")
    for c in checks:
        if c["met"] is None:
            print(f"  [NOT RUN] {c['op']} {c['what']}: {c['not_run']}")
        else:
            verdict = "MET" if c["met"] else "NOT MET"
            print(f"  [{verdict}] {c['op']} {c['what']}: {c['value']:.2f}")
    if not checks:
        print("  (none for this device)")
    return checks


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        metavar="N",
        help="lay each input shaped like the primary out N elements into its storage, so\n"
        "rows are not 16-byte aligned (CUDA kernels' per-row head/tail path)",
    )
    p.add_argument(
        "--device",
        choices=["all", "cpu", "cuda"],
        default="all",
        help="'all' = cpu, plus cuda when available",
    )
    p.add_argument("--iters", type=int, default=20, help="timed iterations (median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations before timing")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for CPU")
    p.add_argument(
        "--ops",
        default=",".join(SUBJECTS),
        help="comma-separated op names, or RMSNorm.forward (default: all of them)",
    )
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="disable Inductor caches so 'compile s' is a cold compile",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a target is not met, or not run (--no-compile)",
    )
    p.add_argument("--json", type=Path, help="also write the results and targets here, as JSON")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n.strip() for n in args.ops.split(",") if n.strip()]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.no_compile_cache:
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
    if args.device == "all":
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        print("CUDA requested but not available", file=sys.stderr)
        return 2
    print(
        f"my_ops bench: {args.rows}x{args.cols} {args.dtype}, offset {args.offset}, "
        f"iters={args.iters}, warmup={args.warmup}, cpu threads={torch.get_num_threads()}, "
        f"torch {torch.__version__}, library {my_ops.loaded_path()}"
    )
    unknown = sorted(set(names) - set(SUBJECTS))
    if unknown:
        print(f"bench: error: --ops: no op {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.offset < 0:
        print(f"bench: error: --offset: expected N >= 0, got {args.offset}", file=sys.stderr)
        return 2
    subjects = [SUBJECTS[n] for n in names]
    if args.json and len(devices) != 1:
        print("bench: error: --json needs one --device (cpu or cuda)", file=sys.stderr)
        return 2
    all_met = True
    for name in devices:
        device = torch.device(name)
        if device.type == "cuda":
            print(f"cuda device: {torch.cuda.get_device_name(device)}")
        results, clone_gbps = bench_device(args, device, subjects)
        by_key = print_table(device, results, clone_gbps)
        checks = check_targets(device, subjects, by_key, clone_gbps)
        all_met &= all(c["met"] is True for c in checks)
        if args.json:
            _write_json(args, device, results, clone_gbps, checks)
    return 1 if (args.strict and not all_met) else 0


def _write_json(args, device, results, clone_gbps, checks) -> None:
    report = {
        "device": device.type,
        "shape": [args.rows, args.cols],
        "dtype": args.dtype,
        "offset": args.offset,
        "clone_gbps": clone_gbps,
        "rows": [
            {
                "op": r.op,
                "impl": r.impl,
                "ms": r.ms,
                "nbytes": r.nbytes,
                "gbps": r.gbps,
                "clone_bw_fraction": r.gbps / clone_gbps,
            }
            for r in results
        ],
        "targets": checks,
        # Met, every one: a target not run (met None) is not.
        "all_met": all(c["met"] is True for c in checks),
        "not_run": sum(c["met"] is None for c in checks),
    }
    args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
