"""The custom-op tax table of //deploy:bench: our ops inside a package against Inductor's code.

For each op family (tax_models.FAMILIES) and size, two packages of 8 x (Linear without bias
-> op) are exported with the same --isa: one calling our op (through its C shim), one with
the op's SPEC.eager composition compiled by Inductor. Their per-call p50 at one thread is
measured through the C++ runtime (paired_timer: both packages loaded in one process the way
the loader loads one) and through Python's aoti_load_package after `import my_ops`. Each
runner loads both packages into one process and calls them in alternating blocks of about
ten calls, so that background load and the CPU's clock fall on both alike; each round gives
the two p50s, and the table gives the median over rounds of ours / Inductor's. (Timed in
separate processes, even the same package against itself gave per-round ratios from 0.6 to
1.9 on a shared 2-core machine.)

Target: the median ratio <= 1.00 (rounded to two decimals, the resolution the rounds give on
a 2-core machine) or inside the A/A band of its size, for every family, size, --isa and runner.
The A/A band is measured in the same run: one family's ``ours`` package timed against itself
in the same rounds, per --isa, size and runner; its per-round ratios span the band, and a
ratio no larger than the band's top is parity within the noise.

The exports go through the exporter's compile cache, so only the first run of the bench
compiles them (about 20 s each on 2 cores); later runs take them from the cache.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from deploy.bench import tax_models

FAMILIES = tax_models.FAMILIES
SIZES = tax_models.SIZES
TARGET = 1.0
# Calls per side and round: enough for a stable p50, within about a second per side.
ITERS = {(1, 64): 2000, (16, 256): 1000, (256, 1024): 30, (4096, 1024): 3}
ROUNDS = {(4096, 1024): 3}
DEFAULT_ROUNDS = 5


def block(iters: int) -> int:
    """Calls per block of a round: about ten, and at least 30 blocks where a round has fewer
    calls than that allows (the large sizes alternate call by call)."""
    return max(1, min(10, iters // 30))


ISAS = ("portable", "native")

# Per-call p50 (ms) of two packages in one process, called in alternating blocks: argv = ours,
# theirs, input, calls, rounds, block. Prints one "ours theirs" line per round.
PY_PAIRS = """
import sys, time, torch, my_ops
from deploy.exporter.loading import load
torch.set_num_threads(1)
models = [load(p) for p in sys.argv[1:3]]
inputs = torch.load(sys.argv[3])
n, rounds, block = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
clock = time.perf_counter
with torch.no_grad():
    for m in models:
        for _ in range(3):
            m(*inputs)
    for r in range(rounds):
        times = ([], [])
        for b, done in enumerate(range(0, n, block)):
            for turn in (0, 1):
                side = (b + r + turn) % 2
                m, t = models[side], times[side]
                for _ in range(min(block, n - done)):
                    t0 = clock(); m(*inputs); t.append(clock() - t0)
        print(*(sorted(t)[len(t) // 2] * 1e3 for t in times), flush=True)
"""


@dataclasses.dataclass(frozen=True)
class Cell:
    isa: str
    family: str
    size: tuple[int, int]

    def name(self, variant: str) -> str:
        return tax_models.name(self.family, variant, *self.size)

    @property
    def label(self) -> str:
        return f"{self.family} {self.size[0]}x{self.size[1]} --isa {self.isa}"


def parse_cells(families: str, sizes: str, isas: str) -> list[Cell]:
    """The cells of comma-separated --tax-families, --tax-sizes (ROWSxHIDDEN) and --tax-isas.

    Raises ValueError naming the flag and the value it does not know.
    """
    fams = families.split(",")
    if unknown := [f for f in fams if f not in FAMILIES]:
        raise ValueError(f"--tax-families: unknown {unknown}; choose from {','.join(FAMILIES)}")
    shapes = []
    for text in sizes.split(","):
        rows, _, hidden = text.partition("x")
        if not (rows.isdigit() and hidden.isdigit() and int(rows) > 0 and int(hidden) > 0):
            raise ValueError(f"--tax-sizes: {text!r} is not ROWSxHIDDEN")
        if (int(rows), int(hidden)) not in SIZES:
            known = ",".join(f"{r}x{h}" for r, h in SIZES)
            raise ValueError(f"--tax-sizes: {text} has no model; choose from {known}")
        shapes.append((int(rows), int(hidden)))
    kinds = isas.split(",")
    if unknown := [i for i in kinds if i not in ISAS]:
        raise ValueError(f"--tax-isas: unknown {unknown}; choose from {','.join(ISAS)}")
    return [Cell(isa, f, s) for isa in kinds for f in fams for s in shapes]


def _export(exporter: list[str], args: list[str], out: Path, env: dict, what: str) -> str:
    """Runs one export into `out`; returns "cache hit" or "compiled"."""
    proc = subprocess.run([*exporter, *args, "--out", str(out)], env=env, capture_output=True,
                          text=True)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"bench: error: export of {what} failed:\n{proc.stderr}")
    return "cache hit" if "cache hit" in proc.stdout else "compiled"


def export_default_without_c_shims(exporter: list[str], work: Path, env: dict) -> Path:
    """The default model exported with --no-c-shims, the way packages called ops before."""
    out = work / "no_c_shims"
    _export(exporter, ["--no-c-shims"], out, env, "the default model with --no-c-shims")
    return out


def export_all(cells_: list[Cell], exporter: list[str], work: Path, env: dict) -> dict:
    """Exports each cell's two packages, one per CPU at a time (a compile is mostly one g++
    process); returns {(cell, variant): export folder}."""
    jobs = [(c, v) for c in cells_ for v in tax_models.VARIANTS]
    done = 0

    def one(job: tuple[Cell, str]) -> Path:
        nonlocal done
        cell, variant = job
        out = work / "tax" / cell.isa / cell.name(variant)
        args = ["--model", f"deploy.bench.tax_models:{cell.name(variant)}",
                "--isa", cell.isa, "--max-batch", "1"]  # fmt: skip
        t0 = time.perf_counter()
        how = _export(exporter, args, out, env, cell.name(variant))
        with lock:
            done += 1
            print(f"tax: export {done}/{len(jobs)} {cell.name(variant)} --isa {cell.isa}: "
                  f"{time.perf_counter() - t0:.1f} s, {how}", flush=True)  # fmt: skip
        return out

    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(jobs, pool.map(one, jobs), strict=True))


@dataclasses.dataclass
class Measured:
    cpp: list[tuple[float, float]]  # per round: ours, Inductor's p50 (ms)
    py: list[tuple[float, float]]

    @staticmethod
    def ratio(pairs: list[tuple[float, float]]) -> float:
        return statistics.median(a / b for a, b in pairs)


def measure(ours: Path, theirs: Path, iters: int, rounds: int, timer: str, ops: str,
            env: dict) -> Measured:  # fmt: skip
    """Rounds of two export folders through both runners, on ours' sample input, each runner
    one process pinned to one CPU (`timer` is paired_timer, the C++ runner)."""
    inputs = ours / "sample_input.pt"
    counts = [str(iters), str(rounds), str(block(iters))]
    packages = [str(ours / "model.pt2"), str(theirs / "model.pt2")]
    cpp = [timer, "--ops", ops, "--input", str(inputs), "--calls", counts[0], "--rounds",
           counts[1], "--block", counts[2], *packages]  # fmt: skip
    py = [sys.executable, "-c", PY_PAIRS, *packages, str(inputs), *counts]
    return Measured(cpp=_pairs("C++", cpp, env, ours), py=_pairs("Python", py, env, ours))


def _pairs(runner: str, cmd: list[str], env: dict, what: Path) -> list[tuple[float, float]]:
    """The (ours, theirs) lines a runner prints."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_one_cpu)
    if proc.returncode != 0:
        sys.exit(f"bench: error: {runner} timing of {what} failed:\n{proc.stderr}")
    lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    return [(float(a), float(b)) for a, b in lines]


def measure_cell(
    cell: Cell, folders: dict, timer: str, ops: str, env: dict, against: str = "inductor"
) -> Measured:
    """Ours against the cell's `against` variant (``ours`` itself for an A/A band)."""
    return measure(
        folders[(cell, "ours")],
        folders[(cell, against)],
        ITERS.get(cell.size, 100),
        ROUNDS.get(cell.size, DEFAULT_ROUNDS),
        timer,
        ops,
        env,
    )


Band = dict[str, tuple[float, float]]  # runner -> (lowest, highest) per-round A/A ratio


def measure_bands(cells_: list[Cell], folders: dict, timer: str, ops: str, env: dict) -> dict:
    """{(isa, size): Band}: for each --isa and size, the first family's ``ours`` package
    against itself, timed as measure_cell times a cell."""
    bands: dict[tuple[str, tuple[int, int]], Band] = {}
    for cell in cells_:
        key = (cell.isa, cell.size)
        if key in bands:
            continue
        m = measure_cell(cell, folders, timer, ops, env, against="ours")
        bands[key] = {
            runner: (min(a / b for a, b in pairs), max(a / b for a, b in pairs))
            for runner, pairs in (("C++", m.cpp), ("Python", m.py))
        }
    return bands


def band_rows(bands: dict) -> list[tuple[str, ...]]:
    return [
        (
            f"{size[0]}x{size[1]} --isa {isa}, {runner}",
            "same package twice",
            f"{lo:.2f}..{hi:.2f}",
            "",
        )
        for (isa, size), band in bands.items()
        for runner, (lo, hi) in band.items()
    ]


def _one_cpu() -> None:
    os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def rows(
    results: list[tuple[str, Measured]],
    target: float | None = TARGET,
    bands: list[Band | None] | None = None,
) -> tuple[list[tuple[str, ...]], list[str]]:
    """A table's rows (label, ours / theirs p50, median ratio, target) and the missed targets.

    `bands`, one per result (or None), are the A/A bands of the results' sizes: a ratio inside
    its band is met too.
    """
    out, missed = [], []
    for i, (label, m) in enumerate(results):
        band = bands[i] if bands is not None else None
        for runner, pairs in (("C++", m.cpp), ("Python", m.py)):
            ratio = Measured.ratio(pairs)
            ours = statistics.median(a for a, _ in pairs)
            theirs = statistics.median(b for _, b in pairs)
            verdict = ""
            if target is not None:
                top = band[runner][1] if band is not None else None
                ok = round(ratio, 2) <= target or (top is not None and ratio <= top)
                limit = f"<= {target:.2f}" + (f" or <= A/A {top:.2f}" if top is not None else "")
                verdict = f"{limit} " + ("MET" if ok else "MISSED")
                if not ok:
                    missed.append(f"{label} {runner} {ratio:.2f}")
            out.append((f"{label}, {runner}", f"{ours:.4f} / {theirs:.4f} ms",
                        f"{ratio:.2f}", verdict))  # fmt: skip
    return out, missed


# Eager calls of each family's op and of its composition at 4 x 64, in one process:
# argv = families, calls, rounds. Prints one "family ours composition" line (median us).
PY_EAGER = """
import sys, time, statistics, torch, my_ops
torch.set_num_threads(1)
fams, n, rounds = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3])
g = torch.Generator().manual_seed(0)
def per_call(fn, args):
    for _ in range(100):
        fn(*args)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n * 1e6
with torch.no_grad():
    for fam in fams:
        spec = my_ops.ops.SPECS[fam]
        args = spec.example_args((4, 64), torch.float32, "cpu", g)
        pairs = [(per_call(spec.op, args), per_call(spec.eager, args)) for _ in range(rounds)]
        ratio = statistics.median(a / b for a, b in pairs)
        a = statistics.median(p[0] for p in pairs)
        b = statistics.median(p[1] for p in pairs)
        print(fam, a, b, ratio, flush=True)
"""


def eager_rows(env: dict, calls: int = 20000, rounds: int = 5) -> list[tuple[str, ...]]:
    cmd = [sys.executable, "-c", PY_EAGER, ",".join(FAMILIES), str(calls), str(rounds)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_one_cpu)
    if proc.returncode != 0:
        sys.exit(f"bench: error: eager timing failed:\n{proc.stderr}")
    rows = []
    for line in proc.stdout.splitlines():
        fam, ours, theirs, ratio = line.split()
        rows.append((f"{fam} 4x64, eager", f"{float(ours):.2f} / {float(theirs):.2f} us",
                     f"{float(ratio):.2f}", ""))  # fmt: skip
    return rows
