"""export --out replaces only what an export wrote, and the swap survives interrupts.

The CLI tests are refused before anything is compiled. The swap itself is
tested by calling deploy.exporter.output.publish on staged files, so no test here compiles.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import EXIT_CODES, child_env, error_lines, export_command, run_export

from deploy.exporter.errors import ExportError
from deploy.exporter.output import publish

# The C++ loader's format line; a folder whose manifest.json carries it is a
# previous export.
MANIFEST_FORMAT = "my_ops.manifest/2"
# From the table every program follows, not from the exporter under test.
EXIT_OUT_REFUSED = EXIT_CODES["output_unwritable"]


def tree(root: Path) -> dict[str, Any]:
    """Every entry under root with its type, mode and contents (or link target)."""
    entries: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            st = path.lstat()
            if path.is_symlink():
                entries[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                entries[rel] = ("dir", st.st_mode)
            else:
                entries[rel] = ("file", st.st_mode, path.read_bytes())
    return entries


def make_user_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("my notes, not an export\n")
    (path / "sub").mkdir()
    (path / "sub" / "y").write_bytes(b"\x00user data\xff")
    return path


def make_export(
    path: Path, tag: str, signed: bool = False, manifest_format: str = MANIFEST_FORMAT
) -> Path:
    """The files of an export (stand-ins, not a real package)."""
    path.mkdir(parents=True)
    for name in ("model.pt2", "sample_input.pt", "expected_output.pt"):
        (path / name).write_bytes(f"{tag} {name}".encode())
    manifest = {"format": manifest_format, "package": {"file": "model.pt2", "sha256": tag}}
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if signed:
        (path / "manifest.sig").write_bytes(b"\x01" * 64)
    return path


def assert_refused(proc: subprocess.CompletedProcess, folder: Path) -> None:
    assert proc.returncode == EXIT_OUT_REFUSED, (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("export: error: "), proc.stderr
    assert str(folder) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


# --- the command line -------------------------------------------------------


def test_folder_of_user_files_is_refused(tmp_path: Path) -> None:
    out = make_user_folder(tmp_path / "out")
    before = tree(tmp_path)
    # The default model: a valid export, refused before it starts.
    proc = run_export(["--out", str(out)], tmp_path / "tmp")
    assert_refused(proc, out)
    assert "not replacing" in proc.stderr
    (tmp_path / "tmp").rmdir()  # the child's TMPDIR: must be empty
    assert tree(tmp_path) == before


def test_out_dot_in_a_workspace_is_refused(tmp_path: Path) -> None:
    ws = make_user_folder(tmp_path / "ws")
    (ws / "BUILD.bazel").write_text("# a checkout\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    before = tree(tmp_path)
    env = child_env(tmp_path / "tmp")
    # As under `bazel run` from the workspace root.
    env["BUILD_WORKING_DIRECTORY"] = env["BUILD_WORKSPACE_DIRECTORY"] = str(ws)
    proc = subprocess.run(
        [*export_command(), "--out", ".", "--model", "bad_models:data_dependent"],
        cwd=ws, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert_refused(proc, ws)
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


def test_default_out_holding_user_files_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    make_user_folder(ws / "out")
    before = tree(tmp_path)
    env = child_env(tmp_path / "tmp")
    env["BUILD_WORKING_DIRECTORY"] = env["BUILD_WORKSPACE_DIRECTORY"] = str(ws)
    proc = subprocess.run(
        [*export_command(), "--model", "bad_models:data_dependent"],
        cwd=ws, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert_refused(proc, ws / "out")
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


def test_out_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "model.pt2"
    target.write_bytes(b"someone's file")
    before = tree(tmp_path)
    # A broken --model proves --out is checked first.
    proc = run_export(["--out", str(target), "--model", "no_such_module:f"], tmp_path / "tmp")
    assert_refused(proc, target)
    assert "not a folder" in proc.stderr
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


def test_out_is_a_symlink(tmp_path: Path) -> None:
    real = make_export(tmp_path / "real", "old")
    link = tmp_path / "link"
    link.symlink_to(real)
    before = tree(tmp_path)
    proc = run_export(["--out", str(link), "--model", "no_such_module:f"], tmp_path / "tmp")
    assert_refused(proc, link)
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


def _extra_file(out: Path) -> None:
    (out / "notes.txt").write_text("mine")


def _foreign_manifest(out: Path) -> None:
    (out / "manifest.json").write_text('{"format": "someone.else/1"}\n')


def _manifest_format_of_another_tool(out: Path) -> None:
    (out / "manifest.json").write_text('{"format": "my_ops.manifestx/1"}\n')


def _manifest_not_json(out: Path) -> None:
    (out / "manifest.json").write_text("not json")


def _no_manifest(out: Path) -> None:
    (out / "manifest.json").unlink()


def _folder_named_like_an_export_file(out: Path) -> None:
    (out / "sample_input.pt").unlink()
    (out / "sample_input.pt").mkdir()
    (out / "sample_input.pt" / "data").write_text("mine")


def _link_named_like_an_export_file(out: Path) -> None:
    (out / "model.pt2").unlink()
    (out / "model.pt2").symlink_to("/etc/hostname")


NOT_AN_EXPORT = [
    _extra_file,
    _foreign_manifest,
    _manifest_format_of_another_tool,
    _manifest_not_json,
    _no_manifest,
    _folder_named_like_an_export_file,
    _link_named_like_an_export_file,
]


@pytest.mark.parametrize("spoil", NOT_AN_EXPORT, ids=lambda f: f.__name__.strip("_"))
def test_almost_an_export_is_refused(tmp_path: Path, spoil) -> None:
    out = make_export(tmp_path / "out", "old")
    spoil(out)
    before = tree(tmp_path)
    proc = run_export(["--out", str(out), "--model", "no_such_module:f"], tmp_path / "tmp")
    assert_refused(proc, out)
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    "kind", ["previous_export", "signed_export", "export_of_an_older_format", "empty", "missing"]
)
def test_replaceable_out_passes_the_check(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "empty":
        out.mkdir()
    elif kind == "export_of_an_older_format":
        # Written before "ops" and "classes" were added: still this tool's export.
        make_export(out, "old", manifest_format="my_ops.manifest/1")
    elif kind != "missing":
        make_export(out, "old", signed=kind == "signed_export")
    before = tree(tmp_path)
    # Past the --out check, the model fails at once: nothing is compiled.
    proc = run_export(["--out", str(out), "--model", "no_such_module:f"], tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    assert "cannot import" in proc.stderr
    (tmp_path / "tmp").rmdir()
    assert tree(tmp_path) == before


# --- the swap, on staged files ----------------------------------------------


@pytest.fixture
def staged(tmp_path: Path) -> tuple[Path, Path]:
    """(stage, work) as run() leaves them just before publishing."""
    work = tmp_path / ".out.export-test"
    work.mkdir()
    stage = make_export(work / "stage", "new", signed=True)
    return stage, work


@pytest.mark.parametrize(
    "make_out",
    [make_user_folder, lambda p: (make_export(p, "old"), _extra_file(p))],
    ids=["user_files", "export_plus_user_file"],
)
def test_publish_rechecks_out(tmp_path: Path, staged, make_out) -> None:
    # The folder may change while the export compiles: the swap checks again.
    stage, work = staged
    out = tmp_path / "out"
    make_out(out)
    before = tree(tmp_path)
    with pytest.raises(ExportError, match="not replacing") as e:
        publish(str(stage), str(out), str(work))
    assert e.value.code == EXIT_OUT_REFUSED
    assert str(out) in str(e.value)
    assert tree(tmp_path) == before


def test_publish_file_added_during_swap(
    tmp_path: Path, staged, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file that lands after the last check still moves with the folder: it
    # is seen there, and the folder goes back.
    stage, work = staged
    out = make_export(tmp_path / "out", "old")
    real_rename = os.rename

    def rename(src, dst):
        if Path(src) == out:
            (out / "notes.txt").write_text("written during the swap")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(ExportError, match="notes.txt") as e:
        publish(str(stage), str(out), str(work))
    monkeypatch.undo()
    assert e.value.code == EXIT_OUT_REFUSED
    assert (out / "notes.txt").read_text() == "written during the swap"
    assert (out / "model.pt2").read_bytes() == b"old model.pt2"


@pytest.mark.parametrize("old", ["previous_export", "empty", "missing"])
def test_publish_replaces(tmp_path: Path, staged, old: str) -> None:
    stage, work = staged
    out = tmp_path / "out"
    if old == "previous_export":
        make_export(out, "old", signed=True)
    elif old == "empty":
        out.mkdir()
    want = tree(stage)
    publish(str(stage), str(out), str(work))
    assert tree(out) == want
    # The previous export is gone once the new one is in place, and only then.
    assert os.listdir(work) == []


@pytest.mark.parametrize(
    "exc", [KeyboardInterrupt(), OSError(errno.EXDEV, "Invalid cross-device link")],
    ids=["KeyboardInterrupt", "OSError"],
)  # fmt: skip
def test_publish_failure_between_renames_restores(
    tmp_path: Path, staged, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    stage, work = staged
    out = make_export(tmp_path / "out", "old", signed=True)
    before = tree(out)
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # out is in work/ now, the new folder not yet in place
            raise exc
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises((KeyboardInterrupt, ExportError)):
        publish(str(stage), str(out), str(work))
    monkeypatch.undo()
    assert len(calls) >= 2
    assert tree(out) == before


def test_publish_ctrl_c_during_swap(
    tmp_path: Path, staged, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real SIGINT between the renames: the swap finishes first, then the
    # interrupt arrives, so --out is one whole export or the other.
    stage, work = staged
    out = make_export(tmp_path / "out", "old")
    old, new = tree(out), tree(stage)
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        publish(str(stage), str(out), str(work))
    monkeypatch.undo()
    assert tree(out) in (old, new)
