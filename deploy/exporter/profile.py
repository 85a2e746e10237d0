"""--profile-compile: where the compile stage's time goes, from the compiler wrapper's log.

The wrapper (compile.write_cxx_wrapper) appends one line per compiler
run: start and end time, then the arguments. Each run is put in one step by
what it builds; the rest of the stage is Inductor's Python (lowering, code
generation, packaging), including any compiler run that bypasses the wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass

# In the order a CPU compile runs them.
STEPS = (
    ("isa check", "Inductor's test build of the vector ISA (none for a portable x86-64 package)"),
    ("autotune", "candidate kernels max-autotune builds to time them"),
    ("headers", "precompiled headers, once per toolchain and flags"),
    ("wrapper", "the model's wrapper .cpp (calls, shapes, the proxy executor)"),
    ("kernels", "the model's kernel .cpp"),
    ("constants", "the weights, assembled"),
    ("link", "the package's shared library"),
    ("other", "any other compiler run"),
)


@dataclass(frozen=True)
class Run:
    start: float
    end: float
    step: str


def classify(args: list[str]) -> str:
    if any(a.endswith(".gch") or a == "c++-header" for a in args):
        return "headers"
    sources = [a for a in args if a.endswith((".cpp", ".S", ".s"))]
    if "-shared" in args and not sources:
        return "link"
    if any(a.endswith(".wrapper.cpp") for a in sources):
        return "wrapper"
    if any(a.endswith(".kernel.cpp") for a in sources):
        return "kernels"
    if any(a.endswith((".S", ".s")) for a in sources):
        return "constants"
    # Inductor's JIT builds (CppCodeCache) write <hash>.main.cpp.
    if "-shared" in args and any(a.endswith(".main.cpp") for a in sources):
        return "autotune"
    if "-shared" in args and sources:
        return "isa check"
    return "other"


def parse_log(text: str) -> list[Run]:
    runs = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 2:
            continue
        try:
            start, end = float(words[0]), float(words[1])
        except ValueError:
            continue
        runs.append(Run(start, end, classify(words[2:])))
    return runs


def _covered(runs: list[Run]) -> float:
    """Wall time inside at least one run (parallel runs counted once)."""
    total, last = 0.0, float("-inf")
    for r in sorted(runs, key=lambda r: r.start):
        if r.end > last:
            total += r.end - max(r.start, last)
            last = r.end
    return total


def breakdown(runs: list[Run], stage_seconds: float) -> list[tuple[str, float, int]]:
    """(step, seconds, compiler runs) per step with time spent, then Inductor's Python."""
    rows = []
    for step, _ in STEPS:
        mine = [r for r in runs if r.step == step]
        if mine:
            rows.append((step, _covered(mine), len(mine)))
    rows.append(("codegen", max(0.0, stage_seconds - _covered(runs)), 0))
    return rows


def format_breakdown(rows: list[tuple[str, float, int]], stage_seconds: float) -> str:
    notes = dict(STEPS) | {"codegen": "Inductor's Python: lowering, code generation, packaging"}
    lines = [f"compile profile ({stage_seconds:.1f}s):"]
    for step, seconds, count in rows:
        share = 100 * seconds / stage_seconds if stage_seconds > 0 else 0.0
        runs = f"{count} run{'s' if count != 1 else ''}" if count else ""
        lines.append(f"  {step:<10} {seconds:6.1f}s {share:4.0f}%  {runs:<7} {notes[step]}")
    return "\n".join(lines)


def print_profile(log: str, stage_seconds: float, *, hit: bool) -> None:
    """The table for the wrapper's log at `log` (no file: no compiler ran)."""
    if hit:
        print("compile profile: nothing compiled (cache hit; --no-cache to profile)")
        return
    try:
        with open(log) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    print(format_breakdown(breakdown(parse_log(text), stage_seconds), stage_seconds), flush=True)
