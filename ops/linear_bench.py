"""Time the linear ops against the float layer and PyTorch's own int8 layer.

For the linear layers of an edge LLM and an encoder (SmolLM2-135M: hidden 576, MLP 1536;
MiniLM-L6: hidden 384, MLP 1536) at a few token counts, on the CPU, per call (median of
interleaved rounds, so that every candidate sees the same machine):

- ``int8`` / ``int4``: ``my_ops.linear_int8`` / ``my_ops.linear_int4`` (group 32);
- ``packed``: ``my_ops.linear_packed`` on the float weight packed once (``my_ops.pack``);
- ``fp32``: ``torch.nn.functional.linear`` on the float weight (oneDNN or MKL);
- ``compiled``: the same under ``torch.compile`` (Inductor's own code);
- ``torch_int8``: PyTorch's dynamic int8 linear (``torch.ao.nn.quantized.dynamic.Linear``,
  FBGEMM: per-channel int8 weights, per-tensor uint8 activations);

and the weight-streaming bound of each: the int8 weight's bytes over the bandwidth of
``torch.clone`` of a tensor of 64 MiB, measured in the same run (the weights of a layer
at a few tokens are read once a call, which bounds the call from below when they come from
memory; these layers' weights, 0.15 to 0.9 MB, fit a server core's L2, so a call may beat it).

    tools/bazel run //ops:linear_bench -- --threads 1 --tokens 1,16,64

``--cpu-isa avx2`` runs every candidate at that tier: ours through MY_OPS_CPU_ISA, torch's
through ATen's, oneDNN's and MKL's caps (``my_ops.cpu_isa_environment``), in a new process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from functools import partial

import torch

import my_ops
from my_ops.pack import pack_linear_weight
from my_ops.quantize import quantize_weight_int4, quantize_weight_int8

LAYERS = {
    "smollm2.qkvo": (576, 576),
    "smollm2.gate_up": (576, 1536),
    "smollm2.down": (1536, 576),
    "minilm.qkvo": (384, 384),
    "minilm.up": (384, 1536),
    "minilm.down": (1536, 384),
}


def _median_ms(calls: dict, rounds: int, per_round: int) -> dict[str, float]:
    for fn in calls.values():
        for _ in range(3):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[name].append((time.perf_counter() - t0) * 1e3 / per_round)
    return {name: statistics.median(v) for name, v in samples.items()}


def _clone_gbps(rounds: int) -> float:
    t = torch.ones(16 << 20)  # 64 MiB: past every cache
    ms = _median_ms({"clone": lambda: t.clone()}, rounds, 5)["clone"]
    return 2 * t.numel() * 4 / (ms * 1e-3) / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads (default 1)")
    p.add_argument(
        "--tokens", default="1,16,64,128", help="rows of x, comma separated (default 1,16,64,128)"
    )
    p.add_argument(
        "--layers",
        default=",".join(LAYERS),
        help=f"which layers, comma separated (default all: {', '.join(LAYERS)})",
    )
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    p.add_argument("--no-compile", action="store_true", help="leave out torch.compile's row")
    p.add_argument(
        "--cpu-isa",
        metavar="TIER",
        help=f"ours and torch's kernels at this tier (this CPU: {', '.join(my_ops.cpu_isas())})",
    )
    args = p.parse_args(argv)
    if args.cpu_isa and os.environ.get(my_ops.CPU_ISA_ENV_VAR) != args.cpu_isa:
        if args.cpu_isa not in my_ops.cpu_isas():
            p.error(f"--cpu-isa: this CPU has {', '.join(my_ops.cpu_isas())}, not {args.cpu_isa!r}")
        # The tier is picked once per process, torch's at its start: a new process.
        env = dict(os.environ, **my_ops.cpu_isa_environment(args.cpu_isa))
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    try:
        tokens = [int(t) for t in args.tokens.split(",")]
        if any(t < 1 for t in tokens):
            raise ValueError
    except ValueError:
        p.error(f"--tokens: expected positive integers separated by commas, got {args.tokens!r}")
    layers = args.layers.split(",")
    unknown = [name for name in layers if name not in LAYERS]
    if unknown:
        p.error(f"--layers: unknown {', '.join(unknown)} (known: {', '.join(LAYERS)})")
    if args.threads < 1 or args.rounds < 1:
        p.error("--threads and --rounds must be >= 1")

    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)  # inference, for every candidate alike
    torch.manual_seed(0)
    gbps = _clone_gbps(args.rounds)
    torch_isa = torch.backends.cpu.get_cpu_capability()
    print(
        f"threads {args.threads}; kernel tier: ours {my_ops.cpu_isa()}, torch {torch_isa}; "
        f"torch.clone bandwidth {gbps:.1f} GB/s; ms per call (median)"
    )
    names = ["int8", "int4", "packed", "fp32", "compiled", "torch_int8"]
    if args.no_compile:
        names.remove("compiled")
    header = f"{'layer':<16} {'tokens':>6} " + " ".join(f"{n:>10}" for n in names)
    print(header + f" {'int8 bound':>10} {'int8/fp32':>9} {'int8/torch':>10} {'packed/fp32':>11}")
    for layer in layers:
        k, n = LAYERS[layer]
        linear = torch.nn.Linear(k, n).eval()
        w8, s8 = quantize_weight_int8(linear.weight)
        w4, s4 = quantize_weight_int4(linear.weight, 32)
        packed = pack_linear_weight(linear.weight)
        bias = linear.bias.detach()
        with warnings.catch_warnings():  # torch.ao.quantization's deprecation notice
            warnings.simplefilter("ignore", DeprecationWarning)
            torch_int8 = torch.ao.quantization.quantize_dynamic(
                torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8
            )
        torch._dynamo.reset()  # each layer compiles afresh, not as a recompile of the last
        compiled = None if args.no_compile else torch.compile(linear)
        for m in tokens:
            x = torch.randn(m, k)
            calls = {
                "int8": partial(my_ops.linear_int8, x, w8, s8, bias),
                "int4": partial(my_ops.linear_int4, x, w4, s4, 32, bias),
                "packed": partial(my_ops.linear_packed, x, packed, bias),
                "fp32": partial(torch.nn.functional.linear, x, linear.weight, bias),
                "torch_int8": partial(torch_int8, x),
            }
            if compiled is not None:
                calls["compiled"] = partial(compiled, x)
            ms = _median_ms(calls, args.rounds, 20)
            bound = w8.numel() / (gbps * 1e9) * 1e3
            row = f"{layer:<16} {m:>6} " + " ".join(f"{ms[n]:>10.4f}" for n in names)
            print(
                row + f" {bound:>10.4f} {ms['int8'] / ms['fp32']:>9.2f}x "
                f"{ms['int8'] / ms['torch_int8']:>9.2f}x {ms['packed'] / ms['fp32']:>10.2f}x",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
