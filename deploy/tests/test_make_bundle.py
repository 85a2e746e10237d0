"""make_bundle packs only files that match the export's manifest.json.

Everything is fabricated: stand-in package, op library and loader, and a
manifest whose sha256 sums are computed here, so nothing is exported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

# absolute(), not resolve(): make_bundle.py finds run.sh beside itself in the
# runfiles tree.
DEPLOY_DIR = Path(os.path.abspath(__file__)).parent.parent
MAKE_BUNDLE = DEPLOY_DIR / "make_bundle.py"
EXIT_MISMATCH = 3
TOP = "my_ops_bundle"
# The format make_bundle.py and the loader read, from the contract they share.
MANIFEST_FORMAT = json.loads((DEPLOY_DIR / "package_contract.json").read_text())["manifest_format"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Fixture:
    def __init__(self, root: Path) -> None:
        self.export_dir = root / "out"
        self.export_dir.mkdir()
        self.model = self.export_dir / "model.pt2"
        self.model.write_bytes(b"PK stand-in package")
        (self.export_dir / "sample_input.pt").write_bytes(b"input")
        (self.export_dir / "expected_output.pt").write_bytes(b"output")
        self.ops = root / "libmy_ops.so"
        self.ops.write_bytes(b"\x7fELF stand-in op library")
        self.loader = root / "loader"
        self.loader.write_bytes(b"\x7fELF stand-in loader")
        self.manifest = self.export_dir / "manifest.json"
        self.write_manifest()
        self.dist = root / "dist"
        self.dist.mkdir()
        self.output = self.dist / "bundle.tar.gz"

    def write_manifest(self, **changes: Any) -> None:
        manifest = {
            "format": MANIFEST_FORMAT,
            "package": {"file": "model.pt2", "sha256": sha256(self.model.read_bytes())},
            "op_libraries": [{"file": "libmy_ops.so", "sha256": sha256(self.ops.read_bytes())}],
            "torch_version": "2.14.1",
            "target": "linux-x86_64",
            "isa": "x86-64-v3",
            "cpu_features": ["avx2"],
            "device": "cpu",
        }
        manifest.update(changes)
        self.manifest.write_text(json.dumps(manifest, indent=2) + "\n")

    def args(self) -> list[str]:
        return ["--export-dir", str(self.export_dir), "--loader", str(self.loader),
                "--ops", str(self.ops), "--output", str(self.output)]  # fmt: skip

    def run(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(MAKE_BUNDLE), *self.args()],
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def fx(tmp_path: Path) -> Fixture:
    return Fixture(tmp_path)


def assert_failed(proc: subprocess.CompletedProcess, fx: Fixture, needle: str, code: int) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("make_bundle: error: "), proc.stderr
    assert needle in lines[0], proc.stderr
    # No archive and no temporary file beside where it would have gone.
    assert os.listdir(fx.dist) == []


def test_matching_files_are_bundled(fx: Fixture) -> None:
    proc = fx.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(fx.output)
    assert os.listdir(fx.dist) == ["bundle.tar.gz"]
    with tarfile.open(fx.output) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == sorted(
            f"{TOP}/{n}"
            for n in ("loader", "libmy_ops.so", "model.pt2", "sample_input.pt",
                      "expected_output.pt", "manifest.json", "run.sh", "README.md")
        )  # fmt: skip
        model = tar.extractfile(f"{TOP}/model.pt2")
        assert model is not None and model.read() == fx.model.read_bytes()
    assert members[f"{TOP}/run.sh"].mode == 0o755
    # Same inputs, same bytes: nothing time- or name-dependent in the archive.
    first = fx.output.read_bytes()
    assert first[4:8] == bytes(4), "gzip header carries a timestamp"
    assert fx.run().returncode == 0
    assert fx.output.read_bytes() == first


def test_package_not_in_manifest(fx: Fixture) -> None:
    fx.model.write_bytes(b"PK a different package")
    assert_failed(fx.run(), fx, str(fx.model), EXIT_MISMATCH)


def test_ops_not_in_manifest(fx: Fixture) -> None:
    fx.ops.write_bytes(b"\x7fELF another build of the op library")
    assert_failed(fx.run(), fx, str(fx.ops), EXIT_MISMATCH)


def test_ops_listed_under_another_name(fx: Fixture) -> None:
    # The loader matches op libraries by sha256, whatever their name.
    digest = sha256(fx.ops.read_bytes())
    fx.write_manifest(op_libraries=[{"file": "other.so", "sha256": digest}])
    assert fx.run().returncode == 0


# PACKAGE_SHA256 stands for the stand-in package's own sha256, so that a case
# that lists the package is refused for what it lacks, not for a package
# that does not match.
PACKAGE_SHA256 = "<sha256 of model.pt2>"


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("not json", "is not valid JSON"),
        ("[]", "is not a JSON object"),
        ('{"format": "someone.else/1"}', "'someone.else/1'"),
        (json.dumps({"format": MANIFEST_FORMAT, "op_libraries": []}), "no package"),
        (
            json.dumps({"format": MANIFEST_FORMAT, "package": {"sha256": PACKAGE_SHA256}}),
            "no op_libraries",
        ),
    ],
    ids=["not_json", "not_object", "foreign_format", "no_package", "no_op_libraries"],
)
def test_broken_manifest(fx: Fixture, text: str, phrase: str) -> None:
    fx.manifest.write_text(text.replace(PACKAGE_SHA256, sha256(fx.model.read_bytes())))
    proc = fx.run()
    assert_failed(proc, fx, str(fx.manifest), EXIT_MISMATCH)
    assert phrase in proc.stderr, proc.stderr


def test_failure_keeps_the_previous_archive(fx: Fixture) -> None:
    fx.output.write_bytes(b"previous archive")
    fx.model.write_bytes(b"PK a different package")
    proc = fx.run()
    assert proc.returncode == EXIT_MISMATCH, proc.stderr
    assert os.listdir(fx.dist) == ["bundle.tar.gz"]
    assert fx.output.read_bytes() == b"previous archive"


def _load_make_bundle() -> Any:
    spec = importlib.util.spec_from_file_location("make_bundle", MAKE_BUNDLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("exc", [KeyboardInterrupt, MemoryError])
def test_interrupted_packing_leaves_nothing(
    fx: Fixture, monkeypatch: pytest.MonkeyPatch, exc: type[BaseException]
) -> None:
    make_bundle = _load_make_bundle()
    real_add = make_bundle._add
    calls = []

    def add(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 3:
            raise exc
        real_add(*args)

    monkeypatch.setattr(make_bundle, "_add", add)
    with pytest.raises(exc):
        make_bundle.main(fx.args())
    assert len(calls) == 3
    assert os.listdir(fx.dist) == []
