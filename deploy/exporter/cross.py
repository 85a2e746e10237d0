"""Export for another CPU: --target linux-aarch64 on an x86-64 host.

Inductor compiles for the machine it runs on, so a cross export takes three
steps:
1. generate the model's C++ on the host (aot_inductor.package_cpp_only),
   with Inductor's vector ISA forced to the target's (NEON) and its caches off;
2. compile that C++ with the target's C++ toolchain and LibTorch, the flags
   taken from the generated flags file with -march=native replaced by the
   target's baseline, and the weights (an x86-64 object file) re-emitted for
   the target;
3. repackage the .pt2 with the target's shared library and AOTI_MACHINE.

The toolchain, the target's LibTorch and the target's libmy_ops.so come from
the exporter's runfiles (//deploy/exporter, built through a platform
transition), described by //tools/cc:compiler_info.bzl's JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import zipfile
from typing import Any

from . import vec_isa
from .compile import read_compiler_info, runfile
from .errors import EXIT_USAGE, ExportError, first_line

HOST_TARGET = "linux-x86_64"


@dataclasses.dataclass(frozen=True)
class CrossTarget:
    name: str
    machine: str  # AOTI_MACHINE, as platform.machine() on the target
    march: str  # the baseline -march, also the manifest's isa
    # //deploy:export's data for this target, as runfiles keys.
    compiler_json: str
    op_library: str


TARGETS = {
    "linux-aarch64": CrossTarget(
        name="linux-aarch64",
        machine="aarch64",
        # armv8-a includes the FP and Advanced SIMD (NEON) units that
        # Inductor's NEON code needs; every ARM64 Linux CPU has them.
        march="armv8-a",
        compiler_json="_main/deploy/exporter/linux_aarch64_compiler/target_compiler.json",
        op_library="_main/deploy/exporter/linux_aarch64_ops/libmy_ops.so",
    ),
}

# The model's name inside the package: data/aotinductor/<MODEL_NAME>/.
MODEL_NAME = "model"

# Generated C++ is compiled with these besides the flags file's own. The
# wheel's C++ ABI and standard; -fPIC for a shared library.
_EXTRA_COMPILE_FLAGS = ["-std=c++20", "-D_GLIBCXX_USE_CXX11_ABI=1", "-fPIC", "-Wno-psabi"]


@dataclasses.dataclass(frozen=True)
class TargetFiles:
    compiler: str
    compile_flags: list[str]
    link_flags: list[str]
    op_library: str


def target_files(target: CrossTarget) -> TargetFiles:
    """The target's compiler, its flags (sysroot, LibTorch) and libmy_ops.so, from runfiles."""
    found = runfile(target.compiler_json)
    if found is None:
        # The wheel's exporter has neither: a usage error, like any flag this
        # installation cannot honour.
        raise ExportError(
            f"--target {target.name} needs the {target.name} toolchain and op library of "
            "the Bazel build, which this exporter does not have; run tools/bazel run "
            "//deploy:export in a checkout",
            EXIT_USAGE,
        )
    library = runfile(target.op_library)
    if library is None:
        raise ExportError(
            f"this exporter's runfiles have the {target.name} compiler but not {target.op_library}"
        )
    info = read_compiler_info(*found)
    return TargetFiles(
        compiler=info["compiler"],
        compile_flags=info["compile_flags"] + info["library_compile_flags"],
        link_flags=info["link_flags"] + info["library_link_flags"],
        op_library=os.path.realpath(library[0]),
    )


def forced_vec_isa(target: CrossTarget) -> contextlib.AbstractContextManager[None]:
    """Make Inductor generate the target's vector code (NEON) instead of the host's.

    Without it Inductor would probe the host CPU, compiling NEON code for the host.
    Checked by deploy/exporter/tests/test_export_cross.py against the generated flags file.
    """
    if target.machine != "aarch64":
        raise ExportError(f"no vector ISA known for {target.machine}")
    return vec_isa.forced_vec_isa("VecNEON")


def cpp_only_options() -> dict[str, Any]:
    """Inductor options that make aoti_compile_and_package write C++ instead of a .so.

    Caches are off: a cache hit once returned host (scalar) code under the
    NEON macros. Nothing is compiled here, so no header is precompiled.
    """
    return {
        "aot_inductor.package_cpp_only": True,
        "aot_inductor.model_name_for_generated_files": MODEL_NAME,
        "aot_inductor.precompile_headers": False,
        "force_disable_caches": True,
    }


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise ExportError(f"{what}: cannot run {argv[0]}: {e.strerror}") from e
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "error" in ln]
        detail = (lines or (proc.stderr or proc.stdout).splitlines() or ["no output"])[0]
        raise ExportError(f"{what} failed (exit {proc.returncode}): {detail.strip()}")


def target_compile_flags(flags_file: dict[str, Any], march: str) -> list[str]:
    """The compile flags of Inductor's flags file, for the target.

    -march=native (the host) becomes the target's baseline; the host's include
    dirs (Python's, the host torch's) are dropped, since the target's LibTorch
    headers come from the toolchain description; -g1 is dropped so the shared
    library carries no host paths.
    """
    flags = [f"-D{d.strip()}" for d in flags_file["definitions"]]
    for flag in flags_file["cflags"]:
        if flag.startswith("march="):
            flags.append(f"-march={march}")
        elif flag in ("g1", "shared"):
            continue
        else:
            flags.append(f"-{flag}")
    return flags


# The generated weights object is an x86-64 ELF file: its .lrodata section
# holds the constants between these symbols, which the wrapper references.
_WEIGHTS_ASM = """\
    .section .lrodata,"a"
    .balign 64
    .globl _binary_constants_bin_start
_binary_constants_bin_start:
    .incbin "{blob}"
    .globl _binary_constants_bin_end
_binary_constants_bin_end:
    .section .note.GNU-stack,"",%progbits
"""


def cross_compile(
    generated: str, package: str, target: CrossTarget, files: TargetFiles, work: str
) -> None:
    """Compile a package_cpp_only .pt2 for `target` and write the runnable package."""
    src = os.path.join(work, "generated")
    try:
        with zipfile.ZipFile(generated) as z:
            names = z.namelist()
            z.extractall(src)
    except (OSError, zipfile.BadZipFile) as e:
        raise ExportError(f"cannot read the generated sources: {first_line(e)}") from e
    prefix = names[0].split("/", 1)[0]
    model_dir = f"{prefix}/data/aotinductor/{MODEL_NAME}"
    base = os.path.join(src, model_dir, MODEL_NAME)
    with open(f"{base}.wrapper_compile_flags.json") as f:
        flags_file = json.load(f)

    obj = os.path.join(work, "wrapper.o")
    compile_argv = [
        files.compiler,
        *files.compile_flags,
        *target_compile_flags(flags_file, target.march),
        *_EXTRA_COMPILE_FLAGS,
        "-c",
        f"{base}.wrapper.cpp",
        "-o",
        obj,
    ]
    _run(compile_argv, f"compiling the model for {target.name}")

    blob = os.path.join(work, "weights.bin")
    _run(
        ["objcopy", "-O", "binary", "--only-section=.lrodata", f"{base}.weights.o", blob],
        "extracting the weights",
    )
    asm = os.path.join(work, "weights.S")
    with open(asm, "w") as f:
        f.write(_WEIGHTS_ASM.format(blob=blob))
    weights = os.path.join(work, "weights.o")
    _run([files.compiler, "-c", asm, "-o", weights], f"assembling the weights for {target.name}")

    so = os.path.join(work, f"{MODEL_NAME}.wrapper.so")
    link_argv = [
        files.compiler,
        "-shared",
        "-fopenmp",
        obj,
        weights,
        "-o",
        so,
        *files.link_flags,
        "-Wl,-z,noexecstack",
        "-Wl,--build-id=sha1",
    ]
    _run(link_argv, f"linking the model for {target.name}")
    _repackage(generated, package, model_dir, so, target)


# Generated files the runnable package does not need: the sources, the build
# description and the x86-64 weights object, now inside the shared library.
_SOURCE_SUFFIXES = (
    ".wrapper.cpp",
    "_compile_flags.json",
    "_linker_flags.json",
    "CMakeLists.txt",
    "script.ld",
    ".weights.o",
)


def _repackage(generated: str, package: str, model_dir: str, so: str, target: CrossTarget) -> None:
    """The generated .pt2 with the target's .so and AOTI_MACHINE, entries stored uncompressed."""
    metadata_name = f"{model_dir}/{MODEL_NAME}.wrapper_metadata.json"
    with (
        zipfile.ZipFile(generated) as src,
        zipfile.ZipFile(package, "w", zipfile.ZIP_STORED) as dst,
    ):
        for info in src.infolist():
            if info.filename.endswith(_SOURCE_SUFFIXES):
                continue
            data = src.read(info.filename)
            if info.filename == metadata_name:
                metadata = json.loads(data)
                metadata["AOTI_MACHINE"] = target.machine
                data = json.dumps(metadata).encode()
            dst.writestr(zipfile.ZipInfo(info.filename, date_time=info.date_time), data)
        with open(so, "rb") as f:
            dst.writestr(
                zipfile.ZipInfo(
                    f"{model_dir}/{MODEL_NAME}.wrapper.so", date_time=(1980, 1, 1, 0, 0, 0)
                ),
                f.read(),
            )
