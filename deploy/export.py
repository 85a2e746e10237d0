"""Export a model that uses my_ops into an AOTInductor package.

Stages: torch.export -> aoti_compile_and_package -> verify (aoti_load_package
against eager at batch 1, 7 and the max batch). Only a verified package is
published.

Outputs (in --out, default $BUILD_WORKSPACE_DIRECTORY/out or ./out):
  model.pt2            AOTInductor package
  sample_input.pt      torch.save'd tuple of input tensors
  expected_output.pt   torch.save'd tuple of eager outputs for sample_input.pt
  manifest.json        sha256 of model.pt2 and of the libmy_ops.so it was built
                       with, torch version, CPU instruction set, device; the
                       C++ loader refuses a package that does not match it
  manifest.sig         with --signing-key: Ed25519 signature of manifest.json,
                       which the loader requires with --public-key

Keys: --generate-key DIR writes DIR/signing_key.pem (private, mode 0600) and
DIR/public_key.pem. --signing-key also takes a key from `openssl genpkey
-algorithm ed25519` or a raw 32-byte seed.

The folder is replaced as a whole: files are produced in a temporary folder
beside it and renamed into place, so a failed run leaves the old output (or
nothing) and no partial files.

Custom models: --model package.module:factory, see deploy/default_model.py for
the factory protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import inspect
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

DEFAULT_MODEL = "default_model:make_model"
VERIFY_BATCHES = (1, 7)
# The C++ loader reads exactly this format; change both together.
MANIFEST_FORMAT = "my_ops.manifest/1"
# What --isa means as a -march value, recorded in the manifest.
_MARCH = {"portable": "x86-64-v3", "native": "native"}


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
        "verify it against eager, and write sample_input.pt / expected_output.pt and "
        "manifest.json (sha256 sums the C++ loader checks).",
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
    args = p.parse_args(argv)
    if args.max_batch < 1:
        p.error("--max-batch must be >= 1")
    out = args.out or _default_out()
    # Under `bazel run` the cwd is the runfiles tree; relative paths the user
    # typed mean their own working directory.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    args.out = os.path.abspath(os.path.join(user_cwd, out))
    for name in ("signing_key", "generate_key"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(os.path.join(user_cwd, getattr(args, name))))
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


# Written by //tools/cc:cxx_toolchain: the compiler and sysroot flags of the
# C++ toolchain that built the op library and the loader.
_TOOLCHAIN_JSON = "_main/tools/cc/cxx_toolchain.json"


def _runfiles_roots() -> list[str]:
    roots = [os.environ.get("RUNFILES_DIR", "")]
    # <runfiles>/_main/deploy/export.py, when started without the Bazel stub.
    here = os.path.dirname(os.path.abspath(__file__))
    roots.append(os.path.dirname(os.path.dirname(here)))
    return [r for r in roots if r]


def _toolchain_compiler() -> tuple[str, list[str], list[str], str]:
    """The compiler for Inductor: (path, compile flags, link flags, description).

    $CXX, when set, wins and is used as is (for debugging: it may link against
    the build machine's glibc). Otherwise the Bazel C++ toolchain's compiler
    and sysroot, so the AOTI .so has the same glibc floor as the op library.
    """
    if os.environ.get("CXX"):
        return os.environ["CXX"], [], [], f"{os.environ['CXX']} (from $CXX, no sysroot)"
    for root in _runfiles_roots():
        path = os.path.join(root, _TOOLCHAIN_JSON)
        if os.path.isfile(path):
            with open(path) as f:
                info = json.load(f)

            def resolve(flags: list[str], root: str = root) -> list[str]:
                return [flag.replace("%runfiles%", root) for flag in flags]

            sysroot = info["sysroot"]
            what = "with the sysroot" if sysroot else "host headers and libraries"
            return (
                info["compiler"],
                resolve(info["compile_flags"]),
                resolve(info["link_flags"]),
                f"{info['compiler']} ({what})",
            )
    return "g++", [], [], "g++ from PATH (no Bazel toolchain description found)"


def _real_cxx() -> str:
    real = _toolchain_compiler()[0]
    real_path = shutil.which(real)
    if real_path is None:
        raise ExportError(f"C++ compiler {real!r} not found (set CXX)")
    return real_path


def _write_cxx_wrapper(tmp: str) -> tuple[str, str]:
    """Compiler wrapper for Inductor: the toolchain's sysroot, and a non-executable stack.

    Returns the wrapper's path and a description of the compiler behind it.

    Inductor emits CPU constants as a .S file without a .note.GNU-stack
    section, so the linked .so asks for an executable stack and glibc >= 2.41
    refuses to dlopen it. --noexecstack on every assembler run and -z
    noexecstack on the shared link fixes that without the much slower
    C++-array constant path (use_consts_asm_build=False). The linker flag must
    not go on the precompiled-header step, which is not a link.
    """
    _, compile_flags, link_flags, what = _toolchain_compiler()
    real_path = _real_cxx()
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    # Keep the g++/clang++ name: Inductor picks flags by the compiler's name.
    name = os.path.basename(real_path)
    name = "g++" if name.startswith("g++") else "clang++" if name.startswith("clang++") else name
    path = os.path.join(bindir, name)
    before = " ".join(shlex.quote(f) for f in compile_flags + link_flags)
    with open(path, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "link=\n"
            'for a in "$@"; do [ "$a" = -shared ] && link="-Wl,-z,noexecstack"; done\n'
            f'exec {shlex.quote(real_path)} {before} "$@" -Wa,--noexecstack $link\n'
        )
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path, what


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
    opts["cpp.march"] = _MARCH[isa]
    if isa == "portable":
        # x86-64-v3 = AVX2/FMA: runs on any x86 CPU from the last ~10 years,
        # unlike the default which targets the build machine (often AVX-512).
        opts["cpp.simdlen"] = 256
    return opts


# Compiler macro -> the name the loader checks with __builtin_cpu_supports.
# Only extensions a compiler emits for C++ code; the loader knows each one.
_CPU_FEATURE_MACROS = {
    "__SSE3__": "sse3",
    "__SSSE3__": "ssse3",
    "__SSE4_1__": "sse4.1",
    "__SSE4_2__": "sse4.2",
    "__POPCNT__": "popcnt",
    "__AVX__": "avx",
    "__AVX2__": "avx2",
    "__FMA__": "fma",
    "__F16C__": "f16c",
    "__BMI__": "bmi",
    "__BMI2__": "bmi2",
    "__LZCNT__": "lzcnt",
    "__MOVBE__": "movbe",
    "__AVX512F__": "avx512f",
    "__AVX512BW__": "avx512bw",
    "__AVX512CD__": "avx512cd",
    "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl",
    "__AVX512VNNI__": "avx512vnni",
    "__AVX512BF16__": "avx512bf16",
    "__AVX512FP16__": "avx512fp16",
    "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi",
    "__AVX512VBMI2__": "avx512vbmi2",
    "__AVX512BITALG__": "avx512bitalg",
    "__AVX512VPOPCNTDQ__": "avx512vpopcntdq",
    "__AVXVNNI__": "avxvnni",
    "__GFNI__": "gfni",
    "__VAES__": "vaes",
    "__VPCLMULQDQ__": "vpclmulqdq",
    "__AMX_TILE__": "amx-tile",
    "__AMX_INT8__": "amx-int8",
    "__AMX_BF16__": "amx-bf16",
}


def cpu_features(cxx: str, march: str) -> list[str]:
    """The instruction-set extensions `cxx -march=MARCH` may emit, by loader name.

    For native that is this host's CPU as the compiler sees it, which is what
    the package then needs wherever it runs.
    """
    try:
        proc = subprocess.run(
            [cxx, f"-march={march}", "-dM", "-E", "-x", "c++", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        raise ExportError(f"cannot ask {cxx} what -march={march} enables: {_first_line(e)}") from e
    defined = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}
    return sorted(name for macro, name in _CPU_FEATURE_MACROS.items() if macro in defined)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_manifest(package: str, op_libraries: Sequence[str], isa: str, device: str) -> bytes:
    """manifest.json for a package: what the C++ loader checks before loading it."""
    import torch

    march = _MARCH[isa]
    manifest = {
        "format": MANIFEST_FORMAT,
        "package": {"file": os.path.basename(package), "sha256": sha256_file(package)},
        "op_libraries": [
            {"file": os.path.basename(lib), "sha256": sha256_file(lib)} for lib in op_libraries
        ],
        "torch_version": torch.__version__,
        # A -march level the loader checks as a whole, or "native"; in both
        # cases cpu_features lists every extension the compiler could use.
        "isa": march,
        "cpu_features": cpu_features(_real_cxx(), march),
        "device": device,
    }
    return (json.dumps(manifest, indent=2) + "\n").encode()


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


def generate_key(folder: str) -> tuple[str, str]:
    """Write a new Ed25519 key pair as PEM; never overwrites an existing key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    paths = (os.path.join(folder, "signing_key.pem"), os.path.join(folder, "public_key.pem"))
    try:
        os.makedirs(folder, exist_ok=True)
        for path, data, mode in ((paths[0], private, 0o600), (paths[1], public, 0o644)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
    except FileExistsError as e:
        raise ExportError(f"{e.filename} exists; not overwriting a key") from e
    except OSError as e:
        raise ExportError(f"cannot write a key in {folder}: {e.strerror}") from e
    return paths


def load_signing_key(path: str) -> Any:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read --signing-key {path}: {e.strerror}") from e
    if len(data) == 32:
        return Ed25519PrivateKey.from_private_bytes(data)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise ExportError(
            f"--signing-key {path} is neither an unencrypted PEM private key nor a 32-byte seed"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise ExportError(f"--signing-key {path} is not an Ed25519 key")
    return key


def run(args: argparse.Namespace) -> dict[str, float]:
    # A bad key must fail now, not after minutes of compiling.
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
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
        cxx, compiler = _write_cxx_wrapper(tmp)
        print(f"compiler: {compiler}", flush=True)
        with _stage("compile", times):
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
        _write_manifest(stage, package, args, signing_key)

        _publish(stage, args.out, work)
        return times
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_manifest(
    stage: str, package: str, args: argparse.Namespace, signing_key: Any | None
) -> None:
    import my_ops

    # The library this process loaded (a no-op when the model already did):
    # the package was compiled and verified against exactly that file.
    try:
        library = my_ops.load_library()
    except ImportError as e:
        raise ExportError(f"cannot find the op library for manifest.json: {_first_line(e)}") from e
    manifest = make_manifest(package, [library], args.isa, args.device)
    with open(os.path.join(stage, "manifest.json"), "wb") as f:
        f.write(manifest)
    if signing_key is not None:
        # Over the file's exact bytes: the loader checks them before parsing.
        with open(os.path.join(stage, "manifest.sig"), "wb") as f:
            f.write(signing_key.sign(manifest))


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
    if args.generate_key:
        try:
            for path in generate_key(args.generate_key):
                print(path)
        except ExportError as e:
            _die(str(e))
        return 0
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
