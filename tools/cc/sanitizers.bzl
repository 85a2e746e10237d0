"""Environment for uninstrumented programs that load code built with --config=asan."""

# A Python process (a test, or the exporter at build time) is not linked
# with the ASan runtime, yet the instrumented op library needs that runtime
# first in the process: preload it. Leak checking stays off there, since
# the interpreter and torch keep allocations alive until exit by design;
# the C++ test binaries keep it on. libstdc++ is preloaded too: ASan
# intercepts __cxa_throw only if libstdc++ is present when it starts, and
# the python executable does not link it.
ASAN_PRELOAD_ENV = {
    "ASAN_OPTIONS": "detect_leaks=0",
    "LD_PRELOAD": "libasan.so.8:libstdc++.so.6",
}

def sanitizer_env():
    """A select(): ASAN_PRELOAD_ENV under --config=asan, else nothing."""
    return select({
        Label("//tools/cc:asan_enabled"): ASAN_PRELOAD_ENV,
        "//conditions:default": {},
    })

def sanitizer_deps():
    """A select(): what C++ binaries and tests link under --config=asan."""
    return select({
        Label("//tools/cc:asan_enabled"): [Label("//tools/cc:lsan_suppressions")],
        "//conditions:default": [],
    })
