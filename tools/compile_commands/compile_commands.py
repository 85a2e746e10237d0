"""Writes compile_commands.json at the workspace root, for clangd and other C++ tools.

    tools/bazel run //tools:compile_commands [-- BAZEL_FLAGS...]

The compile commands are Bazel's own, read with `bazel aquery`: one entry per
C++ or CUDA source file of this repository (//ops, //deploy, //tools and what
their targets compile), with execroot-relative paths made absolute so that the
database works from the workspace root. BAZEL_FLAGS (e.g. --config=asan) go to
every Bazel command, so the entries match a build with the same flags. The
headers that the build generates are built too, without compiling anything.
See README.md beside this file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

# Patterns whose targets, and everything those compile, the database covers.
SCOPE = ("//ops/...", "//deploy/...", "//tools/...")
MNEMONICS = ("CppCompile", "CudaCompile")
# The headers and other inputs a compile needs, generated ones included, but no
# object files: an output group that every C++ rule has.
PREREQUISITES_OUTPUT_GROUP = "compilation_prerequisites_INTERNAL_"
# CudaCompile runs nvcc through @rules_cuda's wrapper script (matched by name,
# wherever the repository sits): `script nm objcopy obj nvcc ARGS...`.
CUDA_WRAPPER = "nvcc_stable_symbols.sh"
CUDA_WRAPPER_OWN_ARGS = 3  # nm, objcopy, obj
OUTPUT_NAME = "compile_commands.json"

# Flags whose value may be an execroot-relative path glued to the flag.
_JOINED_PATH_FLAGS = (
    "-isystem",
    "-iquote",
    "-idirafter",
    "-isysroot",
    "-include",
    "-imacros",
    "-I",
    "-L",
    "-B",
)
# GCC's own headers (stddef.h, the x86 intrinsics, omp.h), which toolchains
# that pass -nostdinc list as a system include folder.
_GCC_BUILTIN_INCLUDE = re.compile(r"/lib/gcc(-cross)?/[^/]+/[^/]+/include(-fixed)?$")
_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".C", ".cu")
_ARM_MARKERS = ("aarch64", "arm64", "armv")


class Error(Exception):
    """A failure to report in one line, without a traceback."""


def log(message: str) -> None:
    print(f"compile_commands: {message}", file=sys.stderr, flush=True)


def strip_cuda_wrapper(arguments: Sequence[str]) -> list[str]:
    """The nvcc command line inside a CudaCompile action's wrapper call.

    clangd has to see the compiler as arguments[0], and the wrapper's own
    arguments are tools and files that are no compiler flags. Other command
    lines come back unchanged.
    """
    if not arguments or os.path.basename(arguments[0]) != CUDA_WRAPPER:
        return list(arguments)
    compiler_index = 1 + CUDA_WRAPPER_OWN_ARGS
    if len(arguments) <= compiler_index:
        raise Error(
            f"{CUDA_WRAPPER} is called with {len(arguments) - 1} arguments; expected "
            f"{CUDA_WRAPPER_OWN_ARGS} of its own, then nvcc and its flags"
        )
    return list(arguments[compiler_index:])


def drop_build_only_flags(arguments: Sequence[str]) -> list[str]:
    """Leaves out flags that only matter to the build's outputs.

    The dependency-file flags name Bazel's own .d files in bazel-out, which
    no tool reading the database should write (clangd 14 does not, others
    may); -frandom-seed names the build's object file, which means nothing to
    a parse.
    """
    kept: list[str] = []
    skip_next = False
    for argument in arguments:
        if skip_next:
            skip_next = False
        elif argument in ("-MF", "-MT", "-MQ"):
            skip_next = True
        elif argument in ("-MD", "-MMD") or argument.startswith("-frandom-seed="):
            pass
        else:
            kept.append(argument)
    return kept


def clang_compatible(arguments: Sequence[str]) -> list[str]:
    """A GCC command line that clang (so clangd) parses as GCC compiles it.

    clang rejects -fno-canonical-system-headers, and cannot parse GCC's
    intrinsics headers (it redefines __rdtsc and fails after 20 errors), so
    its own builtin headers have to come first: -nostdlibinc instead of
    -nostdinc keeps them, and GCC's folder moves behind every other one, where
    it still supplies the headers that clang lacks.
    """
    result: list[str] = []
    i = 0
    while i < len(arguments):
        argument = arguments[i]
        if argument == "-fno-canonical-system-headers":
            pass
        elif argument == "-nostdinc":
            result.append("-nostdlibinc")
        elif (
            argument == "-isystem"
            and i + 1 < len(arguments)
            and _GCC_BUILTIN_INCLUDE.search(arguments[i + 1])
        ):
            result += ["-idirafter", arguments[i + 1]]
            i += 1
        else:
            result.append(argument)
        i += 1
    return result


def is_nvcc(arguments: Sequence[str]) -> bool:
    return bool(arguments) and os.path.basename(arguments[0]).startswith("nvcc")


def source_file(arguments: Sequence[str]) -> str | None:
    """The file a compile command compiles: the argument after -c, else the one source path."""
    for flag, value in zip(arguments, arguments[1:], strict=False):
        if flag == "-c" and not value.startswith("-"):
            return value
    sources = [a for a in arguments[1:] if a.endswith(_SOURCE_SUFFIXES) and not a.startswith("-")]
    return sources[0] if len(sources) == 1 else None


def rewrite_path(path: str, execution_root: str, output_base: str) -> str:
    """An execroot-relative path as an absolute one; other strings unchanged.

    external/ is taken from the output base, where every repository lives,
    because the execroot only links the ones that some action used.
    """
    for prefix, base in (("external", output_base), ("bazel-out", execution_root)):
        if path == prefix or path.startswith(prefix + "/"):
            return f"{base}/{path}"
    return path


def rewrite_argument(argument: str, execution_root: str, output_base: str) -> str:
    """rewrite_path() applied to the paths in one compiler argument.

    Covers a bare path, --flag=PATH (also nested, as in -Xcompiler=--sysroot=PATH),
    a path glued to -I, -isystem, -iquote and the like, and -Wl,/-Wp,/-Wa,
    lists. Macro definitions stay as written.
    """

    def again(part: str) -> str:
        return rewrite_argument(part, execution_root, output_base)

    if argument.startswith(("-D", "-U")):
        return argument
    if argument.startswith(("-Wl,", "-Wp,", "-Wa,")):
        head, *parts = argument.split(",")
        return ",".join([head, *(again(part) for part in parts)])
    if argument.startswith("-") and "=" in argument:
        flag, _, value = argument.partition("=")
        return f"{flag}={again(value)}"
    for flag in _JOINED_PATH_FLAGS:
        if argument.startswith(flag) and len(argument) > len(flag):
            return flag + rewrite_path(argument[len(flag) :], execution_root, output_base)
    return rewrite_path(argument, execution_root, output_base)


def targets_x86_64(arguments: Sequence[str], configuration: str) -> bool:
    """Whether a compile command builds for x86-64 rather than for ARM.

    Bazel 7 names a transitioned configuration's output folder after the host
    CPU (k8-fastbuild-ST-...) even when it targets aarch64, so the
    configuration name alone does not tell; the compiler's name, -march,
    --target and the sysroot do.
    """
    hints = [configuration.lower(), os.path.basename(arguments[0]) if arguments else ""]
    hints += [a for a in arguments if a.startswith(("-march=", "--target=", "--sysroot="))]
    return not any(marker in hint for hint in hints for marker in _ARM_MARKERS)


def _preference(candidate: dict, top_level: str) -> tuple:
    """Sort key of the actions that compile one file; the lowest wins.

    A target (not exec) configuration; then the top-level one, whose generated
    headers the header build makes and which follows the user's flags (x86-64
    unless they ask for --config=aarch64); then x86-64; then not transitioned;
    then anything stable, so that the choice does not depend on aquery's order.
    """
    configuration = candidate["configuration"]
    return (
        candidate["is_tool"],
        configuration != top_level,
        not targets_x86_64(candidate["raw_arguments"], configuration),
        "-ST-" in configuration,
        configuration,
        candidate["raw_arguments"],
    )


def entries_from_aquery(
    aquery: dict, workspace: str, execution_root: str, output_base: str, top_level: str = ""
) -> tuple[list[dict], list[str]]:
    """compile_commands.json entries from `aquery --output=jsonproto` output.

    Returns the entries, sorted by file, and the labels of the targets they
    come from. Only sources of this repository get an entry (not external/ and
    not generated ones under bazel-out/), one per file: when several actions
    compile a file, the one _preference() ranks first. `top_level` names the
    top-level configuration (k8-fastbuild: `bazel info bazel-bin`'s folder).
    """
    configurations = {c["id"]: c for c in aquery.get("configuration", [])}
    labels = {t["id"]: t["label"] for t in aquery.get("targets", [])}
    best: dict[str, dict] = {}
    for action in aquery.get("actions", []):
        if action.get("mnemonic") not in MNEMONICS:
            continue
        arguments = strip_cuda_wrapper(action.get("arguments", []))
        source = source_file(arguments)
        if source is None or source.startswith(("/", "external/", "bazel-out/", "../")):
            continue
        configuration = configurations.get(action.get("configurationId"), {})
        candidate = {
            "raw_arguments": arguments,
            "configuration": configuration.get("mnemonic", ""),
            "is_tool": bool(configuration.get("isTool", False)),
            "label": labels.get(action.get("targetId"), ""),
        }
        if source not in best or _preference(candidate, top_level) < _preference(
            best[source], top_level
        ):
            best[source] = candidate
    entries = []
    for source in sorted(best):
        arguments = drop_build_only_flags(best[source]["raw_arguments"])
        # nvcc's flags stay as they are: clang's CUDA mode would need others.
        if not is_nvcc(arguments):
            arguments = clang_compatible(arguments)
        entries.append(
            {
                "directory": workspace,
                "file": source,
                "arguments": [rewrite_argument(a, execution_root, output_base) for a in arguments],
            }
        )
    return entries, sorted({c["label"] for c in best.values() if c["label"]})


def aquery_expression(scope: Iterable[str] = SCOPE) -> str:
    return 'mnemonic("{}", deps({}))'.format("|".join(MNEMONICS), " + ".join(scope))


def write_atomically(path: Path, entries: list[dict]) -> None:
    """Writes beside `path` and renames, so an editor never reads half a file."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(entries, out, indent=2)
            out.write("\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


class Bazel:
    """tools/bazel in the workspace, with the user's flags after each command."""

    def __init__(self, workspace: Path, flags: Sequence[str]) -> None:
        self.executable = workspace / "tools" / "bazel"
        self.workspace = workspace
        self.flags = list(flags)

    def run(self, command: str, *args: str, capture: bool = False) -> str:
        argv = [str(self.executable), command, *self.flags, *args]
        # Bazel's own messages go straight to stderr: they are the progress of
        # a long build and the explanation when it fails.
        try:
            result = subprocess.run(
                argv,
                cwd=self.workspace,
                stdout=subprocess.PIPE if capture else sys.stderr,
                text=True,
                check=False,
            )
        except OSError as e:
            raise Error(f"cannot run {self.executable}: {e}") from None
        if result.returncode != 0:
            raise Error(
                f"`bazel {command}` failed (exit {result.returncode}); see Bazel's messages above"
            )
        return result.stdout if capture else ""


def generate(workspace: Path, bazel_flags: Sequence[str]) -> Path:
    bazel = Bazel(workspace, bazel_flags)
    start = time.monotonic()
    info = bazel.run("info", "execution_root", "output_base", "bazel-bin", capture=True)
    paths = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    try:
        execution_root, output_base = paths["execution_root"], paths["output_base"]
        top_level = Path(paths["bazel-bin"]).parent.name
    except KeyError:
        raise Error(f"unexpected `bazel info` output: {info!r}") from None

    log(f"running aquery over {' '.join(SCOPE)}")
    query = aquery_expression()
    output = bazel.run(
        "aquery", "--output=jsonproto", "--include_artifacts=false", query, capture=True
    )
    try:
        aquery = json.loads(output) if output.strip() else {}
    except json.JSONDecodeError as e:
        raise Error(f"aquery printed something that is not JSON ({e})") from None
    entries, labels = entries_from_aquery(
        aquery, str(workspace), execution_root, output_base, top_level
    )
    if not entries:
        raise Error(f"aquery found no compile actions for sources of this repository ({query})")

    # Generated headers (and the _virtual_includes links) exist only once built.
    log(
        f"building the headers of {len(labels)} targets (output group {PREREQUISITES_OUTPUT_GROUP})"
    )
    bazel.run(
        "build",
        f"--output_groups={PREREQUISITES_OUTPUT_GROUP}",
        # A target seen only through a platform transition may be incompatible at the top level.
        "--skip_incompatible_explicit_targets",
        "--",
        *labels,
    )

    path = workspace / OUTPUT_NAME
    write_atomically(path, entries)
    log(f"{len(entries)} entries written to {path} in {time.monotonic() - start:.0f} s")
    return path


def parse_args(argv: Sequence[str]) -> list[str]:
    parser = argparse.ArgumentParser(
        prog="tools/bazel run //tools:compile_commands --",
        description=(
            f"Writes {OUTPUT_NAME} at the workspace root from `bazel aquery`, one entry per "
            f"C++/CUDA source compiled for {', '.join(SCOPE)}. Any other argument is a Bazel "
            "flag passed to each Bazel command, e.g. --config=asan."
        ),
        allow_abbrev=False,
    )
    _, bazel_flags = parser.parse_known_args(argv)
    return bazel_flags


def main(argv: Sequence[str]) -> int:
    bazel_flags = parse_args(argv)
    workspace = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not workspace:
        log(
            "error: BUILD_WORKSPACE_DIRECTORY is not set; "
            "run this as `tools/bazel run //tools:compile_commands`"
        )
        return 2
    try:
        generate(Path(workspace), bazel_flags)
    except Error as e:
        log(f"error: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
