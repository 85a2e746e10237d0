"""Export a model that uses my_ops into an AOTInductor package.

Stages: torch.export -> aoti_compile_and_package -> verify (aoti_load_package
against eager at batch 1, 7 and the max batch). Only a verified package is
published.

Outputs (in --out, default $BUILD_WORKSPACE_DIRECTORY/out or ./out):
  model.pt2            AOTInductor package
  sample_input.pt      torch.save'd tuple of input tensors
  expected_output.pt   torch.save'd tuple of eager outputs for sample_input.pt
  manifest.json        sha256 of model.pt2 and of the libmy_ops.so it was built
                       with, torch version, CPU instruction set, device, and
                       the custom ops (with their schemas) and classes it
                       calls; the C++ loader refuses a package that does not
                       match it, or op libraries that lack what it calls
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

Compile cache: a model exported before, with the same op library, torch,
compiler, target and options, takes its package from ~/.cache/my_ops/inductor
(--cache-dir, --no-cache; see export_cache.py) and is verified as usual.
--profile-compile prints where the compile stage's time went.

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
from typing import Any

# The export's other modules sit beside this file and are imported by name.
# Running this file as a script puts its folder on sys.path; loading it by
# path, as the tests do, does not.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from export_cache import Cache, bytecode_in  # noqa: E402
from export_cache_key import (  # noqa: E402
    CacheKeys,
    exporter_sha256,
    inductor_config,
    program_sha256,
    toolchain_parts,
)
from export_cli import die, parse_args  # noqa: E402
from export_compile import (  # noqa: E402
    COMPILE_LOG_ENV,
    cuda_home,
    inductor_options,
    input_signature,
    keep_precompiled_headers,
    parse_inductor_options,
    write_cxx_wrapper,
)
from export_cross import (  # noqa: E402
    TARGETS,
    CrossTarget,
    TargetFiles,
    cpp_only_options,
    cross_compile,
    forced_vec_isa,
    target_files,
)
from export_error import (  # noqa: E402
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ExportError,
    first_line,
)
from export_manifest import (  # noqa: E402
    generate_key,
    load_signing_key,
    package_calls,
    write_manifest,
)
from export_model import (  # noqa: E402
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
from export_profile import print_profile  # noqa: E402
from export_verify import sample_inputs, verify  # noqa: E402


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
        cache.open()
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
    with contextlib.ExitStack() as stack:
        cache = _open_cache(args)
        if cache is not None:
            stack.callback(cache.close)
            stack.enter_context(bytecode_in(cache.bytecode_dir()))
        return _export(args, cache, signing_key, cross, cross_files)


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
            toolchain = None
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
            | keep_precompiled_headers(os.path.join(toolchain, "headers") if toolchain else None)
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
                if args.profile_compile:
                    del os.environ[COMPILE_LOG_ENV]
        if args.profile_compile:
            print_profile(log, times["compile"], hit=cached is not None)

        if cross is None:
            with _stage("verify", times):
                sample = verify(spec, module, package, max_batch, args.device, options)
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
        calls = package_calls(ep)
        if cross is None:
            write_manifest(stage, package, args.isa, args.device, signing_key, calls=calls)
        else:
            write_manifest(
                stage,
                package,
                args.isa,
                args.device,
                signing_key,
                calls=calls,
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate_key:
        try:
            for path in generate_key(args.generate_key):
                print(path)
        except ExportError as e:
            die(str(e), e.code)
        except KeyboardInterrupt:
            die("interrupted", EXIT_INTERRUPTED)
        return 0
    t0 = time.perf_counter()
    try:
        times = run(args)
    except ExportError as e:
        die(str(e), e.code)
    except KeyboardInterrupt:
        die("interrupted", EXIT_INTERRUPTED)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("MY_OPS_EXPORT_TRACEBACK"):
            raise
        die(f"unexpected {first_line(e)} (set MY_OPS_EXPORT_TRACEBACK=1 for the traceback)")
    total = time.perf_counter() - t0
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in times.items())
    print(f"exported in {total:.1f}s ({parts})")
    print(args.out)
    return 0


if __name__ == "__main__":
    status = main()
    # A finished export has written, flushed and renamed its output, removed
    # its temporary files and released the cache's lock; tearing down torch's
    # modules would add over a second to a 10-second warm export.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
