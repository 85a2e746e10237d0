"""glibc_floor_test: fails when a binary needs a newer glibc than the edge machines have."""

# Ubuntu 22.04 and Jetson L4T r36 ship glibc 2.35.
EDGE_GLIBC = "2.35"

def glibc_floor_test(
        name,
        binaries,
        max_glibc = EDGE_GLIBC,
        reference = "@libtorch//:site-packages/torch/lib/libtorch_cpu.so",
        **kwargs):
    """Checks the GLIBC_ symbol versions that ELF binaries need.

    The floor is max_glibc or the newest GLIBC_ version that `reference` (the
    torch wheel's libtorch_cpu.so) needs, whichever is higher: a binary that
    needs no more than LibTorch itself runs wherever LibTorch does. The test
    fails if any binary needs a version above the floor, and prints each
    binary's newest GLIBC_ version.

    Args:
      name: the test's name.
      binaries: labels of cc_binary / cc_test targets (shared libraries too).
      max_glibc: the oldest glibc the binaries must run on.
      reference: a library whose glibc needs raise the floor.
      **kwargs: passed to sh_test (tags, size, ...).
    """

    # rules_shell is not among the modules this machine resolves offline.
    # buildifier: disable=native-sh-test
    native.sh_test(
        name = name,
        srcs = [Label("//tools/cc:glibc_floor_test.sh")],
        args = [max_glibc, "$(rootpath {})".format(reference)] +
               ["$(rootpaths {})".format(b) for b in binaries],
        data = binaries + [reference],
        **kwargs
    )
