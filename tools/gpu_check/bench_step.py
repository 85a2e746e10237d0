"""The bench step: ops/bench.py --json; each op's bandwidth as a fraction of a copy's.

The ops and their targets come from bench.py (each op's spec), never from here.
"""

from __future__ import annotations

import json
import sys

from check_run import Run, Step

OURS = "my_ops"  # bench.py's impl name for the kernels under test


def bench_verdict(data: dict, check_targets: bool) -> tuple[bool, str]:
    """(passed, the verdict's detail) from what bench.py --json wrote."""
    ours = {r["op"]: r["clone_bw_fraction"] for r in data["rows"] if r["impl"] == OURS}
    if not ours:
        return False, f"no {OURS} rows in bench.py's JSON"
    shown = " ".join(f"{op} {frac:.2f}" for op, frac in ours.items()) + " of copy"
    if not check_targets:
        return True, f"{shown} (cpu, targets not checked)"
    missed = [f"{t['op']} {t['what']}: {t['value']:.2f}" for t in data["targets"] if not t["met"]]
    if not data["targets"]:
        return False, f"{shown} (bench.py reported no targets)"
    if missed or not data["all_met"]:
        return False, f"{shown} (targets missed: {'; '.join(missed)})"
    return True, f"{shown} (targets met)"


def step_bench(run: Run, step: Step) -> None:
    cpu, result = run.args.cpu_only, run.work / "bench.json"
    # GPU: 256 MiB fp32 tensors, far beyond any cache; a copy of them takes ~0.15 ms on an
    # H200, so many samples cost nothing. CPU: one thread, as OpenMP teams spin-wait and on
    # a shared, loaded machine would measure the load, not the kernels.
    cmd = [sys.executable, "ops/bench.py", "--device", "cpu" if cpu else "cuda", "--json", result]
    cmd += ["--rows", 4096 if cpu else 65536, "--cols", 1024, "--no-compile"]
    cmd += ["--iters", 20, "--warmup", 3, "--threads", 1] if cpu else ["--iters", 50, "--warmup", 5]
    job = run.run(list(map(str, cmd)), run.log(step), run.child_env())
    if job.rc != 0 or not result.exists():
        return run.fail(step, f"bench.py exit {job.rc}" + ("" if job.rc else ", no JSON"), job)
    data = json.loads(result.read_text())
    step.facts.update({k: data.get(k) for k in ("device", "shape", "dtype", "clone_gbps")})
    step.facts.update(rows=data["rows"], targets=data["targets"], all_met=data["all_met"])
    passed, step.detail = bench_verdict(data, check_targets=not cpu)
    step.status = "ok" if passed else "fail"
