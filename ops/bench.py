"""Benchmark the my_ops kernels against eager and torch.compile'd ATen compositions.

For every op it reports the median time of our kernel, of the eager composition and of
``torch.compile`` of the same composition (compile time measured separately, after warm-up),
plus effective bandwidth, (bytes read + bytes written) / time, relative to ``torch.clone`` of
the same tensor (2 * bytes / time) measured in the same run.

    bazel run //ops:bench -- --rows 16384 --cols 1024 --device cpu
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
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

# Targets (time ratios; lower is better for ours / reference).
GELU_MIN_SPEEDUP_VS_EAGER = 1.5
MAX_TIME_VS_COMPILED = 1.1
MIN_CLONE_BW_FRACTION = 0.75


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


# Eager compositions: what a user writes without the fused kernels.
def eager_identity(x):
    return x.clone()


def eager_bias_gelu(x, bias, approximate="none"):
    return torch.nn.functional.gelu(x + bias, approximate=approximate)


def eager_add_rms_norm(x, residual, weight, eps=1e-6):
    h = x + residual
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)).to(h.dtype) * weight
    return y, h


def _check_same(op: str, ours, ref, dtype: torch.dtype) -> None:
    ours = ours if isinstance(ours, tuple) else (ours,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    tol = {torch.float32: 1e-4, torch.float64: 1e-8}.get(dtype, 3e-2)
    for a, b in zip(ours, ref, strict=True):
        if not torch.allclose(a.float(), b.float(), rtol=tol, atol=tol):
            raise SystemExit(f"{op}: our kernel disagrees with the eager composition")


def bench_device(args, device: torch.device) -> tuple[list[Result], float]:
    dtype = DTYPES[args.dtype]
    rows, cols = args.rows, args.cols
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=g).to(device=device, dtype=dtype)
    residual = torch.randn(rows, cols, generator=g).to(device=device, dtype=dtype)
    bias = torch.randn(cols, generator=g).to(device=device, dtype=dtype)
    weight = torch.randn(cols, generator=g).to(device=device, dtype=dtype)
    es = x.element_size()
    n = x.numel()

    cases = [
        (
            "identity_conv",
            (x,),
            my_ops.identity_conv,
            eager_identity,
            2 * n * es,
        ),
        (
            "fused_bias_gelu",
            (x, bias, args.approximate),
            my_ops.fused_bias_gelu,
            eager_bias_gelu,
            (2 * n + cols) * es,
        ),
        (
            "fused_add_rms_norm",
            (x, residual, weight, 1e-6),
            my_ops.fused_add_rms_norm,
            eager_add_rms_norm,
            (4 * n + cols) * es,
        ),
    ]
    clone_bytes = 2 * n * es
    results: list[Result] = []
    clone_ms: list[float] = []
    for name, op_args, ours, eager, nbytes in cases:
        _check_same(name, ours(*op_args), eager(*op_args), dtype)
        candidates = {
            "my_ops": (ours, op_args),
            "eager": (eager, op_args),
            "torch.clone": (torch.clone, (x,)),
        }
        compile_s = None
        if not args.no_compile:
            compiled, compile_s = compile_and_time(eager, op_args, device)
            candidates["compiled"] = (compiled, op_args)
        ms = time_interleaved_ms(candidates, device, args.iters, args.warmup)
        clone_ms.append(ms.pop("torch.clone"))
        for impl, t in ms.items():
            results.append(Result(name, impl, t, nbytes, compile_s if impl == "compiled" else None))
    # Clone runs interleaved with every op; the fastest of its medians is the (conservative)
    # bandwidth reference.
    results.insert(0, Result("clone", "torch.clone", min(clone_ms), clone_bytes))
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


def check_targets(by_key: dict, clone_gbps: float) -> bool:
    checks = []

    def add(desc: str, value: float, ok: bool) -> None:
        checks.append((desc, value, ok))

    gelu = by_key[("fused_bias_gelu", "my_ops")]
    rms = by_key[("fused_add_rms_norm", "my_ops")]
    gelu_eager = by_key[("fused_bias_gelu", "eager")]
    add(
        f"fused_bias_gelu speedup vs eager >= {GELU_MIN_SPEEDUP_VS_EAGER}x",
        gelu_eager.ms / gelu.ms,
        gelu_eager.ms / gelu.ms >= GELU_MIN_SPEEDUP_VS_EAGER,
    )
    for op, ours in (("fused_bias_gelu", gelu), ("fused_add_rms_norm", rms)):
        compiled = by_key.get((op, "compiled"))
        if compiled is not None:
            ratio = ours.ms / compiled.ms
            add(f"{op} time / compiled time <= {MAX_TIME_VS_COMPILED}", ratio, ratio <= 1.1)
    for op, ours in (("fused_bias_gelu", gelu), ("fused_add_rms_norm", rms)):
        frac = ours.gbps / clone_gbps
        add(f"{op} bandwidth / clone bandwidth >= {MIN_CLONE_BW_FRACTION}", frac, frac >= 0.75)
    print("targets:")
    for desc, value, ok in checks:
        print(f"  [{'MET' if ok else 'NOT MET'}] {desc}: {value:.2f}")
    return all(ok for _, _, ok in checks)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=16384)
    p.add_argument("--cols", type=int, default=1024)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument(
        "--device",
        choices=["all", "cpu", "cuda"],
        default="all",
        help="'all' = cpu, plus cuda when available",
    )
    p.add_argument("--iters", type=int, default=20, help="timed iterations (median is reported)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations before timing")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for CPU")
    p.add_argument("--approximate", choices=["none", "tanh"], default="none")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    p.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="disable Inductor caches so 'compile s' is a cold compile",
    )
    p.add_argument(
        "--strict", action="store_true", help="exit with status 1 when a target is not met"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
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
        f"my_ops bench: {args.rows}x{args.cols} {args.dtype}, iters={args.iters}, "
        f"warmup={args.warmup}, cpu threads={torch.get_num_threads()}, torch {torch.__version__}, "
        f"library {my_ops.loaded_path()}"
    )
    all_met = True
    for name in devices:
        device = torch.device(name)
        if device.type == "cuda":
            print(f"cuda device: {torch.cuda.get_device_name(device)}")
        results, clone_gbps = bench_device(args, device)
        by_key = print_table(device, results, clone_gbps)
        all_met &= check_targets(by_key, clone_gbps)
    return 1 if (args.strict and not all_met) else 0


if __name__ == "__main__":
    sys.exit(main())
