"""tools/bazel run //deploy:bench_models: real pretrained models, ours against ORT and ExecuTorch.

For each model of real_models.py (a BERT sentence encoder and a LLaMA-family LLM, from PyPI
packages) and each sequence length, at batch 1 with static shapes:

1. Exports, through the exporter with its default flags: the model patched with our ops
   (``ours``: its float linear layers ``my_ops.linear_packed``, the exporter's default) and the
   original with ``--float-linear inductor`` (``inductor``, Inductor's own code for the same
   model); the
   original to ONNX (``torch.onnx.export(dynamo=True)``); and the original to ExecuTorch
   (``torch.export``, then ``to_edge_transform_and_lower`` with the XNNPACK partitioner: fp32,
   the ops XNNPACK supports delegated to it). Exports are cached: the packages in the
   exporter's compile cache, the ONNX and ExecuTorch files in --work.
2. Checks every runner's output on a held-out input against the original model in eager
   PyTorch (cosine > 0.9999; for the LLM the same next token) before anything is timed.
3. Times, at each intra-op thread count: our package through the C++ loader (``loader
   --bench``) and through the SDK (``sdk_app``), Inductor's package through the loader, ONNX
   Runtime (CPU execution provider, all graph optimisations), ExecuTorch (its Python
   bindings' runtime, XNNPACK on a thread pool of that many threads: a worker process per
   thread count) and eager PyTorch. Each round runs every runner once, in an order that
   rotates from round to round, each pinned to the last CPU at one thread and to every CPU at
   two; a runner's figure is the median over rounds of its per-call p50, and a ratio the
   median over rounds of the per-round ratio.

Targets (MET/MISSED): our package through the loader <= ONNX Runtime, <= ExecuTorch, and <=
Inductor's package, for every model, length and thread count (ratios rounded to two decimals;
timing_table.py); a quantized peer whose output is below PEER_MIN_COSINE at a case is shown,
marked, and sets no target there.

With ``--quantize int8|int4`` our package is exported with the exporter's ``--quantize``, and
ONNX Runtime and ExecuTorch each run their own recipe for the scheme (model_worker.py's
``ort-quantize`` and ``executorch-export``): int8, dynamic int8 activations and per-channel int8
weights (ExecuTorch: XNNPACKQuantizer's PT2E flow); int4, int8 activations and int4 weights in
groups of 32 (ONNX Runtime: MatMulNBits; ExecuTorch: its LLM export's 8da4w through torchao).
Inductor's package and eager stay float, so ours is held to the faster of the two runtimes'
quantized models. The parity check then asks each quantized runner for the scheme's accuracy
(parity.py: the LLM's next token as well, unless the original's top two logits are a
near-tie) and reports the others' cosine; a peer below it is shown, not fatal.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from deploy.bench import models_footprint, models_generate, real_models
from deploy.bench.model_worker import cpus_for
from deploy.bench.parity import (
    PARITY,
    PEER_MIN_COSINE,
    QUANTIZED_PARITY,
    accurate,
    compare,
    token_text,
)
from deploy.bench.timing_table import HEADER, PEERS, RUNNERS, Case, print_table, table
from deploy.contract.command_line import NonEmptyValueParser
from deploy.exporter.options import DEFAULT_MIN_COSINE

# Calls per runner and round at each length: about a second of work at one thread.
CALLS = {"minilm": {16: 200, 64: 50, 128: 25}, "smollm2": {16: 20, 64: 8, 128: 5}}
# Below the exporter's default --min-cosine a quantized package of ours is broken, not inaccurate.
QUANTIZED_FLOOR = DEFAULT_MIN_COSINE
_P50 = re.compile(r"p50 ([0-9.]+) ms")
# The exporter's compile-cache bound for the bench's exports, unless --export-option sets one.
# The LLM's packages hold about 540 MB of weights each (1 GB under --mode max-autotune), so under
# the exporter's default bound a second run would compile again what the first evicted.
CACHE_MAX_MB = 16384


def _fail(message: str) -> None:
    sys.exit(f"bench_models: error: {message}")


def _real(var: str) -> str:
    """The real path of the file that environment variable `var` names."""
    path = os.environ.get(var, "")
    if not path or not os.path.exists(path):
        _fail(f"${var} ({path!r}) not found; run through tools/bazel run //deploy:bench_models")
    # `bazel run` starts us in the runfiles tree, where data paths are relative links.
    return os.path.realpath(path)


CPUID_CAP_ENV = "MY_OPS_CPUID_CAP"


def _rerun_with_cpuid_capped(tier: str) -> None:
    """Runs this bench again with every library in it and its children seeing a CPU of `tier`
    (libcpuid_cap.so hides the CPUID features above it), unless it already does: ONNX Runtime,
    XNNPACK, oneDNN and the compiler's -march=native have no cap of their own. x86-64 only."""
    if os.environ.get(CPUID_CAP_ENV) == tier or os.uname().machine != "x86_64":
        return
    preload = [_real("MY_OPS_CPUID_CAP_LIBRARY"), os.environ.get("LD_PRELOAD", "")]
    os.environ.update(
        {CPUID_CAP_ENV: tier, "LD_PRELOAD": ":".join(p for p in preload if p)},
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
    )
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "deploy.bench.bench_models", *sys.argv[1:]])


class Worker:
    """A model_worker process: loads once, answers requests in rounds."""

    def __init__(self, args: list[str], env: dict) -> None:
        cmd = [sys.executable, "-m", "deploy.bench.model_worker", *args]
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.what = " ".join(args)

    def ask(self, request: str) -> str:
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            _fail(f"the {self.what} runner stopped (exit {self.proc.wait()}) on: {request}")
        return answer.strip()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _pin(threads: int):
    chosen = cpus_for(threads, frozenset(os.sched_getaffinity(0)))
    return lambda: os.sched_setaffinity(0, chosen)


def _check(proc: subprocess.CompletedProcess, what: str) -> str:
    if proc.returncode != 0:
        _fail(f"{what} failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    return proc.stdout


def export_packages(
    cases: list[Case],
    exporter: list[str],
    options: list[str],
    work: Path,
    env: dict,
    quantize: str | None = None,
    ours_options: tuple[str, ...] | list[str] = (),
    variants: tuple[str, ...] = real_models.VARIANTS,
) -> dict:
    """Exports ours and Inductor's package (`variants`) of every case, with the exporter's
    `options` added (and ``--quantize`` and `ours_options` to ours, ``--float-linear inductor``
    to Inductor's unless `options` say otherwise); returns {(case, variant): folder}."""
    folders = {}
    for case in cases:
        for variant in variants:
            name = real_models.name(case.model, variant, case.length)
            variant_options = list(options)
            if variant == "ours":
                variant_options += ["--quantize", quantize] if quantize else []
                variant_options += ours_options
            if variant == "inductor" and not any(o.startswith("--float-linear") for o in options):
                # Inductor's own products: the row ours is measured against.
                variant_options += ["--float-linear", "inductor"]
            # One folder per set of options, so that packages of another setting stay apart.
            setting = (
                hashlib.sha256("\0".join(variant_options).encode()).hexdigest()[:12]
                if variant_options
                else "default"
            )
            out = work / "packages" / setting / name
            t0 = time.perf_counter()
            cmd = [*exporter, "--model", f"deploy.bench.real_models:{name}", "--max-batch", "1"]
            cmd += [*variant_options, "--out", str(out)]
            if not any(o.startswith("--cache-max-mb") for o in options):
                cmd += ["--cache-max-mb", str(CACHE_MAX_MB)]
            stdout = _check(
                subprocess.run(cmd, env=env, capture_output=True, text=True),
                f"the export of {name}",
            )
            how = "cache hit" if "cache hit" in stdout else "compiled"
            print(f"export {name}: {time.perf_counter() - t0:.1f} s, {how}", flush=True)
            folders[(case, variant)] = out
    return folders


def export_onnx(cases: list[Case], work: Path, env: dict, quantize: str | None = None) -> dict:
    """The original model of every case in ONNX, quantized by ONNX Runtime's recipe for
    `quantize` if one is given; an existing file in --work is reused (each is written whole or
    not at all)."""
    files = {}
    for case in cases:
        path = work / "onnx" / f"{case.model}__{case.length}.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            t0 = time.perf_counter()
            cmd = [
                sys.executable,
                "-m",
                "deploy.bench.model_worker",
                "onnx-export",
                case.model,
                str(case.length),
                str(path),
            ]
            _check(
                subprocess.run(cmd, env=env, capture_output=True, text=True),
                f"the ONNX export of {case.label}",
            )
            print(f"onnx export {case.label}: {time.perf_counter() - t0:.1f} s", flush=True)
        if quantize:
            quantized = path.with_suffix(f".{quantize}.onnx")
            if not quantized.exists():
                t0 = time.perf_counter()
                cmd = [sys.executable, "-m", "deploy.bench.model_worker", "ort-quantize"]
                _check(
                    subprocess.run(
                        [*cmd, quantize, str(path), str(quantized)],
                        env=env,
                        capture_output=True,
                        text=True,
                    ),
                    f"ONNX Runtime's {quantize} quantization of {case.label}",
                )
                print(
                    f"onnxruntime {quantize} {case.label}: {time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
            path = quantized
        files[case] = path
    return files


def export_executorch(
    cases: list[Case], work: Path, env: dict, quantize: str | None = None
) -> dict:
    """The original model of every case as an ExecuTorch program for XNNPACK, quantized by
    ExecuTorch's recipe for `quantize` if one is given; an existing file in --work is reused
    (each is written whole or not at all)."""
    files = {}
    for case in cases:
        scheme = quantize or "float"
        suffix = f".{quantize}.pte" if quantize else ".pte"
        path = work / "executorch" / f"{case.model}__{case.length}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            t0 = time.perf_counter()
            cmd = [sys.executable, "-m", "deploy.bench.model_worker", "executorch-export"]
            _check(
                subprocess.run(
                    [*cmd, case.model, str(case.length), scheme, str(path)],
                    env=env,
                    capture_output=True,
                    text=True,
                ),
                f"the ExecuTorch {scheme} export of {case.label}",
            )
            print(
                f"executorch {scheme} export {case.label}: {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
        files[case] = path
    return files


def _executorch_worker(threads: int) -> str:
    return f"executorch {threads}"


def _peers(case: Case, threads: int, onnx: dict, pte: dict, workers: dict) -> dict:
    """{peer: (its worker, its file of `case`)} for the edge runtimes at `threads`."""
    return {
        "onnxruntime": (workers["onnxruntime"], onnx[case]),
        "executorch": (workers[_executorch_worker(threads)], pte[case]),
    }


@functools.cache
def _original(model: str) -> torch.nn.Module:
    """The unpatched model, the reference of every length's parity check."""
    return real_models.module(model, "inductor")


def check_parity(
    case: Case,
    folders: dict,
    peers: dict,
    tools: dict,
    work: Path,
    quantize: str | None = None,
) -> tuple[list[tuple[str, ...]], list[str], set[tuple[Case, str]]]:
    """Every runner's output on a held-out input (seed 1) against the original in eager: the
    table's rows, the accuracy targets our quantized package missed, and the (case, peer)
    pairs whose quantized output is below PEER_MIN_COSINE."""
    held_out = real_models.inputs(case.model, case.length, seed=1)
    sample = work / "held_out" / f"{case.model}__{case.length}.pt"
    sample.parent.mkdir(parents=True, exist_ok=True)
    torch.save(held_out, sample)
    with torch.inference_mode():
        want = _original(case.model)(*held_out)
    outputs = {}
    for variant in real_models.VARIANTS:
        out = sample.with_suffix(f".{variant}.out.pt")
        cmd = [
            tools["loader"],
            "--ops",
            tools["ops"],
            "--package",
            str(folders[(case, variant)] / "model.pt2"),
            "--input",
            str(sample),
            "--output",
            str(out),
        ]
        _check(subprocess.run(cmd, capture_output=True, text=True), f"the loader on {out}")
        outputs[f"{variant} loader"] = torch.load(out)[0]
    for peer, (worker, path) in peers.items():
        out = sample.with_suffix(f".{peer}.out.pt")
        worker.ask(f"run {path} {sample} {out}")
        outputs[peer] = torch.load(out)
    rows, missed, inaccurate = [], [], set()
    for runner, got in outputs.items():
        quantized = quantize is not None and runner in ("ours loader", *PEERS)
        minimum, token_required = (
            (QUANTIZED_PARITY[quantize][0][case.model], QUANTIZED_PARITY[quantize][1])
            if quantized
            else (PARITY, True)
        )
        agreement = compare(got, want, case.model)
        cosine = agreement.cosine
        ok = accurate(agreement, minimum, token_required, quantized)
        token = token_text(agreement, quantized)
        label = f"{runner} {quantize}" if quantized else runner
        rows.append(
            (
                f"{case.label}, {label}",
                f"cosine 1 - {1 - cosine:.1e}{token}",
                "ok" if ok else f"BELOW {minimum}",
            )
        )
        if ok:
            continue
        # A quantized runner below the scheme's target has missed an accuracy target: a peer's
        # is its result, shown; ours is reported with the speed targets. Below the exporter's
        # own gate, or a float runner below parity, the package is broken: nothing is timed.
        if quantized and (runner in PEERS or cosine >= QUANTIZED_FLOOR):
            if runner in PEERS and cosine < PEER_MIN_COSINE:
                inaccurate.add((case, runner))
            if runner not in PEERS:
                missed.append(f"{case.label} {label} cosine {cosine:.7f} < {minimum}{token}")
            continue
        _fail(
            f"{case.label}: {label}'s output differs from the original model's "
            f"(cosine {cosine:.7f} < {minimum if not quantized else QUANTIZED_FLOOR}{token})"
        )
    return rows, missed, inaccurate


def time_case(
    case: Case,
    threads: int,
    rounds: int,
    calls: int,
    folders: dict,
    peers: dict,
    tools: dict,
    eager: Worker,
) -> dict[str, list[float]]:
    """{runner: per-round p50 (ms)} for one case at one thread count."""
    sample = folders[(case, "ours")] / "sample_input.pt"
    common = ["--input", str(sample), "--bench", str(calls)]

    def cpp(binary: str, variant: str) -> list[str]:
        package = str(folders[(case, variant)] / "model.pt2")
        return [
            binary,
            "--ops",
            tools["ops"],
            "--package",
            package,
            *common,
            "--intra-op-threads",
            str(threads),
        ]

    # The loader writes the last run's output; the SDK app keeps it.
    scratch = ["--output", str(folders[(case, "ours")].parent / "bench_output.pt")]
    commands = {
        "ours loader": [*cpp(tools["loader"], "ours"), *scratch],
        "ours SDK": cpp(tools["sdk_app"], "ours"),
        "inductor loader": [*cpp(tools["loader"], "inductor"), *scratch],
    }
    served = {
        **{
            peer: (worker, f"time {threads} {calls} {path} {sample}")
            for peer, (worker, path) in peers.items()
        },
        "eager": (eager, f"time {threads} {calls} - {sample}"),
    }
    p50s: dict[str, list[float]] = {r: [] for r in RUNNERS}
    for r in range(rounds):
        order = RUNNERS[r % len(RUNNERS) :] + RUNNERS[: r % len(RUNNERS)]
        for runner in order:
            if runner in commands:
                proc = subprocess.run(
                    commands[runner], capture_output=True, text=True, preexec_fn=_pin(threads)
                )
                line = _check(proc, f"{runner} on {case.label}")
            else:
                worker, request = served[runner]
                line = worker.ask(request)
            match = _P50.search(line)
            if not match:
                _fail(f"{runner} on {case.label} printed no p50: {line!r}")
            p50s[runner].append(float(match.group(1)))
    return p50s


def run_footprint(
    cases: list[Case], exporter: list[str], args: argparse.Namespace, work: Path, env: dict, tools
) -> list[str]:
    """The footprint table (models_footprint.py) of each case; returns the targets missed."""
    ours = export_packages(
        cases, exporter, args.export_option, work, env, None, args.ours_option, ("ours",)
    )
    inside_options = [*args.ours_option, "--weights-inside"]
    inside = export_packages(
        cases, exporter, args.export_option, work, env, None, inside_options, ("ours",)
    )
    onnx = export_onnx(cases, work, env)
    table, missed = [], []
    for case in cases:
        weights = models_footprint.weight_bytes(_original(case.model))
        print(models_footprint.describe_weights(case.label, weights), flush=True)
        package = ours[(case, "ours")]
        cmds = models_footprint.commands(
            package / "sample_input.pt",
            package,
            inside[(case, "ours")],
            onnx[case],
            tools,
            models_footprint.scratch_for(work, case.label),
        )
        rows, model_missed = models_footprint.measure_model(
            case.label, cmds, env, args.starts, weights
        )
        table += rows
        missed += model_missed
    print_table(
        f"footprint of one run, {args.starts} starts per runner in turns",
        models_footprint.HEADER,
        table,
    )
    return missed


def _csv(text: str, flag: str, known: tuple, convert=str) -> list:
    values = []
    for item in text.split(","):
        try:
            value = convert(item)
        except ValueError:
            value = None
        if value not in known:
            raise argparse.ArgumentTypeError(
                f"{flag}: {item!r} is not one of {','.join(map(str, known))}"
            )
        values.append(value)
    return values


def main(argv: list[str] | None = None) -> int:
    p = NonEmptyValueParser(prog="bench_models", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        default=",".join(real_models.MODELS),
        help="comma-separated models (default: %(default)s)",
    )
    p.add_argument(
        "--lengths",
        default=",".join(map(str, real_models.LENGTHS)),
        help="comma-separated sequence lengths (default: %(default)s)",
    )
    p.add_argument(
        "--threads",
        default="1,2",
        help="comma-separated intra-op thread counts (default: %(default)s)",
    )
    p.add_argument("--rounds", type=int, default=5, help="timing rounds (default: 5)")
    p.add_argument(
        "--calls",
        type=int,
        default=None,
        help="timed calls per runner and round (default: about a second's worth)",
    )
    p.add_argument(
        "--work",
        default=os.path.expanduser("~/.cache/my_ops/bench_models"),
        help="folder for packages, ONNX files and inputs (default: %(default)s)",
    )
    p.add_argument(
        "--export-option",
        action="append",
        default=[],
        metavar="FLAG[=VALUE]",
        help="an exporter flag for both packages of every model, e.g. "
        "--export-option=--inductor-option=freezing=True (repeatable)",
    )
    p.add_argument(
        "--ours-option",
        action="append",
        default=[],
        metavar="FLAG[=VALUE]",
        help="an exporter flag for our package only, e.g. --ours-option=--smooth-alpha=0 "
        "with --quantize (repeatable)",
    )
    p.add_argument(
        "--quantize",
        choices=tuple(QUANTIZED_PARITY),
        default=None,
        help="export our package with --quantize SCHEME and run ONNX Runtime's and ExecuTorch's "
        "recipes for the same scheme (default: all float)",
    )
    p.add_argument(
        "--footprint",
        action="store_true",
        help="instead of the timings: the footprint of one run of each model at its first "
        "length, ours against ONNX Runtime's process (see models_footprint.py)",
    )
    p.add_argument(
        "--starts",
        type=int,
        default=3,
        help="with --footprint: starts per runner, in turns (default: %(default)s)",
    )
    p.add_argument(
        "--generate",
        action="store_true",
        help="instead of the timings: SmolLM2 generating tokens, prefill and decode tokens/s of "
        "our decoder package (loader --generate), ExecuTorch and llama.cpp at each thread count "
        "(models_generate.py); with --quantize int8, ours int8 against llama.cpp's Q8_0",
    )
    p.add_argument(
        "--cpu-isa",
        metavar="TIER",
        help="run our kernels at this tier (MY_OPS_CPU_ISA) and, on x86-64, every other runner "
        "on a CPU that looks like one of it (CPUID's features above it hidden: "
        "tools/cpu/cpuid_cap.c), and with --generate llama.cpp built for it (avx2; other "
        "tiers: for this CPU) (default: the CPU's highest)",
    )
    p.add_argument("--no-check", action="store_true", help="exit 0 even when a target is missed")
    args = p.parse_args(argv)
    if args.footprint and args.quantize:
        p.error("--footprint measures the float packages; leave out --quantize")
    if args.starts < 1:
        p.error("--starts must be >= 1")
    try:
        models = _csv(args.models, "--models", real_models.MODELS)
        lengths = _csv(args.lengths, "--lengths", real_models.LENGTHS, int)
        thread_counts = _csv(args.threads, "--threads", (1, 2, 4, 8), int)
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if args.rounds < 1 or (args.calls is not None and args.calls < 1):
        p.error("--rounds and --calls must be >= 1")

    tools = {
        "loader": _real("MY_OPS_LOADER"),
        "sdk_app": _real("MY_OPS_SDK_APP"),
        "ops": _real("MY_OPS_LIBRARY"),
    }
    exporter = [_real("MY_OPS_EXPORT")]
    # The C++ runners find LibTorch's libraries as on an edge machine, through the library path:
    # their own run paths lead into runfiles trees that a `bazel run` of this target does not
    # make (libtorch.so's libtorch_cuda.so is found only there). The folder in this target's
    # runfiles, not its real path: LibTorch's CUDA libraries find NVIDIA's beside it, at
    # ../../nvidia, in the tree that the LibTorch repository lays out with links.
    _real("LIBTORCH_LIB")  # one line and exit 1 when it is missing
    libtorch = os.path.dirname(os.path.abspath(os.environ["LIBTORCH_LIB"]))
    library_path = os.environ.get("LD_LIBRARY_PATH")
    # Real paths for this process (it loads the models and my_ops too) and its children. The
    # model files are local: transformers must not look for a hub, nor draw progress bars.
    os.environ.update(
        {var: _real(var) for var in (real_models.MINILM_ENV, real_models.SMOLLM2_ENV)},
        LD_LIBRARY_PATH=f"{libtorch}:{library_path}" if library_path else libtorch,
        MY_OPS_LIBRARY=tools["ops"],
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TQDM_DISABLE="1",
    )
    import my_ops

    have = my_ops.cpu_isas()
    if args.cpu_isa is not None:
        if args.cpu_isa not in have:
            p.error(f"--cpu-isa: this CPU has {', '.join(have)}, not {args.cpu_isa!r}")
        os.environ.update(my_ops.cpu_isa_environment(args.cpu_isa))
        if args.cpu_isa != have[-1]:
            _rerun_with_cpuid_capped(args.cpu_isa)
    tier = args.cpu_isa or have[-1]
    capped = os.environ.get(CPUID_CAP_ENV) == tier
    print(
        f"kernel tier: ours {tier}; "
        + (
            f"every runner (Inductor's compiler, eager PyTorch, ONNX Runtime, ExecuTorch) sees "
            f"a CPU of tier {tier}: CPUID capped"
            if capped
            else f"ONNX Runtime and ExecuTorch at this CPU's own ({have[-1]})"
        )
        + "; llama.cpp built for "
        + (args.cpu_isa if args.cpu_isa in models_generate.LLAMA_CPP_TIER_FLAGS else "this CPU"),
        flush=True,
    )
    # The children import deploy.bench and my_ops as this process does.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    work = Path(os.path.join(user_cwd, args.work)).resolve()
    work.mkdir(parents=True, exist_ok=True)

    if args.footprint:
        missed = run_footprint(
            [Case(m, lengths[0]) for m in models], exporter, args, work, env, tools
        )
        if missed:
            print("MISSED: " + "; ".join(missed), flush=True)
        return 1 if missed and not args.no_check else 0

    if args.generate:
        quantize = args.quantize
        if quantize not in models_generate.LLAMA_CPP_SCHEME:
            print(f"bench_models: --generate takes --quantize int8 or none, not {quantize}")
            return 2
        runners = models_generate.Runners(
            tools,
            models_generate.export_decoder(exporter, work, env, _check, quantize),
            None if quantize else models_generate.export_executorch(work, env, _check),
            models_generate.llama_cpp(
                work,
                os.environ[real_models.SMOLLM2_ENV],
                _check,
                models_generate.LLAMA_CPP_SCHEME[quantize],
                args.cpu_isa,
            ),
            work,
            env,
            quantize,
        )
        parity, missed = models_generate.check_transformers(runners, real_models._smollm2())
        print_table(
            f"SmolLM2 greedy, {models_generate.NEW_TOKENS} new tokens: ours (loader) against "
            "transformers' generate in eager",
            ("prompt tokens", "transformers' tokens", "ours"),
            parity,
        )
        rows, timing_missed = models_generate.measure(runners, thread_counts, args.rounds, _pin)
        missed += timing_missed
        precision = f"ours {quantize}, llama.cpp Q8_0" if quantize else "fp32"
        print_table(
            f"SmolLM2-135M {precision}, KV cache {models_generate.CACHE}, greedy, "
            f"{models_generate.NEW_TOKENS} new tokens, tokens/s, median of {args.rounds} rounds",
            models_generate.header(runners.peers),
            rows,
        )
        print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
        return 1 if missed and not args.no_check else 0

    cases = [Case(m, n) for m in models for n in lengths]
    folders = export_packages(
        cases, exporter, args.export_option, work, env, args.quantize, args.ours_option
    )
    onnx = export_onnx(cases, work, env, args.quantize)
    pte = export_executorch(cases, work, env, args.quantize)
    workers = {"onnxruntime": Worker(["ort"], env)}
    for threads in thread_counts:
        workers[_executorch_worker(threads)] = Worker(["executorch", str(threads)], env)
    for model in models:
        workers[model] = Worker(["eager", model], env)
    try:
        parity, inaccurate, inaccurate_peers = [], [], set()
        for case in cases:
            peers = _peers(case, thread_counts[0], onnx, pte, workers)
            rows, missed, below = check_parity(case, folders, peers, tools, work, args.quantize)
            parity += rows
            inaccurate += missed
            inaccurate_peers |= below
        print_table(
            "parity on a held-out input, against the original model in eager PyTorch",
            ("runner", "output", "check"),
            parity,
        )
        results = []
        for case in cases:
            for threads in thread_counts:
                calls = args.calls or CALLS[case.model][case.length]
                print(
                    f"timing {case.label} at {threads} thread(s): {args.rounds} rounds of "
                    f"{calls} calls per runner",
                    flush=True,
                )
                peers = _peers(case, threads, onnx, pte, workers)
                p50s = time_case(
                    case, threads, args.rounds, calls, folders, peers, tools, workers[case.model]
                )
                results.append((case, threads, p50s))
    finally:
        for worker in workers.values():
            worker.close()
    rows, missed = table(results, inaccurate_peers)
    missed = inaccurate + missed
    scheme = (
        f"; ours, onnxruntime and executorch {args.quantize}, inductor and eager float"
        if args.quantize
        else ""
    )
    print_table(
        f"per-call p50 (ms), batch 1, median of {args.rounds} rounds, {os.cpu_count()} CPUs"
        f"{scheme}",
        HEADER,
        rows,
    )
    print("targets: " + ("met" if not missed else "MISSED: " + "; ".join(missed)))
    return 1 if missed and not args.no_check else 0


if __name__ == "__main__":
    sys.exit(main())
