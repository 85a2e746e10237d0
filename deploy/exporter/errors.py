"""The export's exit statuses, and the error that carries one to the command line.

The numbers are every program's (package_contract.json's exit_codes): one meaning each.
"""

from __future__ import annotations

from ..contract.package_contract import load as _load_contract

_CODES = _load_contract()
EXIT_FAILURE = _CODES.exit_code("other")
EXIT_USAGE = _CODES.exit_code("usage")
# --out names something that is not an export's folder; it is left untouched.
EXIT_OUT_REFUSED = _CODES.exit_code("output_unwritable")
# --weights-only: the model is not the base package's architecture.
EXIT_NOT_BASE_ARCHITECTURE = _CODES.exit_code("not_base_architecture")
# --quantize: the quantized model is further from the float model than --min-cosine allows.
EXIT_ACCURACY = _CODES.exit_code("accuracy")
# 128 + SIGINT, as a shell reports a program Ctrl-C stopped.
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
