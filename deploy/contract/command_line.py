"""The command-line rule every deploy tool shares: a flag's value is never empty.

An empty value is what a script passes for an unset variable (`--signing-key "$KEY"`);
read as "not given", it would skip what the caller asked for: an export left unsigned, a
default output folder replaced. The C++ loader refuses one the same way (`loader --help`).
"""

from __future__ import annotations

import argparse
from typing import Any


class NonEmptyValueParser(argparse.ArgumentParser):
    """An ArgumentParser whose optional arguments refuse an empty value, through the usage-error
    path (`error`): "argument --out: needs a non-empty value". The check runs before the
    argument's own `type`, so that `type=Path` cannot turn "" into ".", and a string default is
    converted as before."""

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if action.option_strings and action.nargs != 0:
            action.type = _non_empty(action.type)
        return action


def _non_empty(convert: Any):
    def checked(value: str) -> Any:
        if value == "":
            raise argparse.ArgumentTypeError("needs a non-empty value")
        return value if convert is None else convert(value)

    # argparse names a failed conversion by the type's __name__ ("invalid int value").
    checked.__name__ = getattr(convert, "__name__", "value")
    return checked
