"""Export a model that uses my_ops into an AOTInductor package.

Stages: torch.export -> aoti_compile_and_package -> verify (aoti_load_package
against eager at batch 1, 7 and the max batch). Only a verified package is
published.

Outputs (in --out, default $BUILD_WORKSPACE_DIRECTORY/out or ./out):
  model.pt2            AOTInductor package
  sample_input.pt      torch.save'd tuple of input tensors
  expected_output.pt   torch.save'd tuple of eager outputs for sample_input.pt

The folder is replaced as a whole: files are produced in a temporary folder
beside it and renamed into place, so a failed run leaves the old output (or
nothing) and no partial files.

Custom models: --model package.module:factory, see deploy/default_model.py for
the factory protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

DEFAULT_MODEL = "default_model:make_model"
VERIFY_BATCHES = (1, 7)


class ExportError(Exception):
    """A failure with a message fit for one line on stderr."""


def _die(msg: str, code: int = 1) -> NoReturn:
    print(f"export: error: {msg}", file=sys.stderr)
    sys.exit(code)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _default_out() -> str:
    # `bazel run` executes inside the runfiles tree; BUILD_WORKSPACE_DIRECTORY
    # points back at the source checkout, which is where users expect out/.
    base = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return os.path.join(base, "out")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, like every other error of this tool.
        _die(f"{message} (see --help)", 2)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="export",
        description="Export a model using my_ops to an AOTInductor package (model.pt2), "
        "verify it against eager, and write sample_input.pt / expected_output.pt.",
        epilog="Factory protocol: see deploy/default_model.py. Exit status 0 on success, "
        "2 on bad usage, 1 on any other failure (one line on stderr).",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default: %(default)s -> $BUILD_WORKSPACE_DIRECTORY/out, else ./out)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="target device (cuda needs a GPU at export time)",
    )
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="MODULE:FACTORY",
        help="factory returning the model spec (default: the built-in block)",
    )
    p.add_argument(
        "--isa",
        choices=("portable", "native"),
        default="portable",
        help="CPU instruction set: portable = x86-64-v3 (AVX2), native = this "
        "machine (default: portable)",
    )
    p.add_argument(
        "--max-batch",
        type=int,
        default=16,
        help="largest batch size the package accepts (default: 16)",
    )
    args = p.parse_args(argv)
    if args.max_batch < 1:
        p.error("--max-batch must be >= 1")
    out = args.out or _default_out()
    # Under `bazel run` the cwd is the runfiles tree; relative paths the user
    # typed mean their own working directory.
    args.out = os.path.abspath(os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), out))
    return args


def _cuda_home() -> str | None:
    """Locate the CUDA toolkit for Inductor's nvcc/host-compile steps.

    torch derives CUDA_HOME from the nvcc on PATH; a wrapper script such as
    /usr/local/bin/nvcc makes that /usr/local, which has no CUDA headers.
    """
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env:
        return env
    candidates = ["/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for home in candidates:
        if os.path.exists(os.path.join(home, "include", "cuda_runtime.h")):
            return os.path.realpath(home)
    return None


def _setup_environment(device: str) -> None:
    import logging

    if device == "cuda":
        home = _cuda_home()
        if home:
            os.environ["CUDA_HOME"] = home
    else:
        # A CPU export never uses CUDA_HOME; torch still warns when it guesses
        # one on a host without a GPU, which is just noise here.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # Exporting with --isa portable on a newer CPU makes the loader warn that
    # the package's ISA differs from this host's; that is the point of it.
    logging.getLogger("torch.export.pt2_archive._package").setLevel(logging.ERROR)


def _check_device(device: str) -> None:
    if device != "cuda":
        return
    import torch

    # Inductor benchmarks and compiles kernels on the GPU, so a CUDA package
    # cannot be produced on a CPU-only host; fail before spending minutes.
    if not torch.cuda.is_available():
        raise ExportError("--device cuda needs a visible CUDA GPU at export time; none found")


def _load_factory(spec: str) -> Callable[..., Any]:
    mod_name, sep, attr = spec.partition(":")
    if (
        not sep
        or not mod_name
        or not attr
        or not all(part.isidentifier() for part in mod_name.split(".") + attr.split("."))
    ):
        raise ExportError(f"--model must look like package.module:factory, got {spec!r}")
    # Let `--model mymodel:make` find mymodel.py in the user's directory, as
    # `python -m` would; appended so it cannot shadow installed packages.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY") or os.getcwd()
    if user_cwd not in sys.path:
        sys.path.append(user_cwd)
    if spec == DEFAULT_MODEL:
        # Import the default model by path so it works from the runfiles tree
        # and from a plain checkout without deploy/ on sys.path.
        here = os.path.dirname(os.path.abspath(__file__))
        if here not in sys.path:
            sys.path.insert(0, here)
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as e:  # noqa: BLE001 - any import failure is a user error here
        raise ExportError(f"cannot import {mod_name!r}: {_first_line(e)}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ExportError(f"{mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ExportError(f"{spec!r} is not callable (got {type(obj).__name__})")
    return obj


def _make_spec(factory: Callable[..., Any], max_batch: int) -> Any:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    try:
        spec = factory(max_batch=max_batch) if "max_batch" in params else factory()
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"model factory failed: {_first_line(e)}") from e
    for name in ("module", "example_inputs", "dynamic_shapes"):
        if not hasattr(spec, name):
            raise ExportError(f"model factory result has no {name!r} attribute")
    return spec


@contextlib.contextmanager
def _stage(name: str, times: dict[str, float]) -> Iterator[None]:
    # One line per stage: the name now (compile can take a minute), the
    # duration when it ends.
    print(f"{name:<8}... ", end="", flush=True)
    t0 = time.perf_counter()
    try:
        yield
    except BaseException:
        print("failed", flush=True)
        raise
    times[name] = time.perf_counter() - t0
    print(f"{times[name]:.1f}s", flush=True)


def _private_tmp(work: str) -> str:
    """Route every temporary file Inductor and the package loader make into work/.

    Inductor's cache defaults to $TMPDIR/torchinductor_$USER and
    aoti_load_package extracts into $TMPDIR/aotinductor_*; both would
    otherwise outlive the run in /tmp. Must run before torch._inductor reads them.
    """
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    os.environ["TMPDIR"] = tmp
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    tempfile.tempdir = tmp
    return tmp


def _write_cxx_wrapper(tmp: str) -> str:
    """Compiler wrapper that marks the AOTI shared object's stack non-executable.

    Inductor emits CPU constants as a .S file without a .note.GNU-stack
    section, so the linked .so asks for an executable stack and glibc >= 2.41
    refuses to dlopen it. --noexecstack on every assembler run and -z
    noexecstack on the shared link fixes that without the much slower
    C++-array constant path (use_consts_asm_build=False). The linker flag must
    not go on the precompiled-header step, which is not a link.
    """
    real = os.environ.get("CXX") or "g++"
    real_path = shutil.which(real)
    if real_path is None:
        raise ExportError(f"C++ compiler {real!r} not found (set CXX)")
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    # Keep the g++/clang++ name: Inductor picks flags by the compiler's name.
    path = os.path.join(bindir, os.path.basename(real_path))
    with open(path, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "link=\n"
            'for a in "$@"; do [ "$a" = -shared ] && link="-Wl,-z,noexecstack"; done\n'
            f'exec "{real_path}" "$@" -Wa,--noexecstack $link\n'
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# c10::toString(ScalarType) names, which the C++ loader compares against.
_C10_DTYPE_NAMES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def input_signature(ep: Any) -> str | None:
    """Describe the accepted inputs for the C++ loader's validation.

    Format: "Dtype:d0,d1,...;..." with a dim either "N" or "LO-HI" ("inf" when
    unbounded). Returns None when an input is not a plain tensor, in which case
    the loader falls back to AOTI's runtime checks.
    """
    import torch

    user_inputs = set(ep.graph_signature.user_inputs)
    parts = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        dtype = _C10_DTYPE_NAMES.get(str(val.dtype).removeprefix("torch."))
        if dtype is None:
            return None
        dims = []
        for d in val.shape:
            if isinstance(d, int):
                dims.append(str(d))
                continue
            vr = ep.range_constraints.get(d.node.expr)
            if vr is None:
                return None
            lo = int(vr.lower)
            hi = "inf" if not vr.upper.is_finite else str(int(vr.upper))
            dims.append(f"{lo}-{hi}")
        parts.append(f"{dtype}:{','.join(dims)}")
    return ";".join(parts)


def _inductor_options(isa: str, cxx: str, signature: str | None) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "cpp.cxx": (None, cxx),
        # The loader turns on AOTI_RUNTIME_CHECK_INPUTS; without this those
        # checks reject size-1 dims even though the model handles them (the
        # compiler assumes dynamic sizes are >= 2).
        "aot_inductor.check_lowerbound": False,
    }
    if signature is not None:
        opts["aot_inductor.metadata"] = {"my_ops.inputs": signature}
    if isa == "portable":
        # x86-64-v3 = AVX2/FMA: runs on any x86 CPU from the last ~10 years,
        # unlike the default which targets the build machine (often AVX-512).
        opts["cpp.march"] = "x86-64-v3"
        opts["cpp.simdlen"] = 256
    else:
        opts["cpp.march"] = "native"
    return opts


def _batch_inputs(spec: Any, batch: int) -> tuple[Any, ...]:
    import torch

    make = getattr(spec, "make_inputs", None)
    if make is not None:
        return tuple(make(batch))
    g = torch.Generator().manual_seed(batch)
    out = []
    for t in spec.example_inputs:
        shape = (batch, *t.shape[1:])
        if t.is_floating_point():
            out.append(torch.randn(shape, generator=g, dtype=t.dtype))
        else:
            out.append(t[:1].expand(shape).clone())
    return tuple(out)


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def _to(xs: tuple[Any, ...], device: str) -> tuple[Any, ...]:
    return tuple(x.to(device) for x in xs)


def run(args: argparse.Namespace) -> dict[str, float]:
    _setup_environment(args.device)
    _check_device(args.device)
    import torch

    factory = _load_factory(args.model)

    parent = os.path.dirname(args.out)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(args.out)}.export-", dir=parent)
    except OSError as e:
        raise ExportError(f"cannot write output folder {args.out}: {e.strerror}") from e
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        shutil.rmtree(work, ignore_errors=True)
        raise ExportError(f"--out {args.out} exists and is not a folder")

    times: dict[str, float] = {}
    try:
        tmp = _private_tmp(work)
        stage = os.path.join(work, "stage")
        os.makedirs(stage)

        spec = _make_spec(factory, args.max_batch)
        max_batch = int(getattr(spec, "max_batch", args.max_batch) or args.max_batch)
        module = spec.module.to(args.device).eval()
        example = _to(tuple(spec.example_inputs), args.device)

        with _stage("export", times):
            try:
                with torch.no_grad():
                    ep = torch.export.export(
                        module, example, dynamic_shapes=spec.dynamic_shapes, strict=False
                    )
            except Exception as e:  # noqa: BLE001
                raise ExportError(
                    f"torch.export failed: {_first_line(e)} (hint: the model's shape logic must "
                    "hold over the whole dynamic_shapes range, and every custom op needs a "
                    "fake implementation)"
                ) from e

        package = os.path.join(stage, "model.pt2")
        with _stage("compile", times):
            cxx = _write_cxx_wrapper(tmp)
            try:
                torch._inductor.aoti_compile_and_package(
                    ep,
                    package_path=package,
                    inductor_configs=_inductor_options(args.isa, cxx, input_signature(ep)),
                )
            except Exception as e:  # noqa: BLE001
                raise ExportError(f"AOTInductor compile failed: {_first_line(e)}") from e

        with _stage("verify", times):
            sample = _verify(spec, module, package, max_batch, args.device)

        sample_cpu = _to(sample, "cpu")
        with torch.no_grad():
            expected = _to(_as_tuple(module(*sample)), "cpu")
        torch.save(sample_cpu, os.path.join(stage, "sample_input.pt"))
        torch.save(expected, os.path.join(stage, "expected_output.pt"))

        _publish(stage, args.out, work)
        return times
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _verify(spec: Any, module: Any, package: str, max_batch: int, device: str) -> tuple[Any, ...]:
    import torch

    atol = float(getattr(spec, "atol", 1e-4))
    rtol = float(getattr(spec, "rtol", 1e-4))
    try:
        compiled = torch._inductor.aoti_load_package(package)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot load the compiled package: {_first_line(e)}") from e
    sample: tuple[Any, ...] = ()
    for batch in sorted({*VERIFY_BATCHES, max_batch}):
        if batch > max_batch:
            continue
        inputs = _to(_batch_inputs(spec, batch), device)
        with torch.no_grad():
            want = _as_tuple(module(*inputs))
            try:
                got = _as_tuple(compiled(*inputs))
            except Exception as e:  # noqa: BLE001
                raise ExportError(f"package failed at batch {batch}: {_first_line(e)}") from e
        if len(got) != len(want):
            raise ExportError(
                f"batch {batch}: package returned {len(got)} outputs, eager {len(want)}"
            )
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if g.shape != w.shape or not torch.allclose(g, w, atol=atol, rtol=rtol):
                diff = (g - w).abs().max().item() if g.shape == w.shape else float("nan")
                raise ExportError(
                    f"batch {batch}: output {i} differs from eager (shape {tuple(g.shape)} vs "
                    f"{tuple(w.shape)}, max abs diff {diff:.3g})"
                )
        if batch == 1:
            # Batch 1 is the edge use case, so it becomes the bundled sample.
            sample = inputs
    return sample


def _publish(stage: str, out: str, work: str) -> None:
    # Swap folders with renames (same filesystem, since work/ is beside out)
    # so readers never see a half-written output folder.
    old = os.path.join(work, "old")
    try:
        if os.path.isdir(out):
            os.rename(out, old)
        os.rename(stage, out)
    except OSError as e:
        if os.path.isdir(old) and not os.path.exists(out):
            os.rename(old, out)
        raise ExportError(f"cannot write output folder {out}: {e.strerror}") from e


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    t0 = time.perf_counter()
    try:
        times = run(args)
    except ExportError as e:
        _die(str(e))
    except KeyboardInterrupt:
        _die("interrupted", 130)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("MY_OPS_EXPORT_TRACEBACK"):
            raise
        _die(f"unexpected {_first_line(e)} (set MY_OPS_EXPORT_TRACEBACK=1 for the traceback)")
    total = time.perf_counter() - t0
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in times.items())
    print(f"exported in {total:.1f}s ({parts})")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
