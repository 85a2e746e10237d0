"""pytest_test: a py_test whose files run under pytest."""

load("@pypi//:requirements.bzl", "requirement")
load("@rules_python//python:defs.bzl", "py_test")
load("//tools/cc:sanitizers.bzl", "sanitizer_env")

def pytest_test(name, srcs, deps = [], args = [], env = {}, **kwargs):
    """Runs `srcs` with pytest, as a Bazel test (see README.md beside this file).

    The test files are the srcs named test_*.py or *_test.py; pytest runs from
    $TEST_TMPDIR (rootdir: the workspace root in the runfiles) with its cache
    plugin off and no bytecode written, so nothing lands in the runfiles or
    source tree. Skipped tests are listed (-rs); a run in which every selected
    test skipped fails, since Bazel would report it as PASSED (a target that
    cannot run on a machine is made incompatible there, and Bazel reports it
    as SKIPPED). The runner honours Bazel's test environment:

    - `--test_filter=EXPR` (TESTBRIDGE_TEST_ONLY) is a pytest `-k` expression,
      and-ed with any `-k` in `args`. A filter that leaves nothing to run passes.
    - `shard_count = N` (TEST_TOTAL_SHARDS, TEST_SHARD_INDEX) runs a round-robin
      share of the collected tests, sorted by node id, after -k/-m selection;
      TEST_SHARD_STATUS_FILE is touched; an empty shard passes and says so.
    - XML_OUTPUT_FILE receives pytest's JUnit XML (per-case results in Bazel).
    - `--test_runner_fail_fast` (TESTBRIDGE_TEST_RUNNER_FAIL_FAST) is --exitfirst.
    - TEST_UNDECLARED_OUTPUTS_DIR is the `undeclared_outputs_dir` fixture (a
      pathlib.Path; a temporary folder outside Bazel); its files end up in
      bazel-testlogs/<target>/test.outputs/outputs.zip.

    Upstream equivalents (README.md compares them): aspect_rules_py's
    py_pytest_test (a py_pytest_main entry point: the same env mapping, but a
    `-k` in args replaces --test_filter instead of and-ing with it) and
    rules_python's py_test with a hand-written pytest main. srcs, deps (less
    pytest), data, env, args (pytest arguments) and shard_count carry over.

    Args:
      name: the test name.
      srcs: test files (and helpers they import).
      deps: py_library dependencies; pytest is added.
      args: extra pytest arguments.
      env: environment variables; under --config=asan the sanitizer runtime's are added.
      **kwargs: data, size, shard_count, tags, ... as for py_test.
    """
    runner = Label("//tools/pytest:pytest_runner.py")
    py_test(
        name = name,
        srcs = [runner] + srcs,
        main = runner,
        args = ["$(location {})".format(s) for s in srcs if s.endswith("_test.py") or s.split("/")[-1].startswith("test_")] + args,
        deps = deps + [requirement("pytest")],
        env = sanitizer_env() | env,
        **kwargs
    )
