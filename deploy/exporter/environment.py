"""The process-wide state an export changes, changed for the export only.

Inductor reads where to write from environment variables ($TMPDIR, $TORCHINDUCTOR_CACHE_DIR)
and module attributes, so the export sets them; a ScopedEnvironment records each value before
its first change and puts it back when the export ends, however it ends, so that a Python
caller can export twice in one process and keep its own settings.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable
from types import TracebackType
from typing import Any

_ABSENT = object()


class ScopedEnvironment:
    """Changes to os.environ, tempfile.tempdir, module attributes and logger levels, undone in
    the reverse order on exit."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> ScopedEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.restore()

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def set_env(self, name: str, value: str) -> None:
        self._remember_env(name)
        os.environ[name] = value

    def unset_env(self, name: str) -> None:
        self._remember_env(name)
        os.environ.pop(name, None)

    def _remember_env(self, name: str) -> None:
        if name in self._saved_env:
            return
        before = os.environ.get(name)
        self._saved_env[name] = before

        def put_back() -> None:
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before
            del self._saved_env[name]

        self._undo.append(put_back)

    def set_tempdir(self, folder: str) -> None:
        """$TMPDIR and tempfile's own cached choice of it."""
        self.set_env("TMPDIR", folder)
        self.set_attribute(tempfile, "tempdir", folder)

    def set_attribute(self, owner: Any, name: str, value: Any) -> None:
        before = getattr(owner, name, _ABSENT)
        setattr(owner, name, value)

        def put_back() -> None:
            if before is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, before)

        self._undo.append(put_back)

    def quiet_logger(self, name: str, level: int = logging.ERROR) -> None:
        logger = logging.getLogger(name)
        before = logger.level
        logger.setLevel(level)
        self._undo.append(lambda: logger.setLevel(before))

    def on_restore(self, callback: Callable[[], None]) -> None:
        """Run `callback` when the environment is put back, before the changes made ahead of
        this call are undone."""
        self._undo.append(callback)


def forget_inductor_paths() -> None:
    """Drop Inductor's in-memory memos of files under the folders the export used.

    Inductor memoises paths it derived from $TMPDIR and $TORCHINDUCTOR_CACHE_DIR (headers it
    wrote, compiled modules, its lock folder); once the export's temporary folder is gone, a
    later compile in this process would be pointed at deleted files.
    """
    utils = sys.modules.get("torch._inductor.utils")
    clear = getattr(utils, "clear_caches", None) if utils is not None else None
    if clear is not None:
        clear()
