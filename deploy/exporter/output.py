"""The --out folder: which folders an export may replace, and the swap that publishes it.

--out is replaced as a whole, so only a new or empty folder, or a previous
export, qualifies. The new export is staged in a work folder beside --out and
swapped in with renames, so readers never see a half-written folder and a
failure or Ctrl-C leaves the previous export in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from typing import Any

from .contract import load_contract
from .errors import EXIT_OUT_REFUSED, ExportError
from .manifest import manifest_format


def export_files() -> set[str]:
    """Everything an export (or a weights export) may write into --out, as the contract lists it."""
    c = load_contract()
    return {
        *c.export_files,
        *c.optional_export_files,
        *c.weights_files,
        *c.optional_weights_files,
    }


def _is_export_manifest(path: str, current_format: str) -> bool:
    try:
        with open(path, "rb") as f:
            # A manifest of ours is at most a few hundred kilobytes; a huge file is not one.
            data = json.loads(f.read(16 << 20))
    except (OSError, ValueError):
        return False
    # Any format of this tool's: an export made before the format changed is still one, and the
    # new export replaces it.
    family = current_format.rsplit("/", 1)[0] + "/"
    fmt = data.get("format") if isinstance(data, dict) else None
    return isinstance(fmt, str) and fmt.startswith(family)


def _is_previous_export(folder: str) -> bool:
    """A folder this tool wrote: an export (manifest.json) or a weights export (weights.json)."""
    return _is_export_manifest(
        os.path.join(folder, "manifest.json"), manifest_format()
    ) or _is_export_manifest(os.path.join(folder, "weights.json"), load_contract().weights_format)


def check_out(path: str, shown: str | None = None, name: str = "--out") -> None:
    """Refuse an output folder the export may not replace; reads, never writes.

    Replacing --out deletes what is in it, so only a missing or empty folder,
    or a previous export (this tool's manifest.json and nothing but export
    files), qualifies. `shown` is the path to report when `path` is where
    --out has been moved to; `name` is the setting's name in the errors.
    """
    shown = shown or path
    if os.path.islink(path):
        raise ExportError(
            f"{name} {shown} is a symbolic link; not replacing it (give the folder itself)",
            EXIT_OUT_REFUSED,
        )
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path):
        raise ExportError(
            f"{name} {shown} exists and is not a folder; not replacing it", EXIT_OUT_REFUSED
        )
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise ExportError(f"cannot read {name} {shown}: {e.strerror}", EXIT_OUT_REFUSED) from e
    if not names:
        return
    allowed = export_files()
    foreign = [
        name
        for name in names
        if name not in allowed
        # A folder or a link under an export file's name is not what we wrote.
        or os.path.islink(os.path.join(path, name))
        or not os.path.isfile(os.path.join(path, name))
    ]
    if foreign:
        listed = ", ".join(repr(n) for n in foreign[:3])
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        why = f"it holds {listed}{more}"
    elif not _is_previous_export(path):
        family = manifest_format().rsplit("/", 1)[0]
        why = f"it has no manifest.json of format {family}/N, nor a weights.json"
    else:
        return
    raise ExportError(
        f"{name} {shown} is neither empty nor a previous export ({why}); not replacing it: "
        "choose a new or empty folder",
        EXIT_OUT_REFUSED,
    )


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then deliver them.

    Between the two renames of the swap --out does not exist; a signal there
    would end the process before the old folder is put back.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        pending.append(signum)

    saved: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in saved.items():
            # None: a handler installed outside Python, which cannot be restored.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if pending:
            signal.raise_signal(pending[0])


def publish(stage: str, out: str, work: str) -> None:
    """Replace `out` with the folder `stage`; `work` (beside `out`) holds the old one meanwhile."""
    # Swap folders with renames (same filesystem, since work/ is beside out)
    # so readers never see a half-written output folder. Checked again first:
    # the folder may have changed during the minutes of compiling.
    check_out(out)
    old = os.path.join(work, "old")
    with _signals_deferred():
        moved = False
        try:
            if os.path.lexists(out):
                os.rename(out, old)
                moved = True
                # Whatever was added after the check above moved with the folder.
                check_out(old, shown=out)
            os.rename(stage, out)
        except BaseException as e:
            if moved:
                _put_back(old, out)
            if isinstance(e, OSError):
                raise ExportError(f"cannot write output folder {out}: {e.strerror}") from e
            raise
        if moved:
            shutil.rmtree(old, ignore_errors=True)


def _put_back(old: str, out: str) -> None:
    try:
        os.rename(old, out)
    except OSError as e:
        # remove_work keeps work/old, so the previous export is not lost.
        raise ExportError(
            f"cannot put the previous output back at {out} ({e.strerror}); it is in {old}"
        ) from e


def remove_work(work: str) -> None:
    old = os.path.join(work, "old")
    if not os.path.lexists(old):
        shutil.rmtree(work, ignore_errors=True)
        return
    # A swap that could not be undone: work/old holds the previous export.
    for name in os.listdir(work):
        if name != "old":
            shutil.rmtree(os.path.join(work, name), ignore_errors=True)


def missing_folders(path: str) -> list[str]:
    """The folders os.makedirs(path) would create, deepest first."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def remove_empty(folders: list[str]) -> None:
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return
