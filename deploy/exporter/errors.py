"""The export's exit statuses, and the error that carries one to the command line."""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_OUT_REFUSED = 3
# --weights-only: the model is not the base package's architecture.
EXIT_NOT_BASE_ARCHITECTURE = 4
EXIT_INTERRUPTED = 130


class ExportError(Exception):
    """A failure with a message fit for one line on stderr, and its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__
