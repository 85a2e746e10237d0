"""How AOTInductor compiles the package: the C++ compiler, the CUDA toolkit, Inductor's options."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

from .contract import load_contract
from .environment import ScopedEnvironment
from .errors import ExportError

# What --isa means as a -march value, recorded in the manifest.
MARCH = {"portable": "x86-64-v3", "native": "native"}


def cuda_home() -> str | None:
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


# Written by //tools/cc:cxx_toolchain: the compiler and sysroot flags of the
# C++ toolchain that built the op library and the loader.
_TOOLCHAIN_JSON = "_main/tools/cc/cxx_toolchain.json"


def runfile(key: str) -> tuple[str, str] | None:
    """The path of the runfile `key` and the runfiles root, or None outside Bazel.

    The root is what %runfiles% stands for in a compiler-info file.
    """
    # Imported here, not at the top: the manifest's and the cross export's
    # tests import this module without my_ops, which imports torch.
    from my_ops import _runfiles

    path, root = _runfiles.rlocation(key), _runfiles.root()
    return (path, root) if path is not None and root is not None else None


def read_compiler_info(path: str, root: str) -> dict[str, Any]:
    """A cc_compiler_info JSON file, with %runfiles% in every flag list replaced by `root`."""
    with open(path) as f:
        info = json.load(f)
    for key, value in info.items():
        if key.endswith("_flags"):
            info[key] = [flag.replace("%runfiles%", root) for flag in value]
    return info


def _toolchain_compiler() -> tuple[str, list[str], list[str], str]:
    """The compiler for Inductor: (path, compile flags, link flags, description).

    $CXX, when set, wins and is used as is (for debugging: it may link against
    the build machine's glibc). Otherwise the Bazel C++ toolchain's compiler
    and sysroot, so the AOTI .so has the same glibc floor as the op library.
    """
    if os.environ.get("CXX"):
        return os.environ["CXX"], [], [], f"{os.environ['CXX']} (from $CXX, no sysroot)"
    found = runfile(_TOOLCHAIN_JSON)
    if found is None:
        # Outside Bazel (the wheel), as torch itself compiles: the package then
        # needs this machine's glibc, not the sysroot's.
        return "g++", [], [], "g++ from PATH (no Bazel toolchain, no sysroot)"
    info = read_compiler_info(*found)
    what = "with the sysroot" if info["sysroot"] else "host headers and libraries"
    return (
        info["compiler"],
        info["compile_flags"],
        info["link_flags"],
        f"{info['compiler']} ({what})",
    )


def real_cxx() -> str:
    real = _toolchain_compiler()[0]
    real_path = shutil.which(real)
    if real_path is None:
        raise ExportError(f"C++ compiler {real!r} not found (set CXX)")
    return real_path


# Set by --profile-compile: the wrapper appends "START END ARGS..." per compiler run.
COMPILE_LOG_ENV = "MY_OPS_COMPILE_LOG"


# The LibTorch libraries a CPU package's model library links (and so NEEDs): never libtorch.so.
CPU_PACKAGE_LIBTORCH_LIBRARIES = ("torch_cpu", "c10")


def torch_library_dir() -> str:
    """The folder of the running torch's shared libraries, which the model's link searches."""
    from torch.utils import cpp_extension

    return cpp_extension.TORCH_LIB_PATH


def write_cxx_wrapper(bindir: str) -> tuple[str, str]:
    """Compiler wrapper for Inductor: the toolchain's sysroot, and a non-executable stack.

    Returns the wrapper's path (in `bindir`) and a description of the compiler
    behind it. The file's content depends only on the toolchain and the torch
    it links, so a cached folder keeps one path and one command line for
    Inductor's caches.

    Inductor emits CPU constants as a .S file without a .note.GNU-stack
    section, so the linked .so asks for an executable stack and glibc >= 2.41
    refuses to dlopen it. --noexecstack on every assembler run and -z
    noexecstack on the shared link fixes that without the much slower
    C++-array constant path (use_consts_asm_build=False). The linker flags must
    not go on the precompiled-header step, which is not a link.

    The shared link also gets LibTorch's library folder (-L), which Inductor
    leaves out when it links no LibTorch library of its own choosing
    (link_libtorch off: see inductor_options).
    """
    _, compile_flags, link_flags, what = _toolchain_compiler()
    real_path = real_cxx()
    os.makedirs(bindir, exist_ok=True)
    # Keep the g++/clang++ name: Inductor picks flags by the compiler's name.
    name = os.path.basename(real_path)
    name = "g++" if name.startswith("g++") else "clang++" if name.startswith("clang++") else name
    path = os.path.join(bindir, name)
    before = " ".join(shlex.quote(f) for f in compile_flags + link_flags)
    shared_link = shlex.quote(f"-L{torch_library_dir()}") + " -Wl,-z,noexecstack"
    run = f'{shlex.quote(real_path)} {before} "$@" -Wa,--noexecstack'
    script = (
        "#!/bin/sh\n"
        'for a in "$@"; do\n'
        f'  if [ "$a" = -shared ]; then set -- "$@" {shared_link}; break; fi\n'
        "done\n"
        f'[ -z "${COMPILE_LOG_ENV}" ] && exec {run}\n'
        "start=$(date +%s.%N)\n"
        f"{run}\n"
        "rc=$?\n"
        f'echo "$start $(date +%s.%N) $*" >> "${COMPILE_LOG_ENV}"\n'
        "exit $rc\n"
    )
    # Replaced whole, never rewritten in place: another export may be running it.
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=bindir)
    with os.fdopen(fd, "w") as f:
        f.write(script)
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return path, what


def compiler_identity() -> dict[str, Any]:
    """What the cache key needs of the compiler: path, version and flags (sysroot or not)."""
    real, compile_flags, link_flags, _ = _toolchain_compiler()
    return {
        "path": real_cxx(),
        "version": program_version(real),
        "compile_flags": compile_flags,
        "link_flags": link_flags,
    }


def compiler_record(cxx: str | None = None) -> dict[str, str]:
    """What manifest.json says of the compiler that built the package's C++.

    cxx is another target's compiler; by default the one Inductor runs here.
    """
    if cxx is None:
        path, what = real_cxx(), _toolchain_compiler()[3]
    else:
        path, what = cxx, f"{cxx} (the target's toolchain, with its sysroot)"
    version = program_version(path).splitlines()
    return {"path": path, "version": version[0] if version else "", "how": what}


def program_version(program: str) -> str:
    try:
        out = subprocess.run(
            [program, "--version"], capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise ExportError(f"cannot run {program} --version: {e}") from e
    return out.stdout.strip()


def input_signature(ep: Any) -> str | None:
    """Describe the accepted inputs for the C++ loader's validation, as JSON text.

    One object per input: {"dtype": c10 name, "sizes": [{"min": LO, "max": HI},
    ...]}, with "max" null when a dynamic dim is unbounded and min == max for a
    static one (deploy/loader/input_signature.h reads it). Returns None when an
    input is not a plain tensor of a dtype the contract names, in which case
    the loader falls back to AOTI's runtime checks.
    """
    import sympy
    import torch

    dtypes = load_contract().input_dtypes
    user_inputs = set(ep.graph_signature.user_inputs)
    inputs = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            return None
        dtype = dtypes.get(str(val.dtype).removeprefix("torch."))
        if dtype is None:
            return None
        sizes = []
        for d in val.shape:
            if isinstance(d, int):
                sizes.append({"min": d, "max": d})
                continue
            vr = ep.range_constraints.get(d.node.expr)
            if vr is None:
                return None
            # An unbounded dim's upper bound is torch's int_oo, whose is_finite
            # is True (sympy derives it from is_integer): only an Integer is a bound.
            hi = int(vr.upper) if isinstance(vr.upper, sympy.Integer) else None
            sizes.append({"min": int(vr.lower), "max": hi})
        inputs.append({"dtype": dtype, "sizes": sizes})
    return json.dumps(inputs, separators=(",", ":"))


def keep_precompiled_headers(folder: str | None, env: ScopedEnvironment) -> dict[str, Any]:
    """The precompiled-header option, and where Inductor is to keep the headers.

    Precompiling the wrapper's and the kernels' headers takes about 20 s on
    2 cores and saves about 9 s of each compile that uses them; Inductor puts
    them in $TMPDIR, which the export deletes. So they are precompiled only
    when `folder` (in the toolchain's cache entry) can keep them for the next
    export. Inductor reads the folder from a module attribute at compile time
    (set in `env`, so put back when the export ends);
    a torch without it gets no precompiled headers, which is slower only.
    """
    from torch._inductor import codecache

    if folder is None or not hasattr(codecache, "_HEADER_DIR"):
        return {"aot_inductor.precompile_headers": False}
    env.set_attribute(codecache, "_HEADER_DIR", folder)
    env.set_attribute(codecache, "_HEADER_LOCK_DIR", os.path.join(folder, "locks"))
    return {"aot_inductor.precompile_headers": True}


def inductor_options(
    device: str, isa: str, cxx: str, signature: str | None, *, cross: bool = False
) -> dict[str, Any]:
    """Every Inductor config the export sets, as aoti_compile_and_package takes them.

    For a cross target (`cross`) the host's -march and SIMD width stay unset:
    the target's -march replaces -march=native when the C++ is compiled.
    """
    opts: dict[str, Any] = {
        "cpp.cxx": (None, cxx),
        # The loader turns on AOTI_RUNTIME_CHECK_INPUTS; without this those
        # checks reject size-1 dims even though the model handles them (the
        # compiler assumes dynamic sizes are >= 2).
        "aot_inductor.check_lowerbound": False,
        # Inductor follows each call it does not generate (our ops, ATen fallbacks) with an
        # assert_size_stride of the output, run whenever AOTI_RUNTIME_CHECK_INPUTS is set, as
        # the loader sets it; each builds a std::stringstream, which measured about 1 us a call,
        # more than a small op's work (docs/PERFORMANCE.md, "The custom-op tax"). The inputs stay
        # checked by the model's own check_input_N under the same variable; an op's output shape
        # is its fake's, which opcheck checks for every op.
        "size_asserts": False,
    }
    if signature is not None:
        opts["aot_inductor.metadata"] = {load_contract().input_metadata_key: signature}
    if cross:
        return opts
    opts["cpp.march"] = MARCH[isa]
    if isa == "portable":
        # x86-64-v3 = AVX2/FMA: runs on any x86 CPU from the last ~10 years,
        # unlike the default which targets the build machine (often AVX-512).
        opts["cpp.simdlen"] = 256
    if device == "cpu":
        # The model calls LibTorch through its C shims, which libtorch_cpu.so defines. Inductor's
        # own link line adds -ltorch, and libtorch.so NEEDs libtorch_cuda.so and with it the whole
        # CUDA stack, which every CPU run would then load (hundreds of MB). With link_libtorch off
        # Inductor links no LibTorch library but those custom_op_libs names; the compiler wrapper
        # gives their folder. (A CUDA package needs libtorch_cuda.so and keeps Inductor's link.)
        opts["aot_inductor.link_libtorch"] = False
        opts["aot_inductor.custom_op_libs"] = list(CPU_PACKAGE_LIBTORCH_LIBRARIES)
    if device == "cuda":
        # Otherwise AOTI writes each kernel's cubin beside the model's .so and
        # loads it lazily from the package's extraction folder at first call,
        # a file that can be missing or swapped by then.
        opts["aot_inductor.embed_kernel_binary"] = True
        # Fatbins instead of cubins for the export GPU alone: PTX that newer
        # GPUs compile at load time, plus SASS for TORCH_CUDA_ARCH_LIST.
        opts["aot_inductor.emit_multi_arch_kernel"] = True
    return opts


# --mode: what the compile spends on the package's speed. The names are torch.compile's.
MAX_AUTOTUNE = "max-autotune"
NO_AUTOTUNE = "no-autotune"
MODES = (MAX_AUTOTUNE, NO_AUTOTUNE)

# Measured on two real models at 16 to 128 tokens, 1 and 2 threads (docs/PERFORMANCE.md, "Real
# models against ONNX Runtime"): freezing folds the weights into the program and prepacks them,
# which Inductor's C++ GEMM template needs; freezing alone gained nothing. The export takes about
# twice as long, and the weights are no longer the program's parameters, so a frozen package
# takes no weights file (weights.py). ATen stays a candidate for the matrix products the template
# does not take (see prefer_cpp_gemm_template).
_MODE_OPTIONS: dict[str, dict[str, Any]] = {
    MAX_AUTOTUNE: {
        "freezing": True,
        "max_autotune": True,
        "max_autotune_gemm_backends": "CPP,ATEN",
        # Inductor writes a table and a JSON line to stderr for every matrix product it tunes
        # (hundreds for an LLM), which would bury the export's one line per stage.
        "autotune_num_choices_displayed": 0,
        "max_autotune_report_choices_stats": False,
    },
    NO_AUTOTUNE: {},
}


def mode_options(mode: str) -> dict[str, Any]:
    """The Inductor configs a --mode sets (--inductor-option flags come after and win)."""
    return dict(_MODE_OPTIONS[mode])


def prefers_cpp_gemm_template(mode: str) -> bool:
    """Whether a --mode compiles with prefer_cpp_gemm_template (part of the cache key)."""
    return mode == MAX_AUTOTUNE


@contextlib.contextmanager
def prefer_cpp_gemm_template(enabled: bool) -> Iterator[None]:
    """While compiling: where Inductor's C++ GEMM template takes a matrix product, it alone is
    benchmarked (its blockings against each other); ATen's kernel only where it does not.

    Inductor times each candidate by repeating one product on one weight, which then sits in the
    cache; in a model every product reads its weights from memory, once per call. There ATen won
    the timing of the fused gate and up projections of a 30-layer LLM at 64 tokens and lost the
    model: 321 ms per call against 203 ms with the template everywhere, at 1 thread. Leaving ATen
    out of the backends instead would fail the compile of any product the template cannot take
    (one without a constant weight).
    """
    if not enabled:
        yield
        return
    from torch._inductor import select_algorithm
    from torch._inductor.codegen.cpp_template_kernel import CppTemplateCaller

    def templates_where_they_apply(choices: list[Any]) -> list[Any]:
        templates = [c for c in choices if isinstance(c, CppTemplateCaller)]
        return templates or choices

    selector = select_algorithm.get_algorithm_selector_cache()
    selector.add_preprocessing_fn(templates_where_they_apply)
    try:
        yield
    finally:
        # Only ours: a caller's own preprocessing functions stay registered.
        selector.preprocessing_fns.remove(templates_where_they_apply)


def frozen(options: dict[str, Any]) -> bool:
    """Whether a compile with these inductor_configs freezes the weights into the package."""
    import torch._inductor.config as config

    return bool(options.get("freezing", config.freezing))


def weights_beside(device: str, cross: bool, options: dict[str, Any]) -> bool:
    """Whether a package compiled with these inductor_configs can leave its weights out, for
    the runtime to map from weights.bin beside it.

    A CUDA package's weights go to the device, where the copy is the one that counts; a frozen
    one's are prepacked under Inductor's names; a cross target's C++ is compiled here with the
    weights as an object file of its own (cross.py).
    """
    return device == "cpu" and not cross and not frozen(options)


def without_weights(options: dict[str, Any], metadata: str) -> dict[str, Any]:
    """`options` for a package compiled without its weights, whose metadata lists the constants
    it takes (weights.weights_metadata)."""
    entries = dict(options.get("aot_inductor.metadata") or {})
    entries[load_contract().weights_metadata_key] = metadata
    return options | {
        "aot_inductor.package_constants_in_so": False,
        "aot_inductor.metadata": entries,
    }


_MISSING = object()


# What the exporter sets itself, and why a user's value would break the package: the C shims
# it derives from the op library (c_shims.py), which the manifest names; where the weights go,
# which decides the files it writes.
EXPORTER_OWNED_OPTIONS = {
    "aot_inductor.custom_ops_to_c_shims": (
        "the exporter sets this one from the op library (pass {off} to call the ops through the "
        "ProxyExecutor)"
    ),
    "aot_inductor.package_constants_in_so": (
        "the exporter sets this one: a CPU package keeps its weights in weights.bin beside it, "
        "others inside it"
    ),
}


def parse_inductor_options(items: list[str], name: str = "--inductor-option") -> dict[str, Any]:
    """KEY=VALUE settings (--inductor-option flags) as aoti_compile_and_package's
    inductor_configs.

    Raises ValueError naming the setting (`name`) when KEY is not an Inductor config.
    """
    options: dict[str, Any] = {}
    for item in items:
        import torch._inductor.config as config

        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{name} must be KEY=VALUE, got {item!r}")
        if key in EXPORTER_OWNED_OPTIONS:
            off = "--no-c-shims" if name.startswith("--") else "c_shims=False"
            raise ValueError(f"{name} {key}: " + EXPORTER_OWNED_OPTIONS[key].format(off=off))
        node: Any = config
        for part in key.split("."):
            node = getattr(node, part, _MISSING)
            if node is _MISSING:
                raise ValueError(f"{name} {item!r}: torch._inductor.config has no {key}")
        try:
            options[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key] = text
    return options
