"""pytest_test: a py_test whose files run under pytest."""

load("@pypi//:requirements.bzl", "requirement")
load("@rules_python//python:defs.bzl", "py_test")
load("//tools/cc:sanitizers.bzl", "sanitizer_env")

def pytest_test(name, srcs, deps = [], args = [], env = {}, **kwargs):
    """Runs `srcs` with pytest. Skipped tests are listed in the log (-rs).

    Args:
      name: the test name.
      srcs: test files (and helpers they import).
      deps: py_library dependencies; pytest is added.
      args: extra pytest arguments.
      env: environment variables; under --config=asan the sanitizer runtime's are added.
      **kwargs: data, size, tags, ... as for py_test.
    """
    runner = Label("//tools/pytest:pytest_runner.py")
    py_test(
        name = name,
        srcs = [runner] + srcs,
        main = runner,
        args = ["$(location {})".format(s) for s in srcs if s.endswith("_test.py") or s.split("/")[-1].startswith("test_")] + args,
        deps = deps + [requirement("pytest")],
        env = sanitizer_env() | env,
        # Generated __init__.py files would turn test folders into packages,
        # which changes how pytest imports test helpers beside the tests.
        legacy_create_init = False,
        **kwargs
    )
