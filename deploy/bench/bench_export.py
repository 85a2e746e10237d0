"""The export's wall time, cold and warm, against today's settings: //deploy:bench's first table.

Every run is the whole export command (process start, imports, trace,
compile, verify, writing the output), as `bazel run //deploy:export` execs it,
and all of them run back to back in one bench run, so they share one
machine's load.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# What the export compiled with before the compile cache: no cache, and
# precompiled headers on (Inductor's default), made again in every export.
TODAY_FLAGS = ("--no-cache", "--inductor-option", "aot_inductor.precompile_headers=True")

WARM_TARGET = 0.25
WARM_COMPILE_TARGET_S = 1.0
COLD_TARGET = 0.5

_COMPILE_LINE = re.compile(r"^compile \.\.\. ([0-9.]+)s(?:, (.*))?$", re.M)


@dataclass(frozen=True)
class ExportRun:
    name: str
    wall_s: float
    compile_s: float
    cache: str  # "cache hit", "cache miss" or "no cache"


def export_command() -> list[str]:
    """The exporter as `bazel run` starts it (the py_binary's launcher, $MY_OPS_EXPORT),
    else python -m deploy.exporter."""
    launcher = Path(os.path.abspath(os.environ.get("MY_OPS_EXPORT", "")))
    if os.environ.get("MY_OPS_EXPORT") and launcher.is_file() and os.access(launcher, os.X_OK):
        return [str(launcher)]
    return [sys.executable, "-m", "deploy.exporter"]


def run_export(name: str, command: list[str], env: dict[str, str]) -> ExportRun:
    print(f"export: {name} ...", end=" ", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"bench: error: export ({name}) failed:\n{proc.stdout}{proc.stderr}")
    m = _COMPILE_LINE.search(proc.stdout)
    if m is None:
        sys.exit(f"bench: error: no compile line in the export's output:\n{proc.stdout}")
    run = ExportRun(name, wall, float(m.group(1)), m.group(2) or "")
    print(f"{wall:.1f}s (compile {run.compile_s:.1f}s, {run.cache})", flush=True)
    return run


def export_runs(work: Path, env: dict[str, str]) -> dict[str, ExportRun]:
    """today, cold (empty cache), changed model (warm toolchain), warm (unchanged model)."""
    base = export_command()
    cache = ["--cache-dir", str(work / "cache")]
    runs = {}
    runs["today"] = run_export(
        "today's settings, no cache", [*base, "--out", str(work / "today"), *TODAY_FLAGS], env
    )
    runs["cold"] = run_export("empty cache", [*base, "--out", str(work / "out"), *cache], env)
    # Another program (a different batch range) with the toolchain's caches
    # warm: a user's next export after editing the model.
    # The cold export the target is for: nothing of this model is cached,
    # but what does not depend on it (Python's bytecode, Inductor's checks of
    # the compiler) is, as on any machine that has exported before.
    runs["changed"] = run_export(
        "changed model",
        [*base, "--out", str(work / "changed"), "--max-batch", "8", *cache],
        env,
    )
    runs["warm"] = run_export("unchanged model", [*base, "--out", str(work / "out"), *cache], env)
    return runs


def export_rows(runs: dict[str, ExportRun]) -> tuple[list[tuple[str, ...]], list[str]]:
    today, cold, changed, warm = (runs[k] for k in ("today", "cold", "changed", "warm"))
    rows = [
        ("export, today's settings (no cache)", f"{today.wall_s:.1f} s",
         f"compile {today.compile_s:.1f} s", ""),
        ("export, empty cache", f"{cold.wall_s:.1f} s",
         f"{cold.wall_s / today.wall_s:.2f}x today", ""),
        ("export, changed model", f"{changed.wall_s:.1f} s",
         f"{changed.wall_s / today.wall_s:.2f}x today", f"<= {COLD_TARGET}x"),
        ("export, unchanged model (warm)", f"{warm.wall_s:.1f} s",
         f"{warm.wall_s / cold.wall_s:.2f}x empty cache", f"<= {WARM_TARGET}x"),
        ("compile stage, warm", f"{warm.compile_s:.2f} s", warm.cache,
         f"<= {WARM_COMPILE_TARGET_S:.0f} s, hit"),
    ]  # fmt: skip
    missed = []
    if changed.wall_s / today.wall_s > COLD_TARGET:
        missed.append(f"changed-model export {changed.wall_s / today.wall_s:.2f}x today")
    if warm.wall_s / cold.wall_s > WARM_TARGET:
        missed.append(f"warm export {warm.wall_s / cold.wall_s:.2f}x cold")
    if warm.compile_s > WARM_COMPILE_TARGET_S or warm.cache != "cache hit":
        missed.append(f"warm compile {warm.compile_s:.2f} s ({warm.cache})")
    return rows, missed
