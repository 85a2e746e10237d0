"""Finds the host's GCC 12 (gcc-12, g++-12) for the sysroot C++ toolchain, as `@host_gcc`.

Never fails at fetch time: a missing or wrong compiler is recorded, and the
toolchain's analysis fails with a clear message only when it is selected, so
`--config=host_toolchain` still works on such a machine.
"""

_WANT_MAJOR = "12"

def _host_gcc_impl(rctx):
    gcc = rctx.which("gcc-" + _WANT_MAJOR)
    problem = ""
    version = ""
    if gcc == None:
        problem = "gcc-{v} was not found on PATH; install it (Debian 12: apt-get install g++-{v})".format(v = _WANT_MAJOR)
    else:
        result = rctx.execute([gcc, "-dumpfullversion"])
        version = result.stdout.strip()
        if result.return_code != 0 or version.split(".")[0] != _WANT_MAJOR:
            problem = "{} reports version '{}', not {}.x".format(gcc, version, _WANT_MAJOR)
        elif not rctx.which("g++-" + _WANT_MAJOR):
            problem = "g++-{v} was not found on PATH; install it (Debian 12: apt-get install g++-{v})".format(v = _WANT_MAJOR)
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "\n".join([
        "\"\"\"The host's GCC, as found by tools/cc/host_gcc.bzl.\"\"\"",
        "",
        "GCC = \"{}\"".format(str(gcc) if gcc and not problem else ""),
        "GCC_MAJOR = \"{}\"".format(_WANT_MAJOR),
        "GCC_VERSION = \"{}\"".format(version),
        "PROBLEM = \"{}\"".format(problem),
        "",
    ]))

host_gcc_repository = repository_rule(
    implementation = _host_gcc_impl,
    environ = ["PATH"],
    local = True,
)

def _host_gcc_extension_impl(_module_ctx):
    host_gcc_repository(name = "host_gcc")

host_gcc = module_extension(implementation = _host_gcc_extension_impl)
