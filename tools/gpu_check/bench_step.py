"""The bench step: ops/bench.py --json per case; each op's bandwidth as a fraction of a copy's.

The ops and their targets come from bench.py (each op's spec), never from here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from check_run import Job, Run, Step

OURS = "my_ops"  # bench.py's impl name for the kernels under test
# GPU: each case moves ~256 MiB per tensor, far beyond any cache; a copy of that takes
# ~0.15 ms on an H200, so many samples cost nothing. The first case is the main one, whose
# fractions the verdict shows; the others take the fused kernels' per-row paths for rows
# that are not 16-byte aligned: bf16 rows of 4100 elements (8200 bytes), and an input that
# is a view one element into its storage.
GPU_CASES = {
    "fp32": ["--rows", "65536", "--cols", "1024"],
    "bf16_cols4100": ["--rows", "32768", "--cols", "4100", "--dtype", "bfloat16"],
    "offset1": ["--rows", "65536", "--cols", "1024", "--offset", "1"],
}
# CPU: one thread, as OpenMP teams spin-wait and on a shared, loaded machine would measure
# the load, not the kernels; targets are not checked.
CPU_CASES = {"fp32": ["--rows", "4096", "--cols", "1024"]}


def _judge(data: dict | str, check_targets: bool) -> tuple[bool, str]:
    """(passed, what to say) for one case: bench.py's JSON, or why there is none."""
    if isinstance(data, str):
        return False, data
    if not any(r["impl"] == OURS for r in data["rows"]):
        return False, f"no {OURS} rows in bench.py's JSON"
    if not check_targets:
        return True, "targets not checked"
    if not data["targets"]:
        return False, "bench.py reported no targets"
    missed = [f"{t['op']} {t['what']}: {t['value']:.2f}" for t in data["targets"] if not t["met"]]
    if missed or not data["all_met"]:
        return False, f"targets missed: {'; '.join(missed) or 'all_met is false'}"
    return True, "targets met"


def bench_verdict(cases: dict[str, dict | str], check_targets: bool) -> tuple[bool, str]:
    """(passed, the verdict's detail) from each case's bench.py --json output (or why there
    is none), the main case first: its fractions of copy, then every case's targets."""
    judged = {name: _judge(data, check_targets) for name, data in cases.items()}
    (main, data), *_ = cases.items()
    rows = data["rows"] if isinstance(data, dict) else []
    ours = {r["op"]: r["clone_bw_fraction"] for r in rows if r["impl"] == OURS}
    shown = " ".join(f"{op} {frac:.2f}" for op, frac in ours.items()) + " of copy" if ours else main
    notes = [("" if check_targets else "cpu, ") + judged[main][1]]
    notes += [f"{name} {note}" for name, (_, note) in judged.items() if name != main]
    return all(ok for ok, _ in judged.values()), f"{shown} ({'; '.join(notes)})"


def plan_bench(run: Run) -> dict[str, tuple[list[str], Path]]:
    """Each case's bench.py command and the JSON it writes."""
    cpu = run.args.cpu_only
    plan = {}
    for name, args in (CPU_CASES if cpu else GPU_CASES).items():
        result = run.work / f"bench_{name}.json"
        cmd = [sys.executable, "ops/bench.py", "--device", "cpu" if cpu else "cuda"]
        cmd += ["--json", str(result), *args, "--no-compile"]
        cmd += ["--iters", "20", "--warmup", "3", "--threads", "1"] if cpu else []
        cmd += [] if cpu else ["--iters", "50", "--warmup", "5"]
        plan[name] = (cmd, result)
    return plan


def step_bench(run: Run, step: Step) -> None:
    env, cases, failed = run.child_env(), {}, None
    case_facts = step.facts["cases"] = {}
    case_args = CPU_CASES if run.args.cpu_only else GPU_CASES
    for name, (cmd, result) in plan_bench(run).items():
        job: Job = run.run(cmd, run.log(step), env)
        if job.rc != 0 or not result.exists():
            cases[name] = f"bench.py exit {job.rc}" + ("" if job.rc else ", no JSON")
            case_facts[name] = {"args": case_args[name], "error": cases[name]}
            failed = failed or job
            continue
        data = cases[name] = json.loads(result.read_text())
        keys = ("shape", "dtype", "clone_gbps", "rows", "targets", "all_met")
        case_facts[name] = {"args": case_args[name]} | {k: data.get(k) for k in keys}
    main = next(iter(cases))
    if isinstance(cases[main], dict):  # as before the cases: the main case's, at the top
        step.facts.update({k: cases[main].get(k) for k in ("device", "shape", "dtype")})
        step.facts.update({k: case_facts[main][k] for k in ("clone_gbps", "rows", "targets")})
        step.facts["all_met"] = cases[main]["all_met"]
    passed, step.detail = bench_verdict(cases, check_targets=not run.args.cpu_only)
    if not passed and failed is not None:
        return run.fail(step, step.detail, failed)
    step.status = "ok" if passed else "fail"
