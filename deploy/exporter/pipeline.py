"""Export a model that uses my_ops into an AOTInductor package.

Stages: torch.export -> aoti_compile_and_package -> verify (aoti_load_package
against eager at batch 1, 7 and the max batch). Only a verified package is
published.

Outputs (in --out, default $BUILD_WORKSPACE_DIRECTORY/out or ./out):
  model.pt2            AOTInductor package
  weights.bin          a CPU package's weights, which it does not hold itself
  weights.json         (unless --weights-inside, --mode max-autotune or another
  weights.sig          --target): the weights-file format of weights.py, which
                       the runtime maps, so that a run holds each weight once;
                       weights.sig with --signing-key
  sample_input.pt      torch.save'd tuple of input tensors
  expected_output.pt   torch.save'd tuple of eager outputs for sample_input.pt
                       (a quantized package's own, see Quantization)
  manifest.json        sha256 of model.pt2 and of the libmy_ops.so it was built
                       with, torch version, CPU instruction set, device, and
                       the custom ops (with their schemas) and classes it
                       calls; the C++ loader refuses a package that does not
                       match it, or op libraries that lack what it calls
  manifest.sig         with --signing-key: Ed25519 signature of manifest.json,
                       which the loader requires with --public-key
  architecture.json    what a weights file for the package must match (weights.py)

Weights files: --weights-only --base DIR exports the model with torch.export
only, checks it against DIR/architecture.json and writes a weights file for
DIR's package instead of a package (weights.py says what and why). A package
whose weights are frozen into it (--mode max-autotune) takes none.

Speed: --mode no-autotune, the default, compiles with Inductor's defaults and
holds each weight once. --mode max-autotune (CPU packages of this machine's
architecture) freezes the weights into the package beside prepacked copies and
compiles each matrix product with a weight with Inductor's C++ GEMM template,
its blockings tuned on this machine (compile.py), in up to twice the time.

Keys: --generate-key DIR writes DIR/signing_key.pem (private, mode 0600) and
DIR/public_key.pem, or neither when one of them exists. --signing-key also
takes a key from `openssl genpkey -algorithm ed25519` or a raw 32-byte seed.
--sign DIR --signing-key KEY signs an existing export in place, on the
machine that holds the key: it writes DIR/manifest.sig only when
DIR/manifest.json describes the model.pt2 beside it, and DIR/weights.sig when
DIR/weights.json is for that package.

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
(--cache-dir, --no-cache; see cache.py) and is verified as usual.
--profile-compile prints where the compile stage's time went.

Custom ops: the package calls each op of the op library as a C function the
library defines (a C shim, see c_shims.py), not through AOTInductor's
ProxyExecutor; manifest.json names the function beside the op. --no-c-shims
exports the ProxyExecutor calls instead.

Custom models: --model package.module:factory, see deploy/default_model.py for
the factory protocol.

Quantization: --quantize int8|int4 exports a copy of the model whose nn.Linear layers
are my_ops's quantized linear ops (my_ops.quantize), after comparing it with the float
model on the example inputs (--min-cosine). The package is verified against the float
model by the same gate, and expected_output.pt holds the package's own outputs: against
the quantized model in eager an elementwise tolerance does not hold (verify.Accuracy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import c_shims
from .cache import Cache, bytecode_in
from .cache_key import (
    CacheKeys,
    exporter_sha256,
    inductor_config,
    program_sha256,
    toolchain_parts,
)
from .compile import (
    COMPILE_LOG_ENV,
    cuda_home,
    frozen,
    inductor_options,
    input_signature,
    keep_precompiled_headers,
    mode_options,
    parse_inductor_options,
    prefer_cpp_gemm_template,
    prefers_cpp_gemm_template,
    weights_beside,
    without_weights,
    write_cxx_wrapper,
)
from .environment import ScopedEnvironment, forget_inductor_paths
from .errors import (
    EXIT_ACCURACY,
    EXIT_NOT_BASE_ARCHITECTURE,
    EXIT_USAGE,
    ExportError,
    first_line,
)
from .hashing import sha256_file
from .manifest import write_manifest
from .model import as_tuple, load_factory, make_spec, to_device
from .options import DEFAULT_MIN_COSINE, CacheOptions, Options, checked, flag
from .output import check_out, missing_folders, publish, remove_empty, remove_work
from .profile import print_profile
from .program_calls import package_calls
from .signing import load_signing_key
from .state import (
    buffers_as_given,
    decoder_record,
    manifest_record,
    restore,
    state_metadata,
    state_specs,
)
from .target import Build, build_for
from .verify import Accuracy, agreement, package_outputs, sample_inputs
from .weights import (
    check_base_scheme,
    first_difference,
    program_constants,
    program_custom_objects,
    read_base,
    weights_architecture,
    weights_metadata,
    write_architecture,
    write_weights,
)

# The factory protocol's spec (deploy/default_model.py) for a max batch.
SpecMaker = Callable[[int], Any]
# The base's package, architecture and quantization record.
Base = tuple[dict[str, str], dict[str, Any], dict[str, Any]]


def run(
    opts: Options, make: SpecMaker | None = None, spell: Callable[[str], str] = flag
) -> dict[str, float]:
    """Export into opts.out and return each stage's seconds; raises ExportError.

    `make` gives the model's spec; by default the factory that opts.model names. Errors name
    a setting as `spell` writes it (a flag by default). The process's environment, temporary
    folder, loggers and Inductor settings are as before on return.
    """
    opts = checked(opts, spell)
    if make is None:
        model = opts.model

        def make(max_batch: int) -> Any:
            return make_spec(load_factory(model), max_batch, opts.kv_cache)

    # A folder that may not be replaced, or a bad key or base, must fail now, not
    # after minutes of compiling.
    check_out(opts.out, name=spell("out"))
    signing_key = load_signing_key(opts.signing_key) if opts.signing_key else None
    base = None
    if opts.weights_only:
        assert opts.base is not None
        if os.path.realpath(opts.out) == os.path.realpath(opts.base):
            raise ExportError(
                f"{spell('out')} {opts.out} is {spell('base')}: write the weights file elsewhere"
            )
        base = read_base(opts.base)
        check_base_scheme(base[2], opts, spell)
        if opts.quantize is not None and opts.smooth_alpha is None:
            # The base's smoothing, so that the weights file's layers match its package's.
            opts = dataclasses.replace(opts, smooth_alpha=base[2].get("smooth_alpha", 0.0))
    # A target this installation cannot build for (the wheel has no cross toolchain).
    build = build_for(opts.target) if base is None else None
    times: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(ScopedEnvironment())
        env.on_restore(forget_inductor_paths)
        cache = None
        if base is None:
            # Before torch is imported: the cache keeps its bytecode.
            cache = _open_cache(opts.cache)
            if cache is not None:
                stack.callback(cache.close)
                stack.enter_context(bytecode_in(cache.bytecode_dir()))
        job = stack.enter_context(_work_folder(opts.out))
        work, stage = job.folder, job.stage
        # Before anything imports torch._inductor, which makes folders in $TMPDIR.
        tmp = _private_tmp(work, env)
        try:
            extra_options = parse_inductor_options(
                list(opts.inductor_options), spell("inductor_option")
            )
        except ValueError as e:
            raise ExportError(str(e), EXIT_USAGE) from e
        _setup_environment(opts.device, env)
        _check_device(opts.device)
        spec = make(opts.max_batch)
        module = spec.module
        was_training = module.training
        given = module
        env.on_restore(lambda: given.train(was_training))
        module = module.to(opts.device).eval()
        initial_buffers = buffers_as_given(module)
        example = to_device(tuple(spec.example_inputs), opts.device)
        accuracy = None
        quantization = None
        if opts.quantize is not None:
            float_module = module
            module, quantization = _quantized(module, example, opts, spell, times)
            accuracy = Accuracy(
                float_module,
                _min_cosine(opts),
                f"nothing was written (leave sensitive layers float with {spell('quantize_skip')})",
                EXIT_ACCURACY,
            )
        if opts.float_linear == "packed":
            module, quantization = _packed(module, example, quantization, spell, times)
        else:
            quantization = (quantization or {"scheme": "none"}) | {"float_linear": "inductor"}
        ep = _exported_program(module, example, spec.dynamic_shapes, times)
        if base is not None:
            # A weights file starts the state where the model as given has it, as a package does.
            restore([module, spec.module], ep, list(state_specs(ep)), initial_buffers)
            _export_weights(
                spec, module, ep, base, opts.base, stage, opts.device, signing_key, times, accuracy
            )
        else:
            assert build is not None
            _export_package(
                opts,
                spec,
                module,
                ep,
                build=build,
                cache=cache,
                signing_key=signing_key,
                extra_options=extra_options,
                work=work,
                tmp=tmp,
                env=env,
                times=times,
                accuracy=accuracy,
                quantization=quantization,
                initial_buffers=initial_buffers,
            )
        publish(stage, opts.out, work)
        job.published = True
    return times


def _min_cosine(opts: Options) -> float:
    return DEFAULT_MIN_COSINE if opts.min_cosine is None else opts.min_cosine


def _quantized(
    module: Any,
    example: tuple[Any, ...],
    opts: Options,
    spell: Callable[[str], str],
    times: dict[str, float],
) -> tuple[Any, dict[str, Any]]:
    """A copy of `module` with its Linear layers quantized (the model itself stays float) and
    the manifest's record of it, or ExportError: a usage error when there is nothing to
    quantize, EXIT_ACCURACY when the copy's outputs on the example inputs are further from the
    float model's than --min-cosine."""
    import copy

    import torch

    from my_ops.quantize import DEFAULT_SMOOTH_ALPHA, quantize_linear_layers

    scheme = opts.quantize
    min_cosine = _min_cosine(opts)
    alpha = DEFAULT_SMOOTH_ALPHA[scheme] if opts.smooth_alpha is None else opts.smooth_alpha
    note: list[str] = []
    with _stage("quantize", times, lambda: note[0]):
        with torch.no_grad():
            want = as_tuple(module(*example))
        quantized = copy.deepcopy(module)
        try:
            replaced = quantize_linear_layers(
                quantized,
                scheme,
                group_size=opts.quantize_group_size,
                skip=opts.quantize_skip,
                smooth_alpha=alpha,
                example_inputs=example,
            )
        except ValueError as e:
            raise ExportError(f"{spell('quantize')} {scheme}: {e}", EXIT_USAGE) from e
        with torch.no_grad():
            got = as_tuple(quantized(*example))
        cosine, largest = agreement(got, want)
        smoothed = f", smoothed (alpha {alpha:g})" if alpha else ""
        note.append(
            f"{scheme}, {len(replaced)} linear layers{smoothed}; against the float model on the "
            f"example inputs: cosine {cosine:.7g}, largest difference {largest:.3g}"
        )
        if not cosine >= min_cosine:
            raise ExportError(
                f"{spell('quantize')} {scheme}: the quantized model's cosine against the float "
                f"model is {cosine:.7g}, below {spell('min_cosine')} {min_cosine}; nothing was "
                f"written (leave sensitive layers float with {spell('quantize_skip')})",
                EXIT_ACCURACY,
            )
    record: dict[str, Any] = {"scheme": scheme}
    if scheme == "int4":
        record["group_size"] = opts.quantize_group_size
    record["layers"] = len(replaced)
    record["smooth_alpha"] = float(alpha)
    # The layers --quantize-skip left float, by their names in the model.
    record["float_layers"] = sorted(
        name for name, m in quantized.named_modules() if isinstance(m, torch.nn.Linear)
    )
    return quantized, record


def _packed(
    module: Any,
    example: tuple[Any, ...],
    quantization: dict[str, Any] | None,
    spell: Callable[[str], str],
    times: dict[str, float],
) -> tuple[Any, dict[str, Any]]:
    """A copy of `module` whose float Linear layers are my_ops.linear_packed (my_ops.pack; the
    model itself, or the quantized copy, is left as it is), and the record of its linear
    layers with "float_linear" and "packed_layers" added. Packing reorders float32 sums and
    nothing else: a copy whose outputs on the example inputs differ by more is a bug, refused."""
    import copy

    import torch

    from my_ops.pack import pack_linear_layers, packable

    record = dict(quantization or {"scheme": "none"}) | {"float_linear": "packed"}
    names, left = packable(module)
    if not names:
        return module, record | {"packed_layers": 0}
    note: list[str] = []
    with _stage("pack", times, lambda: note[0]):
        with torch.no_grad():
            want = as_tuple(module(*example))
        packed = copy.deepcopy(module)
        pack_linear_layers(packed)
        with torch.no_grad():
            got = as_tuple(packed(*example))
        cosine, largest = agreement(got, want)
        kept = f", {len(left)} left as they are ({_why_left(left)})" if left else ""
        note.append(
            f"{len(names)} float linear layers packed{kept}; against the model on the example "
            f"inputs: largest difference {largest:.3g}"
        )
        if not cosine >= _PACKED_MIN_COSINE:
            raise ExportError(
                f"packing the linear layers changed the model's outputs (cosine {cosine:.7g}); "
                f"export with {spell('float_linear')} inductor and report this"
            )
    return packed, record | {"packed_layers": len(names)}


# Packed layers compute what nn.Linear does in float32, in another order of the sums.
_PACKED_MIN_COSINE = 0.99999


def _why_left(left: dict[str, str]) -> str:
    first, why = next(iter(left.items()))
    more = f" and {len(left) - 1} more" if len(left) > 1 else ""
    return f"{first}: {why}{more}"


@dataclasses.dataclass
class _Work:
    folder: str  # beside --out, removed when the export ends
    stage: str  # folder/stage: what becomes --out
    published: bool = False


@contextlib.contextmanager
def _work_folder(out: str) -> Iterator[_Work]:
    """A work folder beside `out`, removed on exit with the folders made for `out`, unless the
    export was published."""
    parent = os.path.dirname(out)
    made = missing_folders(parent)
    try:
        os.makedirs(parent, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.export-", dir=parent)
    except OSError as e:
        remove_empty(made)
        raise ExportError(f"cannot write output folder {out}: {e.strerror}") from e
    job = _Work(folder, os.path.join(folder, "stage"))
    try:
        os.makedirs(job.stage)
        yield job
    finally:
        remove_work(folder)
        if not job.published:
            remove_empty(made)


def _exported_program(
    module: Any, example: tuple[Any, ...], dynamic_shapes: Any, times: dict[str, float]
) -> Any:
    import torch

    with _stage("export", times):
        try:
            with torch.no_grad():
                return torch.export.export(
                    module, example, dynamic_shapes=dynamic_shapes, strict=False
                )
        except Exception as e:  # noqa: BLE001
            raise ExportError(
                f"torch.export failed: {first_line(e)} (hint: the model's shape logic must "
                "hold over the whole dynamic_shapes range, and every custom op needs a "
                "fake implementation)"
            ) from e


def _export_package(
    opts: Options,
    spec: Any,
    module: Any,
    ep: Any,
    *,
    build: Build,
    cache: Cache | None,
    signing_key: Any,
    extra_options: dict[str, Any],
    work: str,
    tmp: str,
    env: ScopedEnvironment,
    times: dict[str, float],
    accuracy: Accuracy | None = None,
    quantization: dict[str, Any] | None = None,
    initial_buffers: dict[str, Any] | None = None,
) -> None:
    """Compile the package, verify it and describe it in work/stage/."""
    import torch

    max_batch = int(getattr(spec, "max_batch", opts.max_batch) or opts.max_batch)
    op_library = _op_library()
    keys = None
    if cache is not None:
        keys = _cache_keys(opts.device, opts.isa, opts.target, build, ep, op_library)
        toolchain = cache.toolchain_dir(keys.toolchain)
        env.set_env("TORCHINDUCTOR_CACHE_DIR", os.path.join(toolchain, "inductor"))
        env.set_env("TRITON_CACHE_DIR", os.path.join(toolchain, "triton"))
        bindir = os.path.join(toolchain, "bin")
    else:
        toolchain = None
        bindir = os.path.join(tmp, "bin")
    stage = os.path.join(work, "stage")
    package = os.path.join(stage, "model.pt2")
    shims = c_shims.plan(ep, opts.device, op_library) if opts.c_shims else c_shims.ShimPlan()
    cxx, compiler = write_cxx_wrapper(bindir)
    print(f"compiler: {compiler}", flush=True)
    build.announce()
    assert opts.mode is not None
    options = (
        inductor_options(opts.device, opts.isa, cxx, input_signature(ep), cross=build.cross)
        | keep_precompiled_headers(os.path.join(toolchain, "headers") if toolchain else None, env)
        | {c_shims.INDUCTOR_OPTION: shims.options}
        | mode_options(opts.mode)
        | extra_options
    )
    # The buffers the model updates in place (a decoder's KV cache), which the package keeps
    # between runs: recorded for the runtime, and put back to their values as given once the
    # eager and package runs of the stages have written into them.
    state = state_specs(ep)
    decoder = decoder_record(spec, ep, state)
    if state:
        metadata = dict(options.get("aot_inductor.metadata") or {})
        options = options | {"aot_inductor.metadata": metadata | state_metadata(state, decoder)}
        print(
            f"state:   {len(state)} buffers the model updates in place"
            + (
                f", a decoder with a KV cache of {decoder['cache_length']} positions"
                if decoder
                else ""
            ),
            flush=True,
        )
    # The weights, where they go beside the package: the constants the package takes.
    beside: dict[str, Any] | None = None
    if not opts.weights_inside and weights_beside(opts.device, build.cross, options):
        constants = program_constants(ep)
        metadata = weights_metadata(constants)
        if metadata is not None:
            beside = constants
            options = without_weights(options, metadata)
    gemm_template_first = prefers_cpp_gemm_template(opts.mode)
    package_key = keys.package(options, inductor_config(), gemm_template_first) if keys else None
    cached = cache.get_package(package_key) if cache and package_key else None
    log = os.path.join(work, "compile.log")
    with _stage("compile", times, lambda: _cache_note(cache, cached)):
        if cached is not None:
            with open(package, "wb") as f:
                f.write(cached)
        else:
            with (
                ScopedEnvironment() as compiling,
                c_shims.lowering(shims),
                prefer_cpp_gemm_template(gemm_template_first),
            ):
                if opts.profile_compile:
                    compiling.set_env(COMPILE_LOG_ENV, log)
                build.compile(ep, package, options, work)
    if opts.profile_compile:
        print_profile(log, times["compile"], hit=cached is not None)

    verified = build.verify(
        spec,
        module,
        package,
        max_batch,
        opts.device,
        options,
        lambda name, note=None: _stage(name, times, note),
        accuracy,
        beside,
    )
    sample = verified.sample
    # Only a package that passed verify (or, for a cross target, was
    # built to the end) is kept for the next export.
    if cache is not None and package_key is not None and cached is None:
        cache.put_package(package_key, package)

    sample_cpu = to_device(sample, "cpu")
    if accuracy is not None and verified.outputs:
        # A quantized package's own outputs, which it reproduces: its eager model's can differ
        # by a quantization step (see Accuracy).
        expected = to_device(verified.outputs, "cpu")
    else:
        with torch.no_grad():
            expected = to_device(as_tuple(module(*sample)), "cpu")
    torch.save(sample_cpu, os.path.join(stage, "sample_input.pt"))
    torch.save(expected, os.path.join(stage, "expected_output.pt"))
    calls = package_calls(ep, shims.calls)
    # The package starts from the model's state as it was given (an empty cache), whatever
    # the verification's runs wrote into it.
    restore([module, spec.module], ep, list(state), initial_buffers or {})
    write_architecture(stage, package, ep, frozen=frozen(options), held=verified.constant_names)
    if beside is not None:
        _write_weights_beside(stage, package, ep, signing_key, verified.constant_names, times)
    write_manifest(
        stage,
        package,
        opts.isa,
        opts.device,
        signing_key,
        calls=calls,
        quantization=quantization,
        state=manifest_record(state, decoder) if state else None,
        **build.manifest_target(),
    )


def _export_weights(
    spec: Any,
    module: Any,
    ep: Any,
    base: Base,
    base_folder: str,
    stage: str,
    device: str,
    signing_key: Any,
    times: dict[str, float],
    accuracy: Accuracy | None,
) -> None:
    """--weights-only: the weights file, and a sample with this model's outputs: in eager, or
    for a quantized package (`accuracy`) the base package's own with the new weights."""
    import torch

    package, base_architecture, _ = base
    held: list[str] = []  # what the weights file holds, for the stage's line
    with _stage("weights", times, lambda: held[0]):
        mine, left_out = weights_architecture(ep, base_architecture)
        difference = first_difference(base_architecture, mine)
        if difference is not None:
            raise ExportError(
                f"the model does not have the --base package's architecture: {difference}; "
                "a weights file carries new values only (export a new package instead)",
                EXIT_NOT_BASE_ARCHITECTURE,
            )
        write_weights(stage, ep, package, signing_key, left_out)
        sample = sample_inputs(spec, device)
        figures = ""
        # The package's constants are tensors only: with custom objects' state it would run
        # with the base's, so such a model's file keeps the eager outputs.
        if accuracy is not None and not program_custom_objects(ep):
            constants = {n: t for n, t in program_constants(ep).items() if n not in left_out}
            package_path = os.path.join(base_folder, package["file"])
            outputs, figures = package_outputs(package_path, constants, sample, accuracy)
            expected = to_device(outputs, "cpu")
        else:
            with torch.no_grad():
                expected = to_device(as_tuple(module(*sample)), "cpu")
        torch.save(to_device(sample, "cpu"), os.path.join(stage, "sample_input.pt"))
        torch.save(expected, os.path.join(stage, "expected_output.pt"))
        held.append(
            f"{len(mine['constants'])} constants and {len(mine['custom_objects'])} custom "
            f"objects for package {package['sha256'][:16]}..." + (f", {figures}" if figures else "")
        )


def _write_weights_beside(
    stage: str,
    package: str,
    ep: Any,
    signing_key: Any,
    held: tuple[str, ...],
    times: dict[str, float],
) -> None:
    """weights.bin, weights.json (and weights.sig) for a package compiled without its weights:
    the constants it holds by their names in it, and the custom objects' state."""
    said: list[str] = []
    with _stage("weights", times, lambda: said[0]):
        left_out = [name for name in program_constants(ep) if name not in held]
        described = {"file": os.path.basename(package), "sha256": sha256_file(package)}
        write_weights(stage, ep, described, signing_key, left_out)
        size = os.path.getsize(os.path.join(stage, "weights.bin"))
        said.append(f"{len(held)} constants beside the package, weights.bin {size / 2**20:.1f} MiB")


def _open_cache(opts: CacheOptions | None) -> Cache | None:
    if opts is None:
        return None
    cache = Cache(opts.folder, opts.max_bytes)
    try:
        cache.open()
    except OSError as e:
        if opts.given:
            raise ExportError(
                f"--cache-dir {opts.folder}: {e.strerror} (pass --no-cache to export without it)"
            ) from e
        # The default folder is a convenience: a read-only home (a sandbox,
        # a locked-down CI runner) must not stop the export.
        print(f"cache:   off, {opts.folder}: {e.strerror} (see --cache-dir)", flush=True)
        return None
    print(f"cache:   {opts.folder}", flush=True)
    return cache


def _op_library() -> str:
    """The path of the op library that `import my_ops` loaded."""
    import my_ops

    try:
        return my_ops.load_library()
    except ImportError as e:
        raise ExportError(f"cannot find the op library: {first_line(e)}") from e


def _cache_keys(
    device: str, isa: str, target: str, build: Build, ep: Any, op_library: str
) -> CacheKeys:
    return CacheKeys(
        toolchain=toolchain_parts(
            device=device,
            isa=isa,
            target=target,
            op_library=op_library,
            cross=build.files,
        ),
        program_sha256=program_sha256(ep),
        exporter_sha256=exporter_sha256(),
    )


def _cache_note(cache: Cache | None, cached: bytes | None) -> str:
    if cache is None:
        return "no cache"
    return "cache hit" if cached is not None else "cache miss"


def _setup_environment(device: str, env: ScopedEnvironment) -> None:
    if device == "cuda":
        home = cuda_home()
        if home:
            env.set_env("CUDA_HOME", home)
    else:
        # A CPU export never uses CUDA_HOME; torch still warns when it guesses
        # one on a host without a GPU, which is just noise here.
        env.quiet_logger("torch.utils.cpp_extension")
    # Exporting with --isa portable on a newer CPU makes the loader warn that
    # the package's ISA differs from this host's; that is the point of it.
    env.quiet_logger("torch.export.pt2_archive._package")


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
    said = note() if note else ""
    print(f"{times[name]:.1f}s" + (f", {said}" if said else ""), flush=True)


def _private_tmp(work: str, env: ScopedEnvironment) -> str:
    """Route every temporary file Inductor and the package loader make into work/.

    Inductor's cache defaults to $TMPDIR/torchinductor_$USER and
    aoti_load_package extracts into $TMPDIR/aotinductor_*; both would
    otherwise outlive the run in /tmp. Must run before torch._inductor reads them.
    """
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    env.set_tempdir(tmp)
    env.set_env("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, "inductor"))
    env.set_env("TRITON_CACHE_DIR", os.path.join(tmp, "triton"))
    return tmp
