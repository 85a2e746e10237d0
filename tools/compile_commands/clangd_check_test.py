"""clangd_check.py's reading of clangd 14's --check log, and its database look-up.

The log lines are clangd-14's (Debian 1:14.0.6), shortened.
"""

from __future__ import annotations

from pathlib import Path

import clangd_check as check

LOG_WITH_MISSING_INCLUDES = """\
I[21:56:18.787] Loaded compilation database from /tmp/cdb/compile_commands.json
I[21:56:18.787] Compile command from CDB is: /usr/bin/gcc-12 -c -- /w/deploy/loader/main.cpp
I[21:56:18.789] Building preamble...
E[21:56:20.787] [pp_file_not_found] Line 19: in included file: 'ATen/ATen.h' file not found
I[21:56:20.787] Building AST...
E[21:56:21.019] [undeclared_var_use] Line 68: use of undeclared identifier 'at'
E[21:56:21.019] [pp_include_next_in_primary] Line 3: #include_next in primary source file
E[21:56:21.020] [pp_file_not_found] Line 7: 'sodium.h' file not found
E[21:56:21.021]     tweak: ExtractFunction ==> FAIL: Cannot extract break/continue without loop
I[21:56:21.024] All checks completed, 4 errors
"""

LOG_WITHOUT_DATABASE = """\
I[21:56:21.113] Loaded compilation database from /tmp/cdb3/compile_commands.json
I[21:56:21.114] Generic fallback command is: /usr/bin/clang -resource-dir=/usr/lib/llvm -- /w/a.cpp
I[21:56:21.200] All checks completed, 0 errors
"""


def test_include_diagnostics() -> None:
    assert check.include_problems("deploy/loader/main.cpp", LOG_WITH_MISSING_INCLUDES) == [
        check.Problem(
            "include",
            "deploy/loader/main.cpp",
            19,
            "in included file: 'ATen/ATen.h' file not found [pp_file_not_found]",
        ),
        check.Problem(
            "include", "deploy/loader/main.cpp", 7, "'sodium.h' file not found [pp_file_not_found]"
        ),
    ]


def test_fallback_command() -> None:
    assert check.include_problems("a.cpp", LOG_WITHOUT_DATABASE) == [
        check.Problem(
            "no entry",
            "a.cpp",
            None,
            "clangd used a guessed compile command, not one from the database",
        )
    ]


def test_newer_clangd_interpolation() -> None:
    log = (
        "I[00:00:00.000] Compile command inferred from deploy/loader/cli.cpp is: gcc -- /w/a.cpp\n"
    )
    assert [p.kind for p in check.include_problems("a.cpp", log)] == ["no entry"]


def test_clean_log() -> None:
    log = "I[1] Compile command from CDB is: gcc -c a.cpp\nI[2] All checks completed, 0 errors\n"
    assert check.include_problems("a.cpp", log) == []


def test_problem_line() -> None:
    assert str(
        check.Problem("include", "a.cpp", 3, "'x.h' file not found [pp_file_not_found]")
    ) == ("clangd_check: FAIL a.cpp:3: 'x.h' file not found [pp_file_not_found]")
    assert str(
        check.Problem("no entry", "a.cpp", None, "no entry in /w/compile_commands.json")
    ) == ("clangd_check: FAIL a.cpp: no entry in /w/compile_commands.json")


def test_has_entry() -> None:
    database = [
        {"directory": "/w", "file": "deploy/loader/main.cpp"},
        {"directory": "/elsewhere", "file": "/w/ops/registration.cpp"},
    ]
    assert check.has_entry(database, Path("/w/deploy/loader/main.cpp"))
    assert check.has_entry(database, Path("/w/ops/registration.cpp"))
    assert not check.has_entry(database, Path("/w/deploy/loader/runner.cpp"))
    assert not check.has_entry(database, Path("/elsewhere/deploy/loader/main.cpp"))


def test_summary() -> None:
    assert check.summary(3, []) == "clangd: 3 files checked, 0 include errors"
    assert check.summary(1, []) == "clangd: 1 file checked, 0 include errors"
    problems = [
        check.Problem("include", "a.cpp", 1, "x"),
        check.Problem("include", "a.cpp", 2, "y"),
        check.Problem("no entry", "b.cpp", None, "z"),
        check.Problem("clangd", "c.cpp", None, "crash"),
    ]
    assert check.summary(3, problems) == (
        "clangd: 3 files checked, 2 include errors, 1 without a compile_commands.json entry, "
        "1 where clangd did not finish"
    )


def test_bazel_flags_after_double_dash() -> None:
    args = check.parse_args(["--no-generate", "ops/registration.cpp", "--", "--config=asan"])
    assert args.files == ["ops/registration.cpp"]
    assert args.bazel_flags == ["--config=asan"]
    assert args.no_generate
    assert check.parse_args([]).files == [
        "ops/fused_bias_gelu/cpu.cpp",
        "deploy/loader/main.cpp",
        "deploy/runtime/src/runner.cpp",
    ]
