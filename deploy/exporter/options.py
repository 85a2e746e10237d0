"""What an export is asked to do, whoever asks: the command line (cli.py) or Python (api.py).

Options holds every setting once parsed; `checked` applies the rules between them that both
front ends share, naming each setting the way its front end spells it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .compile import MAX_AUTOTUNE, MODES, NO_AUTOTUNE
from .cross import HOST_TARGET, TARGETS
from .errors import EXIT_USAGE, ExportError

DEVICES = ("cpu", "cuda")
ISAS = ("portable", "native")
DEFAULT_MAX_BATCH = 16
# --quantize: every nn.Linear becomes my_ops.linear_int8 or my_ops.linear_int4 (my_ops.quantize).
QUANTIZE_SCHEMES = ("int8", "int4")
DEFAULT_QUANTIZE_GROUP_SIZE = 32
# --float-linear: how a float nn.Linear is computed. "packed": my_ops.linear_packed on its weight
# packed once at export (my_ops.pack); "inductor": Inductor's own product (ATen's, or its C++
# GEMM template under --mode max-autotune).
FLOAT_LINEARS = ("packed", "inductor")
# The default per device: on a CPU the packed op measured faster than Inductor's product at every
# shape of the bench's models (docs/PERFORMANCE.md, "Float linear layers on packed weights"); on a
# GPU cuBLAS stays.
DEFAULT_FLOAT_LINEAR = {"cpu": "packed", "cuda": "inductor"}
# The quantized model's outputs against the float model's on the example inputs, as one
# cosine: below this the export is refused. Per-channel int8 keeps about 0.999 and int4 in
# groups of 32 about 0.998 on an LLM's logits; 0.99 catches a layer the scheme breaks.
DEFAULT_MIN_COSINE = 0.99


@dataclasses.dataclass(frozen=True)
class CacheOptions:
    folder: str  # absolute
    # A folder the caller named must be usable; the default folder may be skipped.
    given: bool
    max_bytes: int


@dataclasses.dataclass(frozen=True)
class Options:
    out: str  # absolute
    device: str = "cpu"
    model: str = ""  # what is exported, for messages: MODULE:FACTORY on the command line
    target: str = HOST_TARGET
    isa: str = "portable"
    max_batch: int = DEFAULT_MAX_BATCH
    # A decoder's KV cache length, passed to the factory as kv_cache (my_ops.llama); None: the
    # factory is called without it.
    kv_cache: int | None = None
    mode: str | None = None  # compile.MODES; None: DEFAULT_MODE
    inductor_options: tuple[str, ...] = ()  # KEY=VALUE, parsed once the export has started
    c_shims: bool = True  # call the op library's C shims, not the ProxyExecutor
    # Keep the weights inside the package, where a CPU package's go beside it (weights.bin).
    weights_inside: bool = False
    cache: CacheOptions | None = None  # None: no cache
    profile_compile: bool = False
    signing_key: str | None = None  # absolute
    weights_only: bool = False
    base: str | None = None  # absolute; with weights_only
    quantize: str | None = None  # QUANTIZE_SCHEMES; None: the model as it is
    quantize_skip: tuple[str, ...] = ()  # fnmatch patterns of Linear layers left float
    quantize_group_size: int = DEFAULT_QUANTIZE_GROUP_SIZE  # int4's
    min_cosine: float | None = None  # None: DEFAULT_MIN_COSINE, with quantize
    # SmoothQuant's alpha in [0, 1], 0 for none; None: the base's (--weights-only) or the
    # scheme's default (my_ops.quantize.DEFAULT_SMOOTH_ALPHA), resolved where torch is loaded.
    smooth_alpha: float | None = None
    float_linear: str | None = None  # FLOAT_LINEARS; None: DEFAULT_FLOAT_LINEAR[device]


def tunable(device: str, target: str) -> bool:
    """Whether --mode max-autotune applies: the tuning benchmarks on the exporting machine, so
    it is for CPU packages of this machine's architecture."""
    return device == "cpu" and target == HOST_TARGET


# The mode of a package exported without --mode. no-autotune holds each weight once and takes
# weights files; max-autotune, where it applies, holds the weights twice (the originals beside
# the prepacked copies Inductor's C++ GEMM template reads) and takes no weights file, and on a
# Sapphire Rapids CPU (AVX-512) its packages measured no faster (docs/PERFORMANCE.md, "The
# default holds each weight once"). Under --quantize every linear layer is an op of ours that
# reads the weights as stored, so freezing would have nothing to prepack either.
DEFAULT_MODE = NO_AUTOTUNE


def flag(name: str) -> str:
    """An Options field as the command line spells it."""
    return "--" + name.replace("_", "-")


def checked(opts: Options, spell: Callable[[str], str] = flag) -> Options:
    """`opts` with its mode and float linear resolved, or ExportError (exit 2) naming the
    first setting that is out of range or contradicts another, as `spell` writes its name."""

    def refuse(message: str) -> ExportError:
        return ExportError(message, EXIT_USAGE)

    for name, value, allowed in (
        ("device", opts.device, DEVICES),
        ("target", opts.target, (HOST_TARGET, *TARGETS)),
        ("isa", opts.isa, ISAS),
        ("mode", opts.mode, (None, *MODES)),
        ("quantize", opts.quantize, (None, *QUANTIZE_SCHEMES)),
        ("float_linear", opts.float_linear, (None, *FLOAT_LINEARS)),
    ):
        if value not in allowed:
            choices = ", ".join(repr(a) for a in allowed if a is not None)
            raise refuse(f"{spell(name)} must be one of {choices}, got {value!r}")
    if isinstance(opts.max_batch, bool) or not isinstance(opts.max_batch, int):
        raise refuse(f"{spell('max_batch')} must be an int, got {opts.max_batch!r}")
    if opts.max_batch < 1:
        raise refuse(f"{spell('max_batch')} must be >= 1")
    if opts.kv_cache is not None and (
        isinstance(opts.kv_cache, bool) or not isinstance(opts.kv_cache, int) or opts.kv_cache < 2
    ):
        raise refuse(f"{spell('kv_cache')} must be an int >= 2, got {opts.kv_cache!r}")
    if opts.target != HOST_TARGET:
        if opts.device != "cpu":
            raise refuse(
                f"{spell('target')} {opts.target} packages are CPU only ({spell('device')} cpu)"
            )
        if opts.isa != "portable":
            raise refuse(
                f"{spell('isa')} {opts.isa} is for {HOST_TARGET}; {spell('target')} "
                f"{opts.target} uses its baseline"
            )
    if opts.mode == MAX_AUTOTUNE and not tunable(opts.device, opts.target):
        # A cross target's package runs on another CPU, and CUDA packages are not measured.
        raise refuse(
            f"{spell('mode')} {MAX_AUTOTUNE} is for {spell('device')} cpu packages of {HOST_TARGET}"
        )
    if opts.cache is not None and opts.cache.max_bytes < 1 << 20:
        raise refuse(f"{spell('cache_max_mb')} must be >= 1")
    if opts.weights_only != (opts.base is not None):
        raise refuse(f"{spell('weights_only')} and {spell('base')} go together")
    if opts.quantize is None:
        for name, value, unset in (
            ("quantize_skip", opts.quantize_skip, ()),
            ("quantize_group_size", opts.quantize_group_size, DEFAULT_QUANTIZE_GROUP_SIZE),
            ("min_cosine", opts.min_cosine, None),
            ("smooth_alpha", opts.smooth_alpha, None),
        ):
            if value != unset:
                raise refuse(f"{spell(name)} is for {spell('quantize')} int8 or int4")
    group_size = opts.quantize_group_size
    if (
        isinstance(group_size, bool)
        or not isinstance(group_size, int)
        or group_size % 32
        or (group_size <= 0)
    ):
        raise refuse(f"{spell('quantize_group_size')} must be a positive multiple of 32")
    if opts.min_cosine is not None and not (
        isinstance(opts.min_cosine, int | float) and 0 < opts.min_cosine <= 1
    ):
        raise refuse(f"{spell('min_cosine')} must be in (0, 1], got {opts.min_cosine!r}")
    alpha = opts.smooth_alpha
    if alpha is not None and (
        isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1
    ):
        raise refuse(f"{spell('smooth_alpha')} must be in [0, 1], got {alpha!r}")
    return dataclasses.replace(
        opts,
        mode=opts.mode or DEFAULT_MODE,
        float_linear=opts.float_linear or DEFAULT_FLOAT_LINEAR[opts.device],
    )
