"""tools/bazel run //deploy:export, python -m deploy.exporter from the repository root, or
my-ops-export (python -m my_ops.deploy.exporter) from the wheel: the command line, a thin front
end on pipeline.run, which my_ops.deploy.export (api.py) calls from Python.

Relative imports: the package is deploy.exporter here and my_ops.deploy.exporter in the
wheel. Bazel's py_binary runs a script, so //deploy/exporter:export starts at bazel_main.py.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence

from .cli import KeyCommand, die, parse_args
from .errors import EXIT_INTERRUPTED, ExportError, first_line
from .pipeline import run
from .signing import generate_key, load_signing_key, sign_export


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
    if isinstance(opts, KeyCommand):
        if opts.generate_key:
            folder = opts.generate_key
            return _only(lambda: generate_key(folder))
        assert opts.sign is not None and opts.signing_key is not None
        sign, key = opts.sign, opts.signing_key
        return _only(lambda: sign_export(sign, load_signing_key(key)))
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
