"""fuzz_test: a fuzz target's driver as two tests, a fixed count for CI and a long run by hand."""

# A ceiling for the fixed-count run, under a medium test's 300 s timeout: only a driver that hangs
# or slows down tenfold reaches it.
_CEILING_SECONDS = 240

def fuzz_test(name, test_rule, inputs, long_seconds = 3000, args = [], tags = [], **kwargs):
    """Declares `name` and its _long twin, both running the same driver (tests/fuzz_driver.h).

    `name` mutates the seed `inputs` times (--inputs), the same inputs in every build and on
    every machine, so that a failure replays; `bazel test //...` and CI run it, and under
    --config=asan each input is checked for memory errors. The twin, `name` with _long_test for
    _test (tagged manual), mutates for `long_seconds` (--seconds) instead, for a search worth
    an hour, e.g.

        tools/bazel test --config=asan //deploy/runtime:weights_manifest_fuzz_long_test

    Args:
      name: the test name, ending in _test.
      test_rule: cc_test or torch_cc_test.
      inputs: how many inputs the fixed-count run mutates.
      long_seconds: how long the manual run mutates.
      args: more driver arguments (--seed=N).
      tags: tags of both tests ("asan" for the sanitizer run).
      **kwargs: srcs, deps, ... of the test rule.
    """
    test_rule(
        name = name,
        size = "medium",
        args = args + ["--inputs={}".format(inputs), "--seconds={}".format(_CEILING_SECONDS)],
        tags = tags,
        **kwargs
    )
    if not name.endswith("_test"):
        fail("fuzz_test {}: the name must end in _test".format(name))
    test_rule(
        name = name[:-len("_test")] + "_long_test",
        timeout = "eternal",
        args = args + ["--seconds={}".format(long_seconds)],
        tags = tags + ["manual"],
        **kwargs
    )
