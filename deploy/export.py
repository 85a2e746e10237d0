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

ARM64 edge machines: --target linux-aarch64 generates the model's C++ here,
compiles it with the aarch64 toolchain and LibTorch, and writes a package for
linux-aarch64 whose manifest vouches for the aarch64 libmy_ops.so (the one the
aarch64 bundle ships). Such a package cannot run on this machine, so it is not
verified here: the aarch64 bundle's tests run it under qemu-aarch64.
expected_output.pt still holds this machine's eager outputs.

Custom models: --model package.module:factory, see deploy/default_model.py for
the factory protocol.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

# The export's other modules sit beside this file and are imported by name.
# Running this file as a script puts its folder on sys.path; loading it by
# path, as the tests do, does not.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from export_cache import DEFAULT_MAX_MB, Cache, bytecode_in  # noqa: E402
from export_cache import default_dir as default_cache_dir  # noqa: E402
from export_cache_key import (  # noqa: E402
    CacheKeys,
    exporter_sha256,
    inductor_config,
    program_sha256,
    toolchain_parts,
)
from export_compile import (  # noqa: E402
    COMPILE_LOG_ENV,
    cuda_home,
    inductor_options,
    input_signature,
    parse_inductor_options,
    write_cxx_wrapper,
)
from export_cross import (  # noqa: E402
    HOST_TARGET,
    TARGETS,
    CrossTarget,
    TargetFiles,
    cpp_only_options,
    cross_compile,
    forced_vec_isa,
    target_files,
)
from export_error import (  # noqa: E402
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ExportError,
    first_line,
)
from export_manifest import generate_key, load_signing_key, write_manifest  # noqa: E402
from export_model import (  # noqa: E402
    DEFAULT_MODEL,
    as_tuple,
    load_factory,
    make_spec,
    to_device,
)
from export_output import (  # noqa: E402
    check_out,
    missing_folders,
    publish,
    remove_empty,
    remove_work,
)
from export_profile import breakdown, format_breakdown, parse_log  # noqa: E402
from export_verify import sample_inputs, verify  # noqa: E402


def _die(msg: str, code: int = EXIT_FAILURE) -> NoReturn:
    print(f"export: error: {msg}", file=sys.stderr)
    sys.exit(code)


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
        "--target",
        choices=(HOST_TARGET, *TARGETS),
        default=HOST_TARGET,
        help="the machine the package runs on (default: linux-x86_64). linux-aarch64 "
        "cross-compiles for ARM64 (armv8-a with NEON, CPU only); the package is not "
        "verified here, since it cannot run on this machine",
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
        "--inductor-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one torch._inductor.config option for the compile, e.g. "
        "aot_inductor.compile_wrapper_opt_level=O0 (repeatable; VALUE is a Python literal, "
        "else a string). Part of the cache key",
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
    args = p.parse_args(argv)
    if args.max_batch < 1:
        p.error("--max-batch must be >= 1")
    if args.target != HOST_TARGET:
        if args.device != "cpu":
            p.error(f"--target {args.target} packages are CPU only (--device cpu)")
        if args.isa != "portable":
            p.error(
                f"--isa {args.isa} is for linux-x86_64; --target {args.target} uses its baseline"
            )
    if args.cache_max_mb < 1:
        p.error("--cache-max-mb must be >= 1")
    out = args.out or _default_out()
    # Under `bazel run` the cwd is the runfiles tree; relative paths the user
    # typed mean their own working directory.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY", "")
    args.out = os.path.abspath(os.path.join(user_cwd, out))
    if args.no_cache and args.cache_dir:
        p.error("--no-cache and --cache-dir contradict each other")
    args.cache_dir_given = args.cache_dir is not None
    args.cache_dir = args.cache_dir or default_cache_dir()
    for name in ("signing_key", "generate_key", "cache_dir"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(os.path.join(user_cwd, getattr(args, name))))
    return args


def _setup_environment(device: str) -> None:
    import logging

    if device == "cuda":
        home = cuda_home()
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


@contextlib.contextmanager
def _stage(
    name: str, times: dict[str, float], note: Callable[[], str] | None = None
) -> Iterator[None]:
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
    print(f"{times[name]:.1f}s" + (f", {note()}" if note else ""), flush=True)


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


def _open_cache(args: argparse.Namespace) -> Cache | None:
    if args.no_cache:
        return None
    cache = Cache(args.cache_dir, args.cache_max_mb << 20)
    try:
        cache.__enter__()
    except OSError as e:
        if args.cache_dir_given:
            raise ExportError(
                f"--cache-dir {args.cache_dir}: {e.strerror} (pass --no-cache to export without it)"
            ) from e
        # The default folder is a convenience: a read-only home (a sandbox,
        # a locked-down CI runner) must not stop the export.
        print(f"cache:   off, {args.cache_dir}: {e.strerror} (see --cache-dir)", flush=True)
        return None
    print(f"cache:   {args.cache_dir}", flush=True)
    return cache


def run(args: argparse.Namespace) -> dict[str, float]:
    # A folder that may not be replaced, or a bad key, must fail now, not
    # after minutes of compiling.
    check_out(args.out)
    signing_key = load_signing_key(args.signing_key) if args.signing_key else None
    cross = TARGETS.get(args.target)
    cross_files = target_files(cross) if cross else None
    cache = _open_cache(args)
    try:
        with bytecode_in(cache.bytecode_dir()) if cache else contextlib.nullcontext():
            return _export(args, cache, signing_key, cross, cross_files)
    finally:
        if cache is not None:
            cache.__exit__(None, None, None)


def _export(
    args: argparse.Namespace,
    cache: Cache | None,
    signing_key: Any,
    cross: CrossTarget | None,
    cross_files: TargetFiles | None,
) -> dict[str, float]:
    parent = os.path.dirname(args.out)
    made = missing_folders(parent)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(args.out)}.export-", dir=parent)
    except OSError as e:
        remove_empty(made)
        raise ExportError(f"cannot write output folder {args.out}: {e.strerror}") from e

    times: dict[str, float] = {}
    published = False
    try:
        # Before anything imports torch._inductor, which makes folders in $TMPDIR.
        tmp = _private_tmp(work)
        try:
            extra_options = parse_inductor_options(args.inductor_option)
        except ValueError as e:
            raise ExportError(str(e), EXIT_USAGE) from e
        _setup_environment(args.device)
        _check_device(args.device)
        factory = load_factory(args.model)
        import torch

        stage = os.path.join(work, "stage")
        os.makedirs(stage)

        spec = make_spec(factory, args.max_batch)
        max_batch = int(getattr(spec, "max_batch", args.max_batch) or args.max_batch)
        module = spec.module.to(args.device).eval()
        example = to_device(tuple(spec.example_inputs), args.device)

        with _stage("export", times):
            try:
                with torch.no_grad():
                    ep = torch.export.export(
                        module, example, dynamic_shapes=spec.dynamic_shapes, strict=False
                    )
            except Exception as e:  # noqa: BLE001
                raise ExportError(
                    f"torch.export failed: {first_line(e)} (hint: the model's shape logic must "
                    "hold over the whole dynamic_shapes range, and every custom op needs a "
                    "fake implementation)"
                ) from e

        keys = None
        if cache is not None:
            keys = _cache_keys(args, ep, cross_files)
            toolchain = cache.toolchain_dir(keys.toolchain)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(toolchain, "inductor")
            os.environ["TRITON_CACHE_DIR"] = os.path.join(toolchain, "triton")
            bindir = os.path.join(toolchain, "bin")
        else:
            bindir = os.path.join(tmp, "bin")
        package = os.path.join(stage, "model.pt2")
        cxx, compiler = write_cxx_wrapper(bindir)
        print(f"compiler: {compiler}", flush=True)
        if cross is not None:
            print(f"target:  {cross.name}, compiled by {cross_files.compiler} -march={cross.march}")
        options = (
            inductor_options(
                args.device, args.isa, cxx, input_signature(ep), cross=cross is not None
            )
            | extra_options
        )
        package_key = keys.package(options, inductor_config()) if keys else None
        cached = cache.get_package(package_key) if cache and package_key else None
        log = os.path.join(work, "compile.log")
        with _stage("compile", times, lambda: _cache_note(cache, cached)):
            if cached is not None:
                with open(package, "wb") as f:
                    f.write(cached)
            else:
                if args.profile_compile:
                    os.environ[COMPILE_LOG_ENV] = log
                _compile(ep, package, options, cross, cross_files, work)
                os.environ.pop(COMPILE_LOG_ENV, None)
        if args.profile_compile:
            _print_profile(log, times["compile"], cached is not None)

        if cross is None:
            with _stage("verify", times):
                sample = verify(spec, module, package, max_batch, args.device)
        else:
            print(
                f"verify  ... skipped: a {cross.name} package cannot run on this machine",
                flush=True,
            )
            sample = sample_inputs(spec, args.device)
        # Only a package that passed verify (or, for a cross target, was
        # built to the end) is kept for the next export.
        if cache is not None and package_key is not None and cached is None:
            cache.put_package(package_key, package)

        sample_cpu = to_device(sample, "cpu")
        with torch.no_grad():
            expected = to_device(as_tuple(module(*sample)), "cpu")
        torch.save(sample_cpu, os.path.join(stage, "sample_input.pt"))
        torch.save(expected, os.path.join(stage, "expected_output.pt"))
        if cross is None:
            write_manifest(stage, package, args.isa, args.device, signing_key)
        else:
            write_manifest(
                stage,
                package,
                args.isa,
                args.device,
                signing_key,
                target=cross.name,
                march=cross.march,
                cxx=cross_files.compiler,
                op_library=cross_files.op_library,
            )

        publish(stage, args.out, work)
        published = True
        return times
    finally:
        remove_work(work)
        if not published:
            remove_empty(made)


def _compile(
    ep: Any,
    package: str,
    options: dict[str, Any],
    cross: CrossTarget | None,
    cross_files: TargetFiles | None,
    work: str,
) -> None:
    import torch

    if cross is None:
        try:
            torch._inductor.aoti_compile_and_package(
                ep, package_path=package, inductor_configs=options
            )
        except Exception as e:  # noqa: BLE001
            raise ExportError(f"AOTInductor compile failed: {first_line(e)}") from e
        return
    # Named as the final package: the archive's top folder comes from it.
    os.makedirs(os.path.join(work, "cpp"))
    generated = os.path.join(work, "cpp", "model.pt2")
    try:
        with forced_vec_isa(cross):
            torch._inductor.aoti_compile_and_package(
                ep,
                package_path=generated,
                inductor_configs=options | cpp_only_options(),
            )
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"AOTInductor code generation failed: {first_line(e)}") from e
    cross_compile(generated, package, cross, cross_files, work)


def _cache_keys(args: argparse.Namespace, ep: Any, cross_files: TargetFiles | None) -> CacheKeys:
    import my_ops

    try:
        op_library = my_ops.load_library()
    except ImportError as e:
        raise ExportError(f"cannot find the op library for the cache key: {first_line(e)}") from e
    return CacheKeys(
        toolchain=toolchain_parts(
            device=args.device,
            isa=args.isa,
            target=args.target,
            op_library=op_library,
            cross=cross_files,
        ),
        program_sha256=program_sha256(ep),
        exporter_sha256=exporter_sha256(),
    )


def _cache_note(cache: Cache | None, cached: bytes | None) -> str:
    if cache is None:
        return "no cache"
    return "cache hit" if cached is not None else "cache miss"


def _print_profile(log: str, seconds: float, hit: bool) -> None:
    if hit:
        print("compile profile: nothing compiled (cache hit; --no-cache to profile)")
        return
    try:
        with open(log) as f:
            text = f.read()
    except FileNotFoundError:
        text = ""
    print(format_breakdown(breakdown(parse_log(text), seconds), seconds), flush=True)


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
        _die(f"unexpected {first_line(e)} (set MY_OPS_EXPORT_TRACEBACK=1 for the traceback)")
    total = time.perf_counter() - t0
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in times.items())
    print(f"exported in {total:.1f}s ({parts})")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
