"""The bench step: ops/bench.py --json per case; each op's bandwidth as a fraction of a copy's.

The ops and their targets come from bench.py (each op's spec), never from here. Whether a
target is met is worked out here from the measured rows (times and bytes), not taken from
bench.py's ``met``: a slip in bench.py's comparison must not pass the step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from check_run import Job, Run, Step

OURS = "my_ops"  # bench.py's impl name for the kernels under test
CLONE = ("clone", "torch.clone")  # bench.py's (op, impl) of the copy every op is measured against
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


def _bandwidth(row: dict) -> float:
    return row["nbytes"] / row["ms"]


# What each metric of bench.py's targets (the fields of the specs' BenchTargets) compares:
# (its name, the baseline impl, the measured value from our row and the baseline's, sense).
METRICS = {
    "min_vs_eager": ("time vs eager", "eager", lambda ours, base: base["ms"] / ours["ms"], ">="),
    "max_vs_compiled": (
        "time / compiled time",
        "compiled",
        lambda ours, base: ours["ms"] / base["ms"],
        "<=",
    ),
    "min_clone_bandwidth": (
        "bandwidth / clone bandwidth",
        CLONE[1],
        lambda ours, base: _bandwidth(ours) / _bandwidth(base),
        ">=",
    ),
}


def evaluate_target(target: dict, rows: dict[tuple[str, str], dict]) -> tuple[str, str]:
    """(verdict, text) for one of bench.py's targets, from the rows by (op, impl).

    The verdict is "met", "missed", "not run" (its baseline was not measured, as
    torch.compile's under --no-compile) or "bad" (a field missing, an unknown metric, or
    bench.py's own ``met`` disagreeing with the rows).
    """
    try:
        op, metric, limit, claimed = target["op"], target["metric"], target["target"], target["met"]
    except KeyError as e:
        return "bad", f"a target without {e.args[0]!r}: {target}"
    if metric not in METRICS:
        return "bad", f"{op}: unknown metric {metric!r}"
    what, baseline, measure, sense = METRICS[metric]
    text = f"{op} {what} {sense} {limit}"
    ours = rows.get((op, OURS))
    base = rows.get(CLONE if baseline == CLONE[1] else (op, baseline))
    if ours is None:
        return "bad", f"{text}: no {OURS} row"
    if base is None:
        if claimed is not None:
            return "bad", f"{text}: bench.py says met={claimed} without a {baseline} row"
        return "not run", f"{text} (no {baseline} row)"
    try:
        value = measure(ours, base)
    except KeyError as e:
        return "bad", f"{text}: a row without {e.args[0]!r}"
    except ZeroDivisionError:
        return "bad", f"{text}: a row with 0 ms or 0 bytes"
    met = value >= limit if sense == ">=" else value <= limit
    # bench.py divides GB/s figures, this the bytes and times: on the limit itself the last
    # bit may differ, so only a clear disagreement counts.
    if claimed is not met and abs(value - limit) > 1e-9 * abs(limit):
        return "bad", f"{text}: {value:.2f} from the rows, but bench.py says met={claimed}"
    return ("met" if met else "missed"), f"{text}: {value:.2f}"


def _rows_by_key(data: dict) -> dict[tuple[str, str], dict]:
    return {(r.get("op"), r.get("impl")): r for r in data.get("rows") or []}


def _judge(data: dict | str, check_targets: bool) -> tuple[bool, str]:
    """(passed, what to say) for one case: bench.py's JSON, or why there is none."""
    if isinstance(data, str):
        return False, data
    rows = _rows_by_key(data)
    if not any(impl == OURS for _, impl in rows):
        return False, f"no {OURS} rows in bench.py's JSON"
    if not check_targets:
        return True, "targets not checked"
    if not data.get("targets"):
        return False, "bench.py reported no targets"
    verdicts: dict[str, list[str]] = {"met": [], "missed": [], "not run": [], "bad": []}
    for target in data["targets"]:
        verdict, text = evaluate_target(target, rows)
        verdicts[verdict].append(text)
    not_run = f"NOT RUN: {'; '.join(verdicts['not run'])}" if verdicts["not run"] else ""
    if verdicts["bad"]:
        return False, f"bench.py's JSON does not add up: {'; '.join(verdicts['bad'])}"
    if verdicts["missed"]:
        note = f"targets missed: {'; '.join(verdicts['missed'])}"
        return False, "; ".join(filter(None, [note, not_run]))
    if not verdicts["met"]:
        return False, f"no target evaluated; {not_run}"
    return True, "; ".join(filter(None, ["targets met", not_run]))


def copy_fractions(data: dict) -> dict[str, float]:
    """Each op's bandwidth as a fraction of the copy's, from the rows' times and bytes."""
    rows = _rows_by_key(data)
    clone = rows.get(CLONE)
    fractions = {}
    for (op, impl), row in rows.items():
        if impl == OURS and clone is not None:
            try:
                fractions[op] = _bandwidth(row) / _bandwidth(clone)
            except (KeyError, ZeroDivisionError):
                continue
    return fractions


def bench_verdict(cases: dict[str, dict | str], check_targets: bool) -> tuple[bool, str]:
    """(passed, the verdict's detail) from each case's bench.py --json output (or why there
    is none), the main case first: its fractions of copy, then every case's targets."""
    judged = {name: _judge(data, check_targets) for name, data in cases.items()}
    (main, data), *_ = cases.items()
    ours = copy_fractions(data) if isinstance(data, dict) else {}
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
        rows = _rows_by_key(data)
        case_facts[name]["checked"] = [
            dict(zip(("verdict", "target"), evaluate_target(t, rows), strict=True))
            for t in data.get("targets") or []
        ]
    main = next(iter(cases))
    if isinstance(cases[main], dict):  # as before the cases: the main case's, at the top
        step.facts.update({k: cases[main].get(k) for k in ("device", "shape", "dtype")})
        step.facts.update({k: case_facts[main][k] for k in ("clone_gbps", "rows", "targets")})
        step.facts["all_met"] = cases[main].get("all_met")
    passed, step.detail = bench_verdict(cases, check_targets=not run.args.cpu_only)
    if not passed and failed is not None:
        return run.fail(step, step.detail, failed)
    step.status = "ok" if passed else "fail"
