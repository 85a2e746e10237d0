"""tools/bazel run //deploy:export, python -m deploy.export from the repository root, or
my-ops-export (python -m my_ops.deploy.export) from the wheel.

Relative imports: the package is deploy.export here and my_ops.deploy.export in the
wheel. Bazel's py_binary runs a script, so //deploy/export:export starts at bazel_main.py.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from .cli import die, parse_args
from .errors import EXIT_INTERRUPTED, ExportError, first_line
from .manifest import generate_key, load_signing_key, sign_export
from .pipeline import run


def _only(step: Callable[[], Iterable[str]]) -> int:
    """--generate-key and --sign: one quick step, its paths printed, no export."""
    try:
        for path in step():
            print(path)
    except ExportError as e:
        die(str(e), e.code)
    except KeyboardInterrupt:
        die("interrupted", EXIT_INTERRUPTED)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.generate_key:
        return _only(lambda: generate_key(opts.generate_key))
    if opts.sign:
        return _only(lambda: [sign_export(opts.sign, load_signing_key(opts.signing_key))])
    t0 = time.perf_counter()
    try:
        times = run(opts)
    except ExportError as e:
        die(str(e), e.code)
    except KeyboardInterrupt:
        die("interrupted", EXIT_INTERRUPTED)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("MY_OPS_EXPORT_TRACEBACK"):
            raise
        die(f"unexpected {first_line(e)} (set MY_OPS_EXPORT_TRACEBACK=1 for the traceback)")
    total = time.perf_counter() - t0
    parts = ", ".join(f"{k} {v:.1f}s" for k, v in times.items())
    print(f"exported in {total:.1f}s ({parts})")
    print(opts.out)
    return 0


def exit_after(status: int) -> None:
    """Leave the process with `status`, without tearing torch down."""
    # A finished export has written, flushed and renamed its output, removed
    # its temporary files and released the cache's lock; tearing down torch's
    # modules would add over a second to a 10-second warm export.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def console_main() -> None:
    """my-ops-export, the wheel's console script."""
    exit_after(main())


if __name__ == "__main__":
    console_main()
