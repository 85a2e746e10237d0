"""What writing a decoder's KV cache costs inside a package: whether an op of ours for it
could pay.

A SmolLM2-sized cache (30 layers, keys and values, 3 KV heads of 64 features, 512 positions)
is written the way my_ops.llama writes it, with ``index_copy_`` on each buffer, by one
package; a second package does the same work without the writes. Both are exported with the
exporter's defaults and run interleaved from Python for a decode step (1 token) and a
prompt (64 tokens): the difference is what the 60 writes cost, to set against a step of
the decoder (tools/bazel run //deploy:bench_models -- --generate).

    tools/bazel run //deploy/bench:kv_cache_write -- --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

LAYERS, KV_HEADS, HEAD_DIM, CACHE = 30, 3, 64, 512


class CacheWrites(torch.nn.Module):
    """Per layer, a step's keys and values (scaled per layer, as each layer's differ) written
    into its cache at the tokens' positions, or (``write=False``) only computed."""

    def __init__(self, write: bool) -> None:
        super().__init__()
        self.write = write
        shape = (1, KV_HEADS, CACHE, HEAD_DIM)
        for i in range(LAYERS):
            self.register_buffer(f"k_{i}", torch.zeros(shape))
            self.register_buffer(f"v_{i}", torch.zeros(shape))

    def forward(self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        total = k.new_zeros(())
        for i in range(LAYERS):
            k_i, v_i = k * (i + 1), v * (i + 1)
            if self.write:
                getattr(self, f"k_{i}").index_copy_(2, positions, k_i)
                getattr(self, f"v_{i}").index_copy_(2, positions, v_i)
            total = total + k_i.sum() + v_i.sum()
        return total


def _inputs(tokens: int) -> tuple:
    g = torch.Generator().manual_seed(tokens)
    shape = (1, KV_HEADS, tokens, HEAD_DIM)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g), torch.arange(tokens)


def _export(write: bool, out: Path):
    from deploy import export
    from deploy.exporter.loading import load

    tokens = torch.export.Dim("tokens", min=1, max=CACHE)
    dynamic = ({2: tokens}, {2: tokens}, {0: tokens})
    # The exporter verifies the package at token counts up to max_batch (make_inputs).
    exported = export(CacheWrites(write), _inputs(4), out, dynamic_shapes=dynamic,
                      make_inputs=_inputs, max_batch=64, cache=False)  # fmt: skip
    return load(str(exported.package))


def _per_call_us(run, args, calls: int) -> float:
    for _ in range(calls // 10):
        run(*args)
    start = time.perf_counter()
    for _ in range(calls):
        run(*args)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    p.add_argument("--calls", type=int, default=2000, help="timed calls per round (default: 2000)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (default: 1)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="kv_cache_write.") as work:
        print("exporting the two packages ...", file=sys.stderr, flush=True)
        runners = {
            w: _export(w, Path(work) / ("writes" if w else "no_writes")) for w in (True, False)
        }
        print(f"{'tokens':>6}  {'writes us':>10}  {'no writes us':>12}  {'60 writes us':>12}")
        for tokens in (1, 64):
            step = _inputs(tokens)
            times = {True: [], False: []}
            for _ in range(args.rounds):
                for write in (True, False):
                    times[write].append(_per_call_us(runners[write], step, args.calls))
            with_w, without = statistics.median(times[True]), statistics.median(times[False])
            print(f"{tokens:>6}  {with_w:>10.1f}  {without:>12.1f}  {with_w - without:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
