"""The timing table of //deploy:bench_models: its runners, its ratio columns and their targets.

A runner's figure is the median over rounds of its per-call p50; a ratio the median over rounds
of the per-round ratio. Each ratio column is a target, our package through the loader against
one runner: MET when the ratio, rounded to two decimals, is at most 1.00.
"""

from __future__ import annotations

import dataclasses
import statistics

RUNNERS = ("ours loader", "ours SDK", "inductor loader", "onnxruntime", "executorch", "eager")
# The edge runtimes: each runs the original model through its own export (and, with --quantize,
# its own recipe for the scheme), in a long-lived worker process.
PEERS = ("onnxruntime", "executorch")
# The runners our package through the loader is held to, by ratio column: both edge runtimes
# (so, with --quantize, the faster of the two recipes) and Inductor's package of the same model.
TARGETS = {"ORT": "onnxruntime", "ET": "executorch", "Inductor": "inductor loader"}
HEADER = (
    "model",
    "tokens",
    "threads",
    *(f"{r} ms" for r in RUNNERS),
    *(f"ours/{column}" for column in TARGETS),
)


@dataclasses.dataclass(frozen=True)
class Case:
    model: str
    length: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.length} tokens"


def ratio(p50s: dict[str, list[float]], a: str, b: str) -> float:
    return statistics.median(x / y for x, y in zip(p50s[a], p50s[b], strict=True))


def table(
    results: list[tuple[Case, int, dict]], inaccurate: set[tuple[Case, str]] = frozenset()
) -> tuple[list[tuple[str, ...]], list[str]]:
    """The rows of HEADER for {runner: per-round p50 (ms)} of each case and thread count, and
    the targets they missed. A (case, runner) in `inaccurate` failed the parity check there:
    its ratio is shown, marked, and is no target (a fast wrong answer sets no bar)."""
    rows, missed = [], []
    for case, threads, p50s in results:
        median = {r: statistics.median(v) for r, v in p50s.items()}
        columns = []
        for column, runner in TARGETS.items():
            versus = ratio(p50s, "ours loader", runner)
            if (case, runner) in inaccurate:
                columns.append(f"{versus:.2f} inaccurate peer")
                continue
            met = round(versus, 2) <= 1.0
            columns.append(f"{versus:.2f} {'MET' if met else 'MISSED'}")
            if not met:
                missed.append(f"{case.label} {threads} thread(s) vs {column} {versus:.2f}")
        rows.append(
            (
                case.model,
                str(case.length),
                str(threads),
                *(f"{median[r]:.2f}" for r in RUNNERS),
                *columns,
            )
        )
    return rows, missed


def print_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """`title`, then `header` and `rows` in columns as wide as their widest cell."""
    print(f"\n{title}")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
