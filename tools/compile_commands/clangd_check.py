#!/usr/bin/env python3
"""Checks that clangd resolves every #include of a few sources through compile_commands.json.

    python3 tools/compile_commands/clangd_check.py [options] [FILE...] [-- BAZEL_FLAGS...]

Writes the database with `tools/bazel run //tools:compile_commands`, then runs
`clangd-14 --check` on each FILE (default: a CPU kernel and two loader
sources). Fails on a "file not found" diagnostic (an #include that clangd
cannot resolve), on a FILE without its own entry in the database, and on a
clangd that does not finish. Other diagnostics do not count: the check is
about the database, not the code. Prints one line per problem and a summary
line.

Exit status: 0 when clean, 1 on a problem, 2 on a usage or setup error
(clangd-14 missing, a FILE that does not exist).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WORKSPACE = Path(__file__).resolve().parent.parent.parent
DEFAULT_FILES = (
    "ops/fused_bias_gelu/cpu.cpp",
    "deploy/loader/main.cpp",
    "deploy/runtime/src/runner.cpp",
)
INSTALL_HINT = "apt-get install clangd-14 libomp-14-dev"

# A diagnostic in `clangd --check`'s log, whatever its severity:
# E[time] [diag_id] Line N: message.
_DIAGNOSTIC = re.compile(r"^E\[[^\]]*\] \[(?P<id>[^\]]+)\] Line (?P<line>\d+): (?P<message>.*)$")
# A missing include (pp_file_not_found, with "in included file: " when it is
# missing deeper in the include chain) or a missing file on the command line.
_INCLUDE_DIAGNOSTIC_ID = re.compile(r"file_not_found|no_such_file")

_GUESSED = "clangd used a guessed compile command, not one from the database"

INCLUDE = "include"
NO_ENTRY = "no entry"
CLANGD = "clangd"


@dataclass(frozen=True)
class Problem:
    kind: str  # INCLUDE, NO_ENTRY or CLANGD
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"clangd_check: FAIL {where}: {self.message}"


def include_problems(file: str, log: str) -> list[Problem]:
    """The include diagnostics in a `clangd --check` log, and signs of a guessed command.

    clangd 14 words a command interpolated from a neighbouring file just like
    a real entry ("Compile command from CDB is:"), so has_entry() checks the
    database itself; this catches the other fallbacks: no database at all
    ("Generic fallback command is:") and newer clangds' "inferred from".
    """
    problems = []
    for line in log.splitlines():
        if "Generic fallback command is:" in line or "Compile command inferred from" in line:
            problems.append(Problem(NO_ENTRY, file, None, _GUESSED))
        match = _DIAGNOSTIC.match(line)
        if match and (
            _INCLUDE_DIAGNOSTIC_ID.search(match["id"]) or "file not found" in match["message"]
        ):
            problems.append(
                Problem(INCLUDE, file, int(match["line"]), f"{match['message']} [{match['id']}]")
            )
    return problems


def has_entry(database: list[dict], path: Path) -> bool:
    """Whether the database has an entry of its own for `path` (absolute)."""
    for entry in database:
        file = Path(entry.get("file", ""))
        if not file.is_absolute():
            file = Path(entry.get("directory", "")) / file
        if os.path.normpath(file) == os.path.normpath(path):
            return True
    return False


def check_file(clangd: str, database_dir: Path, database: list[dict], file: str) -> list[Problem]:
    path = WORKSPACE / file
    if not has_entry(database, path):
        return [
            Problem(NO_ENTRY, file, None, f"no entry in {database_dir / 'compile_commands.json'}")
        ]
    result = subprocess.run(
        [
            clangd,
            f"--compile-commands-dir={database_dir}",
            f"--check={path}",
            # --check then tries every editor feature at every token, which takes
            # minutes and crashes clangd 14 in some files (main.cpp); the
            # diagnostics are all out before that starts.
            "--check-lines=1",
        ],
        cwd=WORKSPACE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    problems = include_problems(file, result.stdout)
    # 3 is clangd's answer to any error diagnostic, which are not all ours to report.
    if result.returncode not in (0, 3) or "All checks completed" not in result.stdout:
        last = result.stdout.strip().splitlines()[-1:] or ["(no output)"]
        problems.append(
            Problem(
                CLANGD,
                file,
                None,
                f"clangd --check did not finish (exit {result.returncode}): {last[0]}",
            )
        )
    return problems


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 tools/compile_commands/clangd_check.py",
        usage="%(prog)s [options] [FILE...] [-- BAZEL_FLAGS...]",
        description=__doc__.split("\n\n", 2)[2],
        epilog="BAZEL_FLAGS go to `tools/bazel run //tools:compile_commands -- BAZEL_FLAGS`.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help=f"workspace-relative sources (default: {' '.join(DEFAULT_FILES)})",
    )
    parser.add_argument(
        "--clangd", default="clangd-14", help="the clangd binary (default: clangd-14)"
    )
    parser.add_argument(
        "--compile-commands-dir",
        type=Path,
        default=WORKSPACE,
        help="where compile_commands.json is (default: the workspace root)",
    )
    parser.add_argument(
        "--no-generate",
        action="store_true",
        help="check the database that is there instead of writing it first",
    )
    # Everything after a `--` goes to `tools/bazel run //tools:compile_commands -- ...`.
    argv = list(argv)
    bazel_flags = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.bazel_flags = bazel_flags
    # clangd runs from the workspace root, this script from anywhere.
    args.compile_commands_dir = args.compile_commands_dir.absolute()
    args.files = args.files or list(DEFAULT_FILES)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    clangd = shutil.which(args.clangd)
    if clangd is None:
        print(
            f"clangd_check: error: {args.clangd} not found; install it: {INSTALL_HINT}",
            file=sys.stderr,
        )
        return 2
    missing = [f for f in args.files if not (WORKSPACE / f).is_file()]
    if missing:
        print(
            f"clangd_check: error: no such file in {WORKSPACE}: {' '.join(missing)}",
            file=sys.stderr,
        )
        return 2

    if not args.no_generate:
        command = [
            str(WORKSPACE / "tools" / "bazel"),
            "run",
            "//tools:compile_commands",
            "--",
            *args.bazel_flags,
        ]
        if subprocess.run(command, cwd=WORKSPACE, check=False).returncode != 0:
            print("clangd_check: FAIL tools/bazel run //tools:compile_commands failed (see above)")
            return 1
    database_path = args.compile_commands_dir / "compile_commands.json"
    try:
        database = json.loads(database_path.read_text())
    except (OSError, ValueError) as e:
        print(f"clangd_check: FAIL cannot read {database_path}: {e}")
        return 1

    problems: list[Problem] = []
    for file in args.files:
        print(f"clangd_check: checking {file}", file=sys.stderr, flush=True)
        problems += check_file(clangd, args.compile_commands_dir, database, file)
    for problem in problems:
        print(problem)
    print(summary(len(args.files), problems))
    return 1 if problems else 0


def summary(checked: int, problems: Sequence[Problem]) -> str:
    """One line; the counts of files without an entry and of clangd failures only when not 0."""
    include_errors = sum(p.kind == INCLUDE for p in problems)
    files = "file" if checked == 1 else "files"
    line = f"clangd: {checked} {files} checked, {include_errors} include errors"
    without_entry = len({p.file for p in problems if p.kind == NO_ENTRY})
    if without_entry:
        line += f", {without_entry} without a compile_commands.json entry"
    failed = len({p.file for p in problems if p.kind == CLANGD})
    if failed:
        line += f", {failed} where clangd did not finish"
    return line


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
