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
DIR/public_key.pem, or neither when one of them exists. --signing-key also
takes a key from `openssl genpkey -algorithm ed25519` or a raw 32-byte seed.

--out is replaced as a whole, so it must be new, empty, or a previous export:
nothing but the files above, with a manifest.json written by this tool. Any
other folder, a file or a symbolic link is refused (exit 3) before the export
starts and again just before the swap, and nothing is touched. Files are
produced in a temporary folder beside --out and renamed into place; the
previous export is deleted only once the new one is there, and a failure or
Ctrl-C restores it. A failed run leaves the old output (or nothing) and no
partial files.

CUDA packages (--device cuda) embed their kernels in the package's shared
library as fatbins: SASS and PTX for the export GPU's architecture (newer GPUs
compile the PTX at load time), plus SASS for each TORCH_CUDA_ARCH_LIST entry
above it; older architectures cannot be served. Export on the oldest GPU
generation the package must serve (for example on an A100 with
TORCH_CUDA_ARCH_LIST="8.0;9.0" for sm_80 and sm_90).

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
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

DEFAULT_MODEL = "default_model:make_model"
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_OUT_REFUSED = 3
EXIT_INTERRUPTED = 130
VERIFY_BATCHES = (1, 7)
# The C++ loader reads exactly this format; change both together.
MANIFEST_FORMAT = "my_ops.manifest/1"
# What --isa means as a -march value, recorded in the manifest.
_MARCH = {"portable": "x86-64-v3", "native": "native"}
# Everything an export writes into --out (manifest.sig only when signed).
EXPORT_FILES = ("model.pt2", "sample_input.pt", "expected_output.pt", "manifest.json")
OPTIONAL_EXPORT_FILES = ("manifest.sig",)


class ExportError(Exception):
    """A failure with a message fit for one line on stderr, and its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def _die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
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
        _die(f"{message} (see --help)", EXIT_USAGE)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(
        prog="export",
        description="Export a model using my_ops to an AOTInductor package (model.pt2), "
        "verify it against eager, and write sample_input.pt / expected_output.pt and "
        "manifest.json (sha256 sums the C++ loader checks).",
        epilog="Factory protocol: see deploy/default_model.py. Exit status 0 on success, "
        "2 on bad usage, 3 when --out may not be replaced (nothing is touched), 130 when "
        "interrupted, 1 on any other failure (one line on stderr).",
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
        choices=("cpu", "cuda"),
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


def _inductor_options(device: str, isa: str, cxx: str, signature: str | None) -> dict[str, Any]:
    """Every Inductor config the export sets, as aoti_compile_and_package takes them."""
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
    if device == "cuda":
        # Otherwise AOTI writes each kernel's cubin beside the model's .so and
        # loads it lazily from the package's extraction folder at first call,
        # a file that can be missing or swapped by then.
        opts["aot_inductor.embed_kernel_binary"] = True
        # Fatbins instead of cubins for the export GPU alone: PTX that newer
        # GPUs compile at load time, plus SASS for TORCH_CUDA_ARCH_LIST.
        opts["aot_inductor.emit_multi_arch_kernel"] = True
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
    """Write a new Ed25519 key pair as PEM; never overwrites an existing key.

    Both files or neither: a private key whose public key was never written
    signs manifests nobody can check.
    """
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
    for path in paths:
        if os.path.lexists(path):
            raise ExportError(f"{path} exists; not overwriting a key")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create --generate-key folder {folder}: {e.strerror}") from e
    written: list[str] = []
    try:
        for path, data, mode in ((paths[0], private, 0o600), (paths[1], public, 0o644)):
            # O_EXCL: a key that appeared since the check above is not ours.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
    except BaseException as e:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if isinstance(e, FileExistsError):
            raise ExportError(f"{e.filename} exists; not overwriting a key") from e
        if isinstance(e, OSError):
            raise ExportError(f"cannot write a key in {folder}: {e.strerror}") from e
        raise
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
    # A folder that may not be replaced, or a bad key, must fail now, not
    # after minutes of compiling.
    _check_out(args.out)
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
    _setup_environment(args.device)
    _check_device(args.device)
    factory = _load_factory(args.model)
    import torch

    parent = os.path.dirname(args.out)
    made = _missing_folders(parent)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(args.out)}.export-", dir=parent)
    except OSError as e:
        _remove_empty(made)
        raise ExportError(f"cannot write output folder {args.out}: {e.strerror}") from e

    times: dict[str, float] = {}
    published = False
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
                    inductor_configs=_inductor_options(
                        args.device, args.isa, cxx, input_signature(ep)
                    ),
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
        published = True
        return times
    finally:
        _remove_work(work)
        if not published:
            _remove_empty(made)


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


def _is_export_manifest(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            # A manifest is a few hundred bytes; a huge file is not one.
            data = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT


def _check_out(path: str, shown: str | None = None) -> None:
    """Refuse an output folder the export may not replace; reads, never writes.

    Replacing --out deletes what is in it, so only a missing or empty folder,
    or a previous export (this tool's manifest.json and nothing but export
    files), qualifies. `shown` is the name to report when `path` is where
    --out has been moved to.
    """
    shown = shown or path
    if os.path.islink(path):
        raise ExportError(
            f"--out {shown} is a symbolic link; not replacing it (give the folder itself)",
            EXIT_OUT_REFUSED,
        )
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ExportError(
            f"--out {shown} exists and is not a folder; not replacing it", EXIT_OUT_REFUSED
        )
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise ExportError(f"cannot read --out {shown}: {e.strerror}", EXIT_OUT_REFUSED) from e
    if not names:
        return
    allowed = {*EXPORT_FILES, *OPTIONAL_EXPORT_FILES}
    foreign = [
        name
        for name in names
        if name not in allowed
        # A folder or a link under an export file's name is not what we wrote.
        or os.path.islink(os.path.join(path, name))
        or not os.path.isfile(os.path.join(path, name))
    ]
    if foreign:
        listed = ", ".join(repr(n) for n in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        why = f"it holds {listed}{more}"
    elif not _is_export_manifest(os.path.join(path, "manifest.json")):
        why = f"it has no manifest.json of format {MANIFEST_FORMAT}"
    else:
        return
    raise ExportError(
        f"--out {shown} is neither empty nor a previous export ({why}); not replacing it: "
        "choose a new or empty folder",
        EXIT_OUT_REFUSED,
    )


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver them.

    Between the two renames of the swap --out does not exist; a signal there
    would end the process before the old folder is put back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    saved: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in saved.items():
            # None: a handler installed outside Python, which cannot be restored.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if pending:
            signal.raise_signal(pending[0])


def _publish(stage: str, out: str, work: str) -> None:
    # Swap folders with renames (same filesystem, since work/ is beside out)
    # so readers never see a half-written output folder. Checked again first:
    # the folder may have changed during the minutes of compiling.
    _check_out(out)
    old = os.path.join(work, "old")
    with _signals_deferred():
        moved = False
        try:
            if os.path.lexists(out):
                os.rename(out, old)
                moved = True
                # Whatever was added after the check above moved with the folder.
                _check_out(old, shown=out)
            os.rename(stage, out)
        except BaseException as e:
            if moved:
                _put_back(old, out)
            if isinstance(e, OSError):
                raise ExportError(f"cannot write output folder {out}: {e.strerror}") from e
            raise
        if moved:
            shutil.rmtree(old, ignore_errors=True)


def _put_back(old: str, out: str) -> None:
    try:
        os.rename(old, out)
    except OSError as e:
        # _remove_work keeps work/old, so the previous export is not lost.
        raise ExportError(
            f"cannot put the previous output back at {out} ({e.strerror}); it is in {old}"
        ) from e


def _remove_work(work: str) -> None:
    old = os.path.join(work, "old")
    if not os.path.lexists(old):
        shutil.rmtree(work, ignore_errors=True)
        return
    # A swap that could not be undone: work/old holds the previous export.
    for name in os.listdir(work):
        if name != "old":
            shutil.rmtree(os.path.join(work, name), ignore_errors=True)


def _missing_folders(path: str) -> list[str]:
    """The folders os.makedirs(path) would create, deepest first."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def _remove_empty(folders: list[str]) -> None:
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    if args.generate_key:
        try:
            for path in generate_key(args.generate_key):
                print(path)
        except ExportError as e:
            _die(str(e), e.code)
        except KeyboardInterrupt:
            _die("interrupted", EXIT_INTERRUPTED)
        return 0
    t0 = time.perf_counter()
    try:
        times = run(args)
    except ExportError as e:
        _die(str(e), e.code)
    except KeyboardInterrupt:
        _die("interrupted", EXIT_INTERRUPTED)
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
