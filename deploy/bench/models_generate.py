"""//deploy:bench_models --generate: SmolLM2 as a decoder package (--kv-cache), generating tokens
through the C++ loader's token loop (loader --generate, the SDK's Session).

For each prompt length (16, 64, 128 by default) and intra-op thread count, in rounds that
alternate the lengths: the prompt's rate (prefill tokens/s: the prompt in one run) and the
decode rate (tokens/s over 64 new tokens, one run each), as the loader reports them; the
median over rounds. Greedy decoding with no stop token, so every round runs the same steps.

Then the cost of a decode step against the cache's fill: 64 new tokens after a prompt of 16
and after one of CACHE - 64 tokens. Attention reads the whole cache under a mask, so the two
must be level (within the noise of this machine: 10 %).
"""

from __future__ import annotations

import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch

CACHE = 512
NEW_TOKENS = 64
PROMPTS = (16, 64, 128)
VOCAB = 49152
# A decode step at fill CACHE - NEW_TOKENS against one at fill 16: level within this.
FILL_TOLERANCE = 1.10
_RATES = re.compile(
    r"prefill (\d+) tokens [0-9.]+ ms \(([0-9.]+) tokens/s\), decode (\d+) tokens [0-9.]+ ms "
    r"\(([0-9.]+) tokens/s\)"
)


def export_decoder(exporter: list[str], work: Path, env: dict, check) -> Path:
    """SmolLM2's decoder package with a KV cache of CACHE positions (cached by the exporter)."""
    out = work / "packages" / "generate" / f"smollm2_decoder_{CACHE}"
    cmd = [
        *exporter,
        "--model",
        "deploy.bench.real_models:smollm2_decoder",
        "--kv-cache",
        str(CACHE),
        "--cache-max-mb",
        "16384",
        "--out",
        str(out),
    ]
    check(subprocess.run(cmd, env=env, capture_output=True, text=True), "the decoder's export")
    return out


def prompt_file(work: Path, length: int) -> Path:
    path = work / "prompts" / f"prompt_{length}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(length)
    torch.save(torch.randint(0, VOCAB, (length,), generator=g), path)
    return path


def generate_once(
    loader: str,
    ops: str,
    package: Path,
    prompt: Path,
    threads: int,
    env: dict,
    pin: Callable,
    new_tokens: int = NEW_TOKENS,
) -> tuple[float, float]:
    """(prefill tokens/s, decode tokens/s) of one loader --generate run."""
    cmd = [
        loader,
        "--ops",
        ops,
        "--package",
        str(package / "model.pt2"),
        "--prompt-ids",
        str(prompt),
        "--generate",
        str(new_tokens),
        "--intra-op-threads",
        str(threads),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=pin)
    match = _RATES.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(f"loader --generate failed (exit {proc.returncode}): {proc.stderr}")
    return float(match.group(2)), float(match.group(4))


def measure(
    loader: str,
    ops: str,
    package: Path,
    work: Path,
    thread_counts: list[int],
    rounds: int,
    env: dict,
    pin_for: Callable[[int], Callable],
) -> tuple[list[tuple[str, ...]], list[str]]:
    """The table's rows and the targets missed."""
    lengths = (*PROMPTS, CACHE - NEW_TOKENS)
    prompts = {n: prompt_file(work, n) for n in lengths}
    rates: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in range(rounds):
        for threads in thread_counts:
            # A rotating order, so that no length always runs first in a round.
            for n in lengths[r % len(lengths) :] + lengths[: r % len(lengths)]:
                rates.setdefault((n, threads), []).append(
                    generate_once(loader, ops, package, prompts[n], threads, env, pin_for(threads))
                )
    rows, missed = [], []
    for threads in thread_counts:
        for n in lengths:
            prefill = statistics.median(p for p, _ in rates[(n, threads)])
            decode = statistics.median(d for _, d in rates[(n, threads)])
            rows.append((str(threads), str(n), f"{prefill:.0f}", f"{decode:.1f}"))
        level = statistics.median(d for _, d in rates[(PROMPTS[0], threads)]) / statistics.median(
            d for _, d in rates[(CACHE - NEW_TOKENS, threads)]
        )
        verdict = "met" if level <= FILL_TOLERANCE else "MISSED"
        rows.append(
            (
                str(threads),
                f"fill {PROMPTS[0]} / {CACHE - NEW_TOKENS}",
                "",
                f"{level:.2f}x ({verdict})",
            )
        )
        if level > FILL_TOLERANCE:
            missed.append(
                f"decode at fill {CACHE - NEW_TOKENS} is {level:.2f}x slower ({threads} t)"
            )
    return rows, missed


HEADER = ("threads", "prompt tokens", "prefill tokens/s", "decode tokens/s (64 new)")
