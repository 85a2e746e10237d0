"""Runs pytest on the files a pytest_test target names (see defs.bzl, README.md).

It follows Bazel's test encyclopedia where pytest can:

- TESTBRIDGE_TEST_ONLY (--test_filter) becomes a pytest -k expression, and-ed
  with a -k already in the target's args.
- TEST_TOTAL_SHARDS / TEST_SHARD_INDEX (shard_count) run one shard's share of
  the collected tests, and TEST_SHARD_STATUS_FILE is touched to say the runner
  shards. A shard, or a filter, that leaves no test to run passes and says so.
- XML_OUTPUT_FILE gets pytest's JUnit XML, so Bazel lists every test case.
- TESTBRIDGE_TEST_RUNNER_FAIL_FAST (--test_runner_fail_fast) passes --exitfirst.
- TEST_UNDECLARED_OUTPUTS_DIR is the `undeclared_outputs_dir` fixture.

A run in which every test that pytest selected skipped (a module skipped at import
included) fails: Bazel has no "skipped" status for a test that ran, so it would
read as PASSED. A target that cannot run on some machines is made incompatible
there instead (target_compatible_with), which Bazel reports as SKIPPED.

pytest runs from $TEST_TMPDIR, with its rootdir at the workspace root in the
runfiles (where Bazel starts the test), its cache plugin off and without
writing bytecode, so neither its caches, hypothesis' example database nor
__pycache__ folders land in the runfiles (or source) tree.
"""

import os
import sys
from pathlib import Path

import pytest


def _env_int(name: str) -> int:
    value = os.environ[name]
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"pytest_runner: {name}={value!r} is not a number") from None


class BazelPlugin:
    """Sharding, and the counts for the empty-run and all-skipped checks."""

    def __init__(self, shard: tuple[int, int] | None) -> None:
        self.shard = shard  # (index, total), or None when not sharded
        self.collected = 0  # items collected, before any -k, -m or shard deselection
        self.before_shard = 0  # items left by -k and -m, which the shards split
        self.in_shard = 0  # items this shard runs
        self.ran = 0  # tests whose body ran to an outcome (xfail included)
        self.skipped = 0  # tests, and modules at import, that skipped

    def pytest_itemcollected(self) -> None:
        self.collected += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # An xfail is reported as skipped, but its body ran.
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped += 1
        elif report.when == "call":
            self.ran += 1

    # trylast: shards split what -k (so --test_filter) and -m left, so they stay balanced.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        self.before_shard = len(items)
        if self.shard is None:
            return
        index, total = self.shard
        # Round-robin over the sorted node ids: every shard computes the same
        # order whatever the collection order, and each item lands in one shard.
        order = sorted(range(len(items)), key=lambda i: items[i].nodeid)
        mine = {i for rank, i in enumerate(order) if rank % total == index}
        keep = [item for i, item in enumerate(items) if i in mine]
        drop = [item for i, item in enumerate(items) if i not in mine]
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.in_shard = len(keep)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.shard is not None:
            index, total = self.shard
            terminalreporter.write_line(
                f"bazel shard {index + 1} of {total} (TEST_SHARD_INDEX={index}): "
                f"{self.in_shard} of the {self.before_shard} selected tests"
            )


@pytest.fixture(scope="session")
def undeclared_outputs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$TEST_UNDECLARED_OUTPUTS_DIR: what a test writes here ends up in
    bazel-testlogs/<target>/test.outputs/outputs.zip. Outside Bazel, a fresh
    temporary folder."""
    where = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if where:
        path = Path(where)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("undeclared_outputs")


def _split_keyword(args: list[str]) -> tuple[list[str], str | None]:
    """Removes every -k from args; returns the rest and the last -k's
    expression, the one pytest would use."""
    rest: list[str] = []
    keyword = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-k" and i + 1 < len(args):
            keyword = args[i + 1]
            i += 2
            continue
        if arg.startswith("-k") and len(arg) > 2:
            keyword = arg[3:] if arg.startswith("-k=") else arg[2:]
        else:
            rest.append(arg)
        i += 1
    return rest, keyword


def main(argv: list[str]) -> int:
    args, keyword = _split_keyword(argv)
    # pytest runs from $TEST_TMPDIR, so the test files need absolute paths.
    args = [os.path.abspath(arg) if arg.endswith(".py") else arg for arg in args]

    test_filter = os.environ.get("TESTBRIDGE_TEST_ONLY") or None
    if test_filter and keyword:
        keyword = f"({keyword}) and ({test_filter})"
    elif test_filter:
        keyword = test_filter

    shard = None
    if os.environ.get("TEST_TOTAL_SHARDS"):
        total = _env_int("TEST_TOTAL_SHARDS")
        index = _env_int("TEST_SHARD_INDEX") if os.environ.get("TEST_SHARD_INDEX") else 0
        if total < 1 or not 0 <= index < total:
            raise SystemExit(
                f"pytest_runner: bad shard TEST_SHARD_INDEX={index} of TEST_TOTAL_SHARDS={total}"
            )
        shard = (index, total)
    status_file = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status_file:
        # Before pytest runs, so a test that fails to collect reads as a failure, not as
        # "sharding not supported".
        Path(status_file).touch()

    options = ["-q", "-rs", "-p", "no:cacheprovider"]
    junit = os.environ.get("XML_OUTPUT_FILE")
    if junit:
        options.append(f"--junitxml={junit}")
    if os.environ.get("TESTBRIDGE_TEST_RUNNER_FAIL_FAST") == "1":
        options.append("--exitfirst")
    if keyword:
        args += ["-k", keyword]

    scratch = os.environ.get("TEST_TMPDIR")
    if scratch:
        # The rootdir stays where Bazel starts the test, the workspace's root in the
        # runfiles: node ids and JUnit class names read as in the source tree, and -k
        # does not match the bazel-out/.../<target>.runfiles folders above it.
        options.append(f"--rootdir={os.getcwd()}")
        os.chdir(scratch)
    # No __pycache__ (pytest's assertion rewriting honours this too) beside the tests.
    sys.dont_write_bytecode = True

    plugin = BazelPlugin(shard)
    # This module is a plugin too, for its undeclared_outputs_dir fixture.
    code = pytest.main([*options, *args], plugins=[plugin, sys.modules[__name__]])

    if code == pytest.ExitCode.NO_TESTS_COLLECTED and plugin.collected and (shard or test_filter):
        # Bazel starts every shard, and applies --test_filter to every target it tests.
        why = []
        if test_filter:
            why.append(f"-k {keyword!r} (--test_filter) kept {plugin.before_shard}")
        if shard:
            why.append(f"shard {shard[0] + 1} of {shard[1]} got none of them")
        why = ", ".join(why)
        print(f"pytest_runner: no test to run here ({plugin.collected} collected; {why}): passing.")
        return 0
    if code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED) and (
        plugin.skipped and not plugin.ran
    ):
        print(
            f"pytest_runner: all {plugin.skipped} skipped and none ran, so nothing was "
            "tested: failing. A target that cannot run here should be incompatible with "
            "this machine (target_compatible_with), which Bazel reports as SKIPPED."
        )
        return int(pytest.ExitCode.TESTS_FAILED)
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
