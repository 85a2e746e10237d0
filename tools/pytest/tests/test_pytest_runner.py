"""Runs pytest_runner.py as a subprocess on test_sample.py with a controlled
Bazel test environment, and checks what actually ran (the sample's own log),
the exit codes, the shard status file and the JUnit XML."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RUNNER = HERE.parent / "pytest_runner.py"
SAMPLE = HERE / "test_sample.py"
SKIP_SAMPLE = HERE / "skip_sample.py"

# Every test in test_sample.py, as its log names them.
ALL = {
    "test_alpha",
    "test_beta",
    "test_gamma",
    "test_param[1]",
    "test_param[2]",
    "test_param[3]",
    "TestGroup::test_one",
    "TestGroup::test_two",
    "test_writes_output",
}

# What Bazel sets for a test, and pytest's own knobs: none may leak in from the
# Bazel run of this very test (which may itself be filtered or sharded).
_STRIPPED = (
    "TESTBRIDGE_TEST_ONLY",
    "TESTBRIDGE_TEST_RUNNER_FAIL_FAST",
    "TEST_TOTAL_SHARDS",
    "TEST_SHARD_INDEX",
    "TEST_SHARD_STATUS_FILE",
    "TEST_UNDECLARED_OUTPUTS_DIR",
    "XML_OUTPUT_FILE",
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    # The runner must keep bytecode out of the test's folder by itself.
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "SAMPLE_FAIL",
    "SKIP_SAMPLE",
)


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, log: Path):
        self.code = proc.returncode
        self.output = proc.stdout
        self.ran = log.read_text().split() if log.exists() else []

    def __repr__(self) -> str:
        return f"exit {self.code}, ran {sorted(self.ran)}\n{self.output}"


@pytest.fixture
def run(tmp_path: Path):
    """run(*args, **env) runs the runner on a copy of the sample."""
    # Laid out as Bazel does: the runner starts in the workspace's root in the
    # runfiles, the test file is in a package below it.
    workspace = tmp_path / "target.runfiles" / "_main"
    src = workspace / "pkg"
    src.mkdir(parents=True)
    sample = src / SAMPLE.name
    shutil.copyfile(SAMPLE, sample)
    shutil.copyfile(SKIP_SAMPLE, src / SKIP_SAMPLE.name)
    counter = iter(range(1000))

    def _run(*args: str, test_file: str = SAMPLE.name, **env: str) -> Run:
        n = next(counter)
        scratch = tmp_path / f"tmp{n}"
        scratch.mkdir()
        log = tmp_path / f"ran{n}.txt"
        environ = {k: v for k, v in os.environ.items() if k not in _STRIPPED}
        environ.update(
            TEST_TMPDIR=str(scratch),
            SAMPLE_RAN_LOG=str(log),
            PYTHONPATH=os.pathsep.join(sys.path),
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        environ.update(env)
        proc = subprocess.run(
            [sys.executable, str(RUNNER), str(src / test_file), *args],
            cwd=workspace,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        return Run(proc, log)

    _run.src = src
    return _run


def test_plain_run_runs_everything(run):
    r = run()
    assert r.code == 0, r
    assert sorted(r.ran) == sorted(ALL), r
    # e.g. pytest's deprecation of fixtures defined on plugin instances.
    assert "warning" not in r.output.lower(), r


def test_test_filter_selects_matching_tests(run):
    r = run(TESTBRIDGE_TEST_ONLY="gamma or param")
    assert r.code == 0, r
    assert sorted(r.ran) == sorted(
        {"test_gamma", "test_param[1]", "test_param[2]", "test_param[3]"}
    ), r


def test_test_filter_is_anded_with_k_in_args(run):
    # Alone, the args' -k would run 6 tests and the filter 4; and-ed, one.
    r = run("-k", "not param", TESTBRIDGE_TEST_ONLY="param or alpha")
    assert r.code == 0, r
    assert r.ran == ["test_alpha"], r
    r = run("-kTestGroup", TESTBRIDGE_TEST_ONLY="two")
    assert r.ran == ["TestGroup::test_two"], r


def test_test_filter_matching_nothing_passes_and_says_so(run):
    r = run(TESTBRIDGE_TEST_ONLY="no_such_test")
    assert r.code == 0, r
    assert r.ran == [], r
    assert "no test to run" in r.output, r


def test_test_filter_does_not_match_the_runfiles_path(run):
    # -k matches the names of the item's parents: the folders from the rootdir
    # down. Those above the workspace's root in the runfiles are not among them.
    r = run(TESTBRIDGE_TEST_ONLY="runfiles or _main")
    assert r.ran == [], r
    r = run(TESTBRIDGE_TEST_ONLY="pkg and gamma")
    assert r.ran == ["test_gamma"], r


def test_k_in_args_matching_nothing_still_fails(run):
    # Without a shard or --test_filter, "no tests" stays pytest's exit code 5.
    r = run("-k", "no_such_test")
    assert r.code == 5, r


def test_shards_split_the_tests_exactly(run, tmp_path: Path):
    total = 3
    shards = []
    for index in range(total):
        status = tmp_path / f"shard{index}.status"
        r = run(
            TEST_TOTAL_SHARDS=str(total),
            TEST_SHARD_INDEX=str(index),
            TEST_SHARD_STATUS_FILE=str(status),
        )
        assert r.code == 0, r
        assert status.exists(), f"shard {index} did not touch TEST_SHARD_STATUS_FILE"
        assert r.ran, f"shard {index} of {total} ran nothing with {len(ALL)} tests: {r}"
        shards.append(r.ran)
    flat = [name for ran in shards for name in ran]
    assert len(flat) == len(set(flat)), f"a test ran in two shards: {shards}"
    assert set(flat) == ALL, shards
    # Balanced: 9 tests over 3 shards.
    assert sorted(len(ran) for ran in shards) == [3, 3, 3], shards


def test_shards_compose_with_the_filter(run):
    ran = []
    for index in range(2):
        r = run(
            TESTBRIDGE_TEST_ONLY="param or Group",
            TEST_TOTAL_SHARDS="2",
            TEST_SHARD_INDEX=str(index),
        )
        assert r.code == 0, r
        ran += r.ran
    assert sorted(ran) == sorted(
        {
            "test_param[1]",
            "test_param[2]",
            "test_param[3]",
            "TestGroup::test_one",
            "TestGroup::test_two",
        }
    )


def test_empty_shard_passes_and_says_so(run, tmp_path: Path):
    status = tmp_path / "empty.status"
    # 9 tests, 20 shards: shard 15 gets none.
    r = run(TEST_TOTAL_SHARDS="20", TEST_SHARD_INDEX="15", TEST_SHARD_STATUS_FILE=str(status))
    assert r.code == 0, r
    assert r.ran == [], r
    assert status.exists()
    assert "no test to run" in r.output, r


def test_failures_still_fail_in_a_shard(run):
    codes = {}
    for index in range(3):
        r = run(TEST_TOTAL_SHARDS="3", TEST_SHARD_INDEX=str(index), SAMPLE_FAIL="test_beta")
        codes["test_beta" in r.ran] = codes.get("test_beta" in r.ran, set()) | {r.code}
    assert codes == {True: {1}, False: {0}}, codes


def test_junit_xml_goes_to_xml_output_file(run, tmp_path: Path):
    xml = tmp_path / "testlogs" / "test.xml"
    xml.parent.mkdir()
    r = run(XML_OUTPUT_FILE=str(xml), SAMPLE_FAIL="test_beta")
    assert r.code == 1, r
    cases = ET.parse(xml).getroot().iter("testcase")
    outcome = {}
    for case in cases:
        name = case.get("name")
        if case.get("classname", "").endswith("TestGroup"):
            name = "TestGroup::" + name
        outcome[name] = "failure" if case.find("failure") is not None else "passed"
    assert set(outcome) == ALL, outcome
    # Class names are relative to the workspace, not to a folder above the runfiles.
    classnames = {case.get("classname") for case in ET.parse(xml).getroot().iter("testcase")}
    assert classnames == {"pkg.test_sample", "pkg.test_sample.TestGroup"}, classnames
    assert {name for name, o in outcome.items() if o == "failure"} == {"test_beta"}, outcome


def test_undeclared_outputs_dir_fixture(run, tmp_path: Path):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    r = run(TEST_UNDECLARED_OUTPUTS_DIR=str(outputs), TESTBRIDGE_TEST_ONLY="writes_output")
    assert r.code == 0, r
    assert r.ran == ["test_writes_output"], r
    assert (outputs / "sample_output.txt").read_text() == "written by test_writes_output\n"


def test_fail_fast_stops_at_the_first_failure(run):
    # test_beta fails; the tests after it in the file do not run.
    r = run(TESTBRIDGE_TEST_RUNNER_FAIL_FAST="1", SAMPLE_FAIL="test_beta")
    assert r.code == 1, r
    assert r.ran == ["test_alpha", "test_beta"], r


def test_no_caches_or_bytecode_written(run, tmp_path: Path):
    # A failure makes pytest's cache plugin write lastfailed (in the rootdir,
    # here a parent of both the test's folder and TEST_TMPDIR); importing the
    # test file would write __pycache__ beside it.
    r = run(SAMPLE_FAIL="test_beta")
    assert r.code == 1, r
    assert sorted(p.name for p in run.src.iterdir()) == [SKIP_SAMPLE.name, SAMPLE.name], (
        "the runner wrote into the test's folder"
    )
    written = [
        str(p.relative_to(tmp_path))
        for p in tmp_path.rglob("*")
        if p.name in (".pytest_cache", "__pycache__")
    ]
    assert written == [], r


def test_some_skipped_passes(run):
    r = run(test_file=SKIP_SAMPLE.name)
    assert r.code == 0, r
    assert sorted(r.ran) == ["test_runs", "test_xfail"], r
    assert "none ran" not in r.output, r


@pytest.mark.parametrize(
    "how, env",
    [
        ("every test skips in its body or by mark", {"SKIP_SAMPLE": "calls"}),
        ("the module skips at import", {"SKIP_SAMPLE": "module"}),
        ("a module-level mark skips every test", {"SKIP_SAMPLE": "mark"}),
        ("the filter keeps only a skipped test", {"TESTBRIDGE_TEST_ONLY": "marked"}),
    ],
)
def test_all_skipped_fails(run, how, env):
    # Bazel would report these as PASSED, though nothing was tested.
    r = run(test_file=SKIP_SAMPLE.name, **env)
    assert r.code == 1, (how, r)
    assert r.ran == [], (how, r)
    assert "none ran, so nothing was tested: failing" in r.output, (how, r)


def test_all_skipped_fails_in_a_shard(run):
    # 3 tests, 3 shards: the marked test's shard has only a skipped test.
    codes = {}
    for index in range(3):
        r = run(test_file=SKIP_SAMPLE.name, TEST_TOTAL_SHARDS="3", TEST_SHARD_INDEX=str(index))
        codes[tuple(r.ran)] = r.code
    assert codes == {("test_runs",): 0, ("test_xfail",): 0, (): 1}, codes


def test_an_xfail_counts_as_run(run):
    r = run(test_file=SKIP_SAMPLE.name, SKIP_SAMPLE="xfail", TESTBRIDGE_TEST_ONLY="xfail")
    assert r.code == 0, r
    assert r.ran == ["test_xfail"], r
