"""Finds the host's GCC 12 compilers for the sysroot C++ toolchains, as `@host_gcc`.

One compiler per target CPU: the native gcc-12 for x86_64, and Debian's cross
compiler aarch64-linux-gnu-gcc-12 (g++-12-aarch64-linux-gnu) for aarch64.

Never fails at fetch time: a missing or wrong compiler is recorded, and the
toolchain's analysis fails with a clear message only when it is selected, so
an x86-64 build works on a machine without the cross compiler, and
`--config=host_toolchain` still works on a machine without either.
"""

_WANT_MAJOR = "12"

# Target CPU -> (driver name prefix, the Debian package that provides it).
_COMPILERS = {
    "aarch64": ("aarch64-linux-gnu-", "g++-{v}-aarch64-linux-gnu"),
    "x86_64": ("", "g++-{v}"),
}

def _find(rctx, prefix, package):
    """(gcc path, GCC's own include dir, problem); problem is "" when usable."""
    install = "install it (Debian 12: apt-get install {}; tools/bazel installs it when it runs as root)".format(package)
    gcc = rctx.which(prefix + "gcc-" + _WANT_MAJOR)
    if gcc == None:
        return "", "", "{}gcc-{} was not found on PATH; {}".format(prefix, _WANT_MAJOR, install)
    result = rctx.execute([gcc, "-dumpfullversion"])
    version = result.stdout.strip()
    if result.return_code != 0 or version.split(".")[0] != _WANT_MAJOR:
        return "", "", "{} reports version '{}', not {}.x".format(gcc, version, _WANT_MAJOR)
    if not rctx.which(prefix + "g++-" + _WANT_MAJOR):
        return "", "", "{}g++-{} was not found on PATH; {}".format(prefix, _WANT_MAJOR, install)

    # GCC's own headers (stddef.h, the intrinsics) must come from the
    # compiler itself: /usr/lib/gcc/<triple>/12/include natively,
    # /usr/lib/gcc-cross/<triple>/12/include for a cross compiler.
    result = rctx.execute([gcc, "-print-file-name=include"])
    include = result.stdout.strip()
    if result.return_code != 0 or not include.startswith("/"):
        return "", "", "{} -print-file-name=include gave '{}'".format(gcc, include)
    return str(gcc), include, ""

def _host_gcc_impl(rctx):
    lines = [
        "\"\"\"The host's GCC compilers, as found by tools/cc/host_gcc.bzl.\"\"\"",
        "",
        "GCC_MAJOR = \"{}\"".format(_WANT_MAJOR),
        "",
        "# Target CPU -> struct fields: gcc (absolute path, empty when unusable),",
        "# include (GCC's own header dir), tool_prefix (for ar, ld, ...), problem.",
        "COMPILERS = {",
    ]
    for cpu, (prefix, package) in sorted(_COMPILERS.items()):
        gcc, include, problem = _find(rctx, prefix, package.format(v = _WANT_MAJOR))
        lines.append("    {}: {},".format(repr(cpu), repr({
            "gcc": gcc,
            "include": include,
            "problem": problem,
            "tool_prefix": prefix,
        })))
    lines += ["}", ""]
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "\n".join(lines))

host_gcc_repository = repository_rule(
    implementation = _host_gcc_impl,
    environ = ["PATH"],
    local = True,
)

def _host_gcc_extension_impl(_module_ctx):
    host_gcc_repository(name = "host_gcc")

host_gcc = module_extension(implementation = _host_gcc_extension_impl)
