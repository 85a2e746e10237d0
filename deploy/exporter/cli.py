"""export's command line: its flags, their defaults and checks, and its one-line errors.

parse_args turns the flags into one frozen Options (options.py, which the Python function
shares), or a KeyCommand; nothing after it sees argparse.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..contract.command_line import NonEmptyValueParser
from .cache import DEFAULT_MAX_MB
from .cache import default_dir as default_cache_dir
from .compile import MAX_AUTOTUNE, MODES, NO_AUTOTUNE
from .cross import HOST_TARGET, TARGETS
from .errors import (
    EXIT_ACCURACY,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_NOT_BASE_ARCHITECTURE,
    EXIT_OUT_REFUSED,
    EXIT_USAGE,
    ExportError,
)
from .model import DEFAULT_MODEL
from .options import (
    DEFAULT_MAX_BATCH,
    DEFAULT_MIN_COSINE,
    DEVICES,
    FLOAT_LINEARS,
    ISAS,
    QUANTIZE_SCHEMES,
    CacheOptions,
    Options,
    checked,
)


@dataclasses.dataclass(frozen=True)
class KeyCommand:
    """--generate-key DIR or --sign DIR: one quick step with a key, and no export."""

    generate_key: str | None  # absolute
    sign: str | None  # absolute
    signing_key: str | None  # absolute


def die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
    print(f"export: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _default_out() -> str:
    # `bazel run` executes inside the runfiles tree; BUILD_WORKSPACE_DIRECTORY
    # points back at the source checkout, which is where users expect out/.
    base = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return os.path.join(base, "out")


class _Parser(NonEmptyValueParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other error of this tool.
        die(f"{message} (see --help)", EXIT_USAGE)


def argument_parser() -> argparse.ArgumentParser:
    """The exporter's flags; every value-taking one refuses an empty value (exit 2)."""
    p = _Parser(
        prog="export",
        description="Export a model using my_ops to an AOTInductor package (model.pt2), "
        "verify it against eager, and write sample_input.pt / expected_output.pt and "
        "manifest.json (sha256 sums the C++ loader checks).",
        epilog="Factory protocol: see deploy/default_model.py. Exit status 0 on success, "
        f"{EXIT_USAGE} on bad usage, {EXIT_OUT_REFUSED} when --out may not be replaced "
        f"(nothing is touched), {EXIT_NOT_BASE_ARCHITECTURE} when --weights-only is given a "
        "model whose architecture or quantization differs from --base's or a --base whose "
        f"weights are frozen into it, {EXIT_ACCURACY} when --quantize's model falls below "
        "--min-cosine, "
        f"{EXIT_INTERRUPTED} when interrupted, {EXIT_FAILURE} on any other failure "
        "(one line on stderr); the numbers mean the same for every program here "
        '(`loader --help` lists them all). An empty flag value (--signing-key "") is bad '
        "usage, never the same as leaving the flag out.",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="output folder (default: $BUILD_WORKSPACE_DIRECTORY/out, else ./out). It is "
        "replaced as a whole, so it must be new, empty, or hold a previous export "
        "(only export files, with this tool's manifest.json); anything else is refused "
        "untouched",
    )
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="target device. cuda needs a GPU at export time; its kernels are embedded "
        "for that GPU's architecture (SASS, and PTX that newer GPUs compile at load time) "
        "and for the TORCH_CUDA_ARCH_LIST entries above it",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="MODULE:FACTORY",
        help="factory returning the model spec (default: the built-in block)",
    )
    p.add_argument(
        "--target",
        choices=(HOST_TARGET, *TARGETS),
        default=HOST_TARGET,
        help="the machine the package runs on (default: linux-x86_64). linux-aarch64 "
        "cross-compiles for ARM64 (armv8-a with NEON, CPU only); the package is not "
        "verified here, since it cannot run on this machine",
    )
    p.add_argument(
        "--isa",
        choices=ISAS,
        default="portable",
        help="CPU instruction set: portable = x86-64-v3 (AVX2), native = this "
        "machine (default: portable)",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_BATCH,
        help=f"largest batch size the package accepts (default: {DEFAULT_MAX_BATCH})",
    )
    p.add_argument(
        "--kv-cache",
        type=int,
        default=None,
        metavar="LEN",
        help="export a decoder with a KV cache of LEN positions, which the package keeps "
        "between runs: the factory is called with kv_cache=LEN (see my_ops.llama); the loader "
        "and the SDK then generate tokens with it (loader --generate)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help=f"what the compile spends on the package's speed. {NO_AUTOTUNE} (the default): "
        "compile once with Inductor's defaults; the package holds each weight once and takes "
        f"--weights-only weights files. {MAX_AUTOTUNE} (CPU packages of this machine's "
        "architecture): freeze the weights into the package, prepacked, and compile every "
        "matrix product with a weight with Inductor's C++ matrix-product template, its "
        "blockings benchmarked on this machine (up to twice the export time). The package "
        "then holds its weights twice and takes no weights file; it can be faster on CPUs "
        "without AVX-512",
    )
    p.add_argument(
        "--inductor-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one torch._inductor.config option for the compile, e.g. "
        "aot_inductor.compile_wrapper_opt_level=O0 (repeatable; VALUE is a Python literal, "
        "else a string). Part of the cache key",
    )
    p.add_argument(
        "--no-c-shims",
        action="store_true",
        help="call every custom op through AOTInductor's ProxyExecutor (the call described "
        "in JSON and dispatched at run time), as packages did before C shims, instead of as a "
        "direct C function of the op library (default: C shims for every op the library "
        "has them for)",
    )
    p.add_argument(
        "--weights-inside",
        action="store_true",
        help="keep a CPU package's weights inside it, one file, as AOTInductor does by "
        "default (default: beside it, weights.bin and weights.json, which the loader maps: a "
        "run then holds them once, where one with them inside holds them twice). CUDA, "
        "--target and --mode max-autotune packages always hold theirs",
    )
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="compile cache folder (default: $XDG_CACHE_HOME/my_ops/inductor, else "
        "~/.cache/my_ops/inductor). An unchanged model with the same op library, torch, "
        "compiler and ISA is not compiled again; delete the folder to clear it",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="compile from nothing and leave no cache behind",
    )
    p.add_argument(
        "--cache-max-mb",
        type=int,
        default=DEFAULT_MAX_MB,
        metavar="MB",
        help=f"size bound of the cache folder; the least recently used entries are "
        f"deleted at the end of an export (default: {DEFAULT_MAX_MB})",
    )
    p.add_argument(
        "--profile-compile",
        action="store_true",
        help="print where the compile stage's time went: Inductor's code generation, "
        "precompiled headers, the wrapper and kernel compiles, the link",
    )
    p.add_argument(
        "--signing-key",
        metavar="KEY",
        help="sign manifest.json with this Ed25519 private key (PEM, or a raw 32-byte "
        "seed), writing manifest.sig",
    )
    p.add_argument(
        "--generate-key",
        metavar="DIR",
        help="only write a new key pair, DIR/signing_key.pem and DIR/public_key.pem, and exit",
    )
    p.add_argument(
        "--sign",
        metavar="DIR",
        help="only sign an existing export with --signing-key: check that DIR/manifest.json "
        "describes the package in DIR, write DIR/manifest.sig, and exit",
    )
    p.add_argument(
        "--weights-only",
        action="store_true",
        help="write only a weights file for the package in --base: weights.bin (the model's "
        "constants and custom-object state), weights.json (its sha256, the base package's, and "
        "where each tensor lies; weights.sig with --signing-key), sample_input.pt and "
        "expected_output.pt. The model must have the base's architecture (same graph, same "
        f"constant names, shapes and dtypes); the first difference is refused with exit "
        f"{EXIT_NOT_BASE_ARCHITECTURE}. "
        "Nothing is compiled. The loader applies it with --weights",
    )
    p.add_argument(
        "--base",
        metavar="DIR",
        help="with --weights-only: the export whose package the weights are for (its "
        "model.pt2, manifest.json and architecture.json)",
    )
    p.add_argument(
        "--quantize",
        choices=QUANTIZE_SCHEMES,
        help="replace every nn.Linear of the model (a tied output projection included) by a "
        "quantized linear op: int8 (int8 weights, one scale per output channel: "
        "my_ops.linear_int8) or int4 (int4 weights, one float16 scale per 32 in_features: "
        "my_ops.linear_int4); both quantize activations per token to 8 bits on each call. "
        "The quantized model is compared with the float one on the example inputs (cosine "
        f"and largest difference printed); below --min-cosine the export stops with exit "
        f"{EXIT_ACCURACY} and writes nothing. Default: the model as it is",
    )
    p.add_argument(
        "--float-linear",
        choices=FLOAT_LINEARS,
        help="how the float nn.Linear layers run (those --quantize leaves float included): "
        "packed (my_ops.linear_packed on the weight packed once at export; a layer whose "
        "out_features is not a multiple of 32, or whose weight another module shares, stays "
        "as it is) or inductor (Inductor's own product). Default: packed for --device cpu, "
        "inductor for cuda",
    )
    p.add_argument(
        "--quantize-skip",
        action="append",
        default=[],
        metavar="PATTERN",
        help="with --quantize: leave the Linear layers whose qualified name matches PATTERN "
        "(fnmatch: lm_head, *.attn.*) float; repeat for several",
    )
    p.add_argument(
        "--smooth-alpha",
        type=float,
        metavar="A",
        help="with --quantize: SmoothQuant's migration strength in [0, 1], 0 for none: each "
        "quantized layer divides its input by max|x_j|^A / max|w_j|^(1-A) per input channel "
        "(measured on the example inputs) and its weight is quantized times it, which evens out "
        "the activations' outlier channels. Default: 0.5 for int8, 0 for int4; with "
        "--weights-only, the base's",
    )
    p.add_argument(
        "--min-cosine",
        type=float,
        metavar="X",
        help="with --quantize: the lowest cosine between the quantized and the float model's "
        f"outputs that is exported (default {DEFAULT_MIN_COSINE})",
    )
    return p


def parse_args(argv: Sequence[str] | None) -> Options | KeyCommand:
    p = argument_parser()
    args = p.parse_args(argv)
    if args.sign and not args.signing_key:
        p.error("--sign needs --signing-key")
    if args.sign and args.generate_key:
        p.error("--sign and --generate-key contradict each other")
    if args.weights_only and (args.sign or args.generate_key):
        p.error("--weights-only exports; --sign and --generate-key do not")
    if args.no_cache and args.cache_dir:
        p.error("--no-cache and --cache-dir contradict each other")
    if args.cache_max_mb < 1:
        p.error("--cache-max-mb must be >= 1")
    # Under `bazel run` the cwd is the runfiles tree; relative paths the user
    # typed mean their own working directory.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")

    def user_path(path: str | None) -> str | None:
        return os.path.abspath(os.path.join(user_cwd, path)) if path else None

    if args.generate_key or args.sign:
        return KeyCommand(
            generate_key=user_path(args.generate_key),
            sign=user_path(args.sign),
            signing_key=user_path(args.signing_key),
        )
    cache = None
    if not args.no_cache:
        cache = CacheOptions(
            folder=user_path(args.cache_dir or default_cache_dir()),
            given=args.cache_dir is not None,
            max_bytes=args.cache_max_mb << 20,
        )
    opts = Options(
        out=user_path(args.out or _default_out()),
        device=args.device,
        model=args.model,
        target=args.target,
        isa=args.isa,
        max_batch=args.max_batch,
        kv_cache=args.kv_cache,
        mode=args.mode,
        inductor_options=tuple(args.inductor_option),
        c_shims=not args.no_c_shims,
        weights_inside=args.weights_inside,
        cache=cache,
        profile_compile=args.profile_compile,
        signing_key=user_path(args.signing_key),
        weights_only=args.weights_only,
        base=user_path(args.base),
        quantize=args.quantize,
        quantize_skip=tuple(args.quantize_skip),
        float_linear=args.float_linear,
        min_cosine=args.min_cosine,
        smooth_alpha=args.smooth_alpha,
    )
    try:
        return checked(opts)
    except ExportError as e:
        p.error(str(e))
