"""The bench step: ops/bench.py, each op's bandwidth as a fraction of torch.clone's."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from check_run import Run, Step, child_env, tail

# Bandwidth targets on GPU, as fractions of torch.clone's (copy) bandwidth.
BW_TARGETS = {"identity_conv": 0.8, "fused_bias_gelu": 0.8, "fused_add_rms_norm": 0.7}
BW_NAMES = {"identity_conv": "identity", "fused_bias_gelu": "gelu", "fused_add_rms_norm": "rms"}


def parse_bench(text: str) -> dict[str, dict[str, float]]:
    """{op: {impl: clone_bw_fraction}} from bench.py's table rows."""
    table: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        f = line.split()
        # op impl ms GB/s x-vs-eager x-vs-compiled clone-frac compile-s
        if len(f) == 8 and re.fullmatch(r"[\d.]+", f[2]) and re.fullmatch(r"[\d.]+", f[6]):
            table.setdefault(f[0], {})[f[1]] = float(f[6])
            if f[0] == "clone":
                table["clone"]["gbps"] = float(f[3])
    return table


def step_bench(run: Run, step: Step, work: Path, lib: Path, log_path: Path) -> None:
    args = run.args
    device = "cpu" if args.cpu_only else "cuda"
    cmd = [
        sys.executable,
        "ops/bench.py",
        "--device",
        device,
        "--rows",
        str(args.bench_rows),
        "--cols",
        str(args.bench_cols),
    ]
    if args.cpu_only:
        # One thread: OpenMP teams spin-wait, so on a shared, loaded CPU the
        # multi-threaded ops would measure the machine's load, not the kernels.
        cmd += ["--iters", "20", "--warmup", "3", "--threads", "1"]
    else:
        # A 256 MiB copy takes ~0.15 ms on an H200: many samples cost nothing.
        cmd += ["--iters", "50", "--warmup", "5"]
    if not args.bench_compile:
        cmd.append("--no-compile")
    env = child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    rc, out = run.run(cmd, log_path, env)
    table = parse_bench(out)
    fractions = {op: table[op]["my_ops"] for op in BW_TARGETS if "my_ops" in table.get(op, {})}
    mib = args.bench_rows * args.bench_cols * 4 / 2**20
    step.facts.update(
        device=device,
        shape=[args.bench_rows, args.bench_cols],
        tensor_mib_fp32=round(mib, 1),
        clone_gbps=table.get("clone", {}).get("gbps"),
        clone_bw_fraction=fractions,
        targets=BW_TARGETS,
    )
    shown = " ".join(f"{BW_NAMES[op]} {v:.2f}" for op, v in fractions.items())
    if rc != 0 or len(fractions) != len(BW_TARGETS):
        step.status = "fail"
        step.detail = "killed (time budget)" if rc == 124 else f"bench.py exit {rc}"
        run.say(f"bench failed (exit {rc}):\n{tail(out)}")
        return
    if args.cpu_only:
        step.status = "ok"
        step.detail = f"{shown} of copy (cpu, targets not checked)"
        return
    missed = [op for op, v in fractions.items() if v < BW_TARGETS[op]]
    step.facts["targets_missed"] = missed
    if missed:
        step.status = "fail"
        want = ", ".join(f"{BW_NAMES[op]} >= {BW_TARGETS[op]}" for op in missed)
        step.detail = f"{shown} of copy (targets missed: {want})"
    else:
        step.status = "ok"
        step.detail = f"{shown} of copy (targets met)"
