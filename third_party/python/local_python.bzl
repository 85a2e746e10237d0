"""The machine's CPython 3.11 as the Python toolchain, and a remote worker's.

rules_python would otherwise download a standalone interpreter from GitHub,
which these machines cannot reach. The lock in requirements_lock.txt targets
CPython 3.11, so any other version is refused with a clear error.

:toolchain is the interpreter this machine runs (MY_OPS_PYTHON, else python3
on PATH), wherever it is installed. :worker_toolchain is the one a remote
worker's image has: Debian 12's python3.11 package, /usr/bin/python3.11.
--config=remote_exec selects it (.bazelrc), so that no action sent to a
worker names a path only this machine has.
"""

# Debian 12 (bookworm)'s python3.11-minimal: what a worker image installs.
_WORKER_INTERPRETER = "/usr/bin/python3.11"

_WANT = (3, 11)

_PROBE = "import sys; print(sys.version_info[0], sys.version_info[1], sys.version_info[2]); print(sys.executable)"

_BUILD = """\
load("@rules_python//python:defs.bzl", "py_runtime", "py_runtime_pair")

exports_files(["python3"])

py_runtime(
    name = "runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
    stub_shebang = "#!{interpreter}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@rules_python//python:toolchain_type",
)

py_runtime(
    name = "worker_runtime",
    interpreter_path = "{worker_interpreter}",
    python_version = "PY3",
    stub_shebang = "#!{worker_interpreter}",
)

py_runtime_pair(
    name = "worker_runtime_pair",
    py3_runtime = ":worker_runtime",
)

toolchain(
    name = "worker_toolchain",
    toolchain = ":worker_runtime_pair",
    toolchain_type = "@rules_python//python:toolchain_type",
)
"""

def _local_python_impl(rctx):
    requested = rctx.os.environ.get("MY_OPS_PYTHON", "python3")
    found = rctx.which(requested) if "/" not in requested else rctx.path(requested)
    if not found or not found.exists:
        fail("Python {want}: '{req}' was not found on PATH. Install CPython {want} (Debian 12: apt-get install python3) or set MY_OPS_PYTHON to its path.".format(
            want = "%d.%d" % _WANT,
            req = requested,
        ))
    probe = rctx.execute([found, "-c", _PROBE])
    if probe.return_code != 0:
        fail("Python: '{}' did not run: {}".format(found, probe.stderr))
    version_line, executable = probe.stdout.strip().split("\n")
    major, minor, micro = [int(v) for v in version_line.split(" ")]
    if (major, minor) != _WANT:
        fail("Python: {} is {}.{}.{}, but requirements_lock.txt targets CPython {}.{}. Set MY_OPS_PYTHON to a {}.{} interpreter.".format(
            executable,
            major,
            minor,
            micro,
            _WANT[0],
            _WANT[1],
            _WANT[0],
            _WANT[1],
        ))
    rctx.symlink(executable, "python3")
    rctx.file("BUILD.bazel", _BUILD.format(interpreter = executable, worker_interpreter = _WORKER_INTERPRETER))

local_python_repository = repository_rule(
    implementation = _local_python_impl,
    environ = ["MY_OPS_PYTHON", "PATH"],
    local = True,
)

def _local_python_extension_impl(_module_ctx):
    local_python_repository(name = "local_python")

local_python = module_extension(implementation = _local_python_extension_impl)
