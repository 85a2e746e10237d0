"""my_ops.deploy.export: the exporter as a Python function, for a notebook or a training script.

It runs the export the command line runs (pipeline.run), in this process: the same stages,
checks, cache and output folder, with a module and its inputs instead of a factory's name.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .cache import DEFAULT_MAX_MB
from .cache import default_dir as default_cache_dir
from .cross import HOST_TARGET
from .errors import EXIT_USAGE, ExportError
from .options import DEFAULT_MAX_BATCH, DEFAULT_QUANTIZE_GROUP_SIZE, CacheOptions, Options
from .pipeline import run

# The parameters below by the Options field each sets, where the names differ.
_PARAMETERS = {"inductor_option": "inductor_options", "weights_only": "base"}


def _parameter(field: str) -> str:
    return _PARAMETERS.get(field, field)


@dataclasses.dataclass(frozen=True)
class Exported:
    """What an export wrote: the folder, and the seconds each stage took."""

    out: Path
    times: Mapping[str, float]

    @property
    def package(self) -> Path:
        """model.pt2, the AOTInductor package; absent from a weights-file export."""
        return self.out / "model.pt2"

    @property
    def manifest(self) -> Path:
        """manifest.json, what the C++ loader checks the package and the op library against."""
        return self.out / "manifest.json"


def export(
    model: Any,
    example_inputs: Sequence[Any] | None,
    out: str | os.PathLike[str],
    *,
    dynamic_shapes: Any = None,
    make_inputs: Callable[[int], Sequence[Any]] | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    device: str = "cpu",
    target: str = HOST_TARGET,
    isa: str = "portable",
    mode: str | None = None,
    inductor_options: Mapping[str, Any] | None = None,
    c_shims: bool = True,
    weights_inside: bool = False,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_max_mb: int = DEFAULT_MAX_MB,
    signing_key: str | os.PathLike[str] | None = None,
    base: str | os.PathLike[str] | None = None,
    profile_compile: bool = False,
    quantize: str | None = None,
    quantize_skip: Sequence[str] = (),
    quantize_group_size: int = DEFAULT_QUANTIZE_GROUP_SIZE,
    min_cosine: float | None = None,
    float_linear: str | None = None,
    smooth_alpha: float | None = None,
) -> Exported:
    """Export `model` (a torch.nn.Module that may call my_ops) to an AOTInductor package in
    `out`, verified against the model in eager, as `my-ops-export` does.

    `example_inputs` are the positional inputs torch.export traces with (None for a
    my_ops.llama.LlamaDecoder, whose own decoder_spec gives them, its dynamic shapes, and
    prompts of 1, 7 and its cache's length to verify with: the package keeps its KV cache
    between runs and generates tokens); `dynamic_shapes` is
    torch.export's argument of that name (None: static shapes). The package is verified at
    batch 1, 7 and `max_batch` with inputs from `make_inputs(batch)`, else random ones shaped
    like `example_inputs` with dim 0 set to the batch, within `atol`/`rtol`. `out` is replaced
    as a whole and must be new, empty or a previous export; nothing is touched otherwise.
    `device`, `target`, `isa`, `mode`, `c_shims`, `weights_inside`, `cache_dir`,
    `cache_max_mb`, `signing_key` and `profile_compile` are the flags of the same names
    (`my-ops-export --help`); `cache` False is --no-cache; `inductor_options` maps
    torch._inductor.config keys to Python literals. With `base` (a previous export's folder),
    only a weights file for its package is written (--weights-only). `quantize` ("int8" or
    "int4"), `quantize_skip` and `min_cosine` are --quantize, --quantize-skip and
    --min-cosine; `quantize_group_size` is int4's group size (a multiple of 32). The model
    itself is left float: the export quantizes a copy. `float_linear` ("packed" or
    "inductor") is --float-linear; `smooth_alpha` is --smooth-alpha.

    The model's training flag, the process's environment variables, temporary folder,
    loggers and Inductor settings are as they were on return; a `device="cuda"` export moves
    the model to the GPU. Raises ExportError with a one-line message naming the argument or
    file at fault; its `code` is the command line's exit status for the same failure.
    """
    import torch

    def refuse(message: str) -> ExportError:
        return ExportError(message, EXIT_USAGE)

    if not isinstance(model, torch.nn.Module):
        raise refuse(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if example_inputs is None:
        from my_ops.llama import LlamaDecoder, decoder_spec

        if not isinstance(model, LlamaDecoder):
            raise refuse("example_inputs is None, which only a my_ops.llama.LlamaDecoder allows")
        decoder = decoder_spec(model)
        example_inputs, dynamic_shapes = decoder.example_inputs, decoder.dynamic_shapes
        make_inputs, max_batch = decoder.make_inputs, decoder.max_batch
    if isinstance(example_inputs, (str, bytes)) or not isinstance(example_inputs, Sequence):
        raise refuse(
            f"example_inputs must be a tuple of the model's positional inputs, got "
            f"{type(example_inputs).__name__}"
        )
    if make_inputs is not None and not callable(make_inputs):
        raise refuse(f"make_inputs must be callable, got {type(make_inputs).__name__}")
    for name, value in (("atol", atol), ("rtol", rtol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise refuse(f"{name} must be a number >= 0, got {value!r}")
    if not cache and cache_dir is not None:
        raise refuse("cache=False and cache_dir contradict each other")
    if isinstance(cache_max_mb, bool) or not isinstance(cache_max_mb, int):
        raise refuse(f"cache_max_mb must be an int, got {cache_max_mb!r}")
    options = Options(
        out=_path("out", out),
        device=device,
        model=type(model).__name__,
        target=target,
        isa=isa,
        max_batch=max_batch,
        mode=mode,
        inductor_options=_inductor_items(inductor_options),
        c_shims=bool(c_shims),
        weights_inside=bool(weights_inside),
        cache=(
            CacheOptions(
                folder=_path("cache_dir", cache_dir or default_cache_dir()),
                given=cache_dir is not None,
                max_bytes=cache_max_mb << 20,
            )
            if cache
            else None
        ),
        profile_compile=bool(profile_compile),
        signing_key=_path("signing_key", signing_key) if signing_key is not None else None,
        weights_only=base is not None,
        base=_path("base", base) if base is not None else None,
        quantize=quantize,
        quantize_skip=_patterns(quantize_skip),
        quantize_group_size=quantize_group_size,
        min_cosine=min_cosine,
        float_linear=float_linear,
        smooth_alpha=smooth_alpha,
    )
    spec = types.SimpleNamespace(
        module=model,
        example_inputs=tuple(example_inputs),
        dynamic_shapes=dynamic_shapes,
        make_inputs=make_inputs,
        max_batch=max_batch,
        atol=float(atol),
        rtol=float(rtol),
    )
    times = run(options, lambda _max_batch: spec, _parameter)
    return Exported(out=Path(options.out), times=dict(times))


def _patterns(value: Any) -> tuple[str, ...]:
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(p, str) for p in value)
    ):
        raise ExportError(
            f"quantize_skip must be a sequence of fnmatch patterns (str), got {value!r}",
            EXIT_USAGE,
        )
    return tuple(value)


def _path(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ExportError(f"{name} must be a non-empty path, got {value!r}", EXIT_USAGE)
    return os.path.abspath(os.fspath(value))


def _inductor_items(options: Mapping[str, Any] | None) -> tuple[str, ...]:
    """`inductor_options` as the KEY=VALUE items the command line passes."""
    if options is None:
        return ()
    if not isinstance(options, Mapping):
        raise ExportError(
            f"inductor_options must be a mapping, got {type(options).__name__}", EXIT_USAGE
        )
    items = []
    for key, value in options.items():
        text = repr(value)
        try:
            literal = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            literal = dataclasses.MISSING
        if not isinstance(key, str) or literal != value or type(literal) is not type(value):
            raise ExportError(
                f"inductor_options[{key!r}] must be a Python literal (a bool, number, string, "
                f"or a tuple, list or dict of them), got {value!r}",
                EXIT_USAGE,
            )
        items.append(f"{key}={text}")
    return tuple(items)
