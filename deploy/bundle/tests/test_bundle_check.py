"""The bundle check passes only files that match the export's manifest.json.

edge_bundle runs deploy/bundle/bundle_check.py on every bundle's package
before packing it; here it runs on fabricated files: a stand-in package and
op library, and a manifest whose sha256 sums are computed here, so nothing is
exported.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import EXIT_CODES, absolute_from_env
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from deploy.bundle.check import BundleError, check_export
from deploy.contract.package_contract import load as load_contract

CONTRACT = load_contract()
# From the table every program follows (pinned by the contract's test), not from the check.
EXIT_FAILURE = EXIT_CODES["other"]
EXIT_USAGE = EXIT_CODES["usage"]
EXIT_MISMATCH = EXIT_CODES["integrity"]
# The format the check and the loader read, from the contract they share.
MANIFEST_FORMAT = CONTRACT.manifest_format


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
        (self.export_dir / "architecture.json").write_text("{}\n")
        self.ops = root / "libmy_ops.so"
        self.ops.write_bytes(b"\x7fELF stand-in op library")
        self.manifest = self.export_dir / "manifest.json"
        self.write_manifest()
        self.dist = root / "dist"

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

    def files(self) -> list[str]:
        return sorted(str(p) for p in self.export_dir.iterdir())

    def run(self, files: list[str] | None = None) -> subprocess.CompletedProcess:
        check = absolute_from_env(os.environ["BUNDLE_CHECK"])
        return subprocess.run(
            [check, "--ops", str(self.ops), "--out", str(self.dist), *(files or self.files())],
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
    assert lines[0].startswith("bundle_check: error: "), proc.stderr
    assert needle in lines[0], proc.stderr
    # Nothing copied for the bundle.
    assert not fx.dist.exists() or os.listdir(fx.dist) == []


def test_matching_files_are_copied(fx: Fixture) -> None:
    proc = fx.run()
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(fx.dist)) == sorted(CONTRACT.export_files)
    assert (fx.dist / "model.pt2").read_bytes() == fx.model.read_bytes()


def test_signed_export_is_copied(fx: Fixture) -> None:
    (fx.export_dir / "manifest.sig").write_bytes(b"signature")
    proc = fx.run()
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(fx.dist)) == sorted([*CONTRACT.export_files, "manifest.sig"])


def _weights_beside(fx: Fixture, package_sha256: str | None = None) -> bytes:
    blob = b"\0" * 64
    manifest = {
        "package": {"file": "model.pt2", "sha256": package_sha256 or sha256(fx.model.read_bytes())},
        "blob": {"file": "weights.bin", "sha256": sha256(blob), "size": 64},
    }
    (fx.export_dir / "weights.bin").write_bytes(blob)
    (fx.export_dir / "weights.json").write_text(json.dumps(manifest))
    return blob


def test_weights_beside_the_package_are_copied(fx: Fixture) -> None:
    _weights_beside(fx)
    proc = fx.run()
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(fx.dist)) == sorted(
        [*CONTRACT.export_files, "weights.bin", "weights.json"]
    )


def test_weights_for_another_package_are_refused(fx: Fixture) -> None:
    _weights_beside(fx, package_sha256="0" * 64)
    proc = fx.run()
    assert proc.returncode == EXIT_MISMATCH, proc.stderr
    assert "weights.json is for another package" in proc.stderr, proc.stderr


def test_weights_that_do_not_match_their_manifest_are_refused(fx: Fixture) -> None:
    _weights_beside(fx)
    (fx.export_dir / "weights.bin").write_bytes(b"\1" * 64)
    proc = fx.run()
    assert proc.returncode == EXIT_MISMATCH, proc.stderr
    assert "does not match" in proc.stderr and "weights.bin" in proc.stderr, proc.stderr


def test_a_weights_file_without_its_manifest_is_refused(fx: Fixture) -> None:
    _weights_beside(fx)
    (fx.export_dir / "weights.json").unlink()
    proc = fx.run()
    assert proc.returncode != 0
    assert "weights.bin of the export without weights.json" in proc.stderr, proc.stderr


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


@pytest.mark.parametrize("name", CONTRACT.export_files)
def test_missing_export_file(fx: Fixture, name: str) -> None:
    files = [f for f in fx.files() if Path(f).name != name]
    assert_failed(fx.run(files), fx, name, 1)


def test_file_that_is_not_an_export_file(fx: Fixture) -> None:
    (fx.export_dir / "notes.txt").write_text("not an export file\n")
    assert_failed(fx.run(), fx, "notes.txt", 1)


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


def test_usage(fx: Fixture) -> None:
    check = absolute_from_env(os.environ["BUNDLE_CHECK"])
    proc = subprocess.run([check, "--ops", str(fx.ops)], capture_output=True, text=True)
    assert proc.returncode == EXIT_USAGE, proc.stderr


@pytest.mark.parametrize("flag", ["--ops", "--out"])
def test_bundle_check_refuses_an_empty_flag_value(fx: Fixture, flag: str) -> None:
    check = absolute_from_env(os.environ["BUNDLE_CHECK"])
    values = {"--ops": str(fx.ops), "--out": str(fx.dist), flag: ""}
    flags = [part for item in values.items() for part in item]
    proc = subprocess.run([check, *flags, *fx.files()], capture_output=True, text=True, timeout=120)
    assert_failed(proc, fx, f"argument {flag}: needs a non-empty value", EXIT_USAGE)


@pytest.mark.parametrize("flag", ["--out", "--loader", "--ops"])
def test_my_ops_bundle_refuses_an_empty_flag_value(
    fx: Fixture, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from deploy.bundle import make_bundle

    out = fx.export_dir.parent / "b.tar.gz"
    args = [str(fx.export_dir), "--out", str(out), "--loader", str(fx.ops), "--ops", str(fx.ops)]
    at = args.index(flag)
    args[at + 1] = ""
    with pytest.raises(SystemExit) as exited:
        make_bundle.main(args)
    assert exited.value.code == EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        f"my-ops-bundle: error: argument {flag}: needs a non-empty value (see --help)"
    ]
    assert not out.exists()


# Any manifest.json an export folder may hold, as check.py reads it before a
# bundle is made (bundle_check.py here, my-ops-bundle from the wheel): JSON
# shaped like a manifest with wrong types anywhere, and arbitrary bytes.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_MANIFESTS = st.fixed_dictionaries(
    {},
    optional={
        "format": st.just(MANIFEST_FORMAT) | _JSON,
        "package": st.fixed_dictionaries({}, optional={"sha256": st.text(max_size=8) | _JSON})
        | _JSON,
        "op_libraries": st.lists(
            st.fixed_dictionaries({}, optional={"sha256": st.text(max_size=8) | _JSON}) | _JSON,
            max_size=3,
        )
        | _JSON,
    },
).map(lambda m: json.dumps(m).encode()) | st.binary(max_size=64)


@pytest.mark.parametrize(
    ("package_sha256", "library_sha256"),
    [
        ("\n", "0" * 64),  # what a CI run's fuzzing drew: the error took two lines
        ("a" * 63 + "\n", "0" * 64),
        ("A" * 64, "0" * 64),
        ("0" * 64, "\u202egnp.exe"),
    ],
)
def test_a_sha256_that_is_not_64_lowercase_hex_digits_is_refused_in_one_line(
    tmp_path: Path, package_sha256: str, library_sha256: str
) -> None:
    # As the loader reads a manifest ('sha256' must be 64 lowercase hex digits): the value is
    # never echoed, so an error stays one line whatever the file holds.
    manifest = {
        "format": MANIFEST_FORMAT,
        "package": {"file": "model.pt2", "sha256": package_sha256},
        "op_libraries": [{"file": "libmy_ops.so", "sha256": library_sha256}],
    }
    files = {}
    for name in CONTRACT.export_files:
        files[name] = tmp_path / name
        files[name].write_bytes(b"stand-in")
    files["manifest.json"].write_text(json.dumps(manifest))
    ops = tmp_path / "libmy_ops.so"
    ops.write_bytes(b"library")
    with pytest.raises(BundleError) as caught:
        check_export(files, ops)
    assert caught.value.code == EXIT_MISMATCH
    assert "must be 64 lowercase hex digits" in str(caught.value)
    assert str(caught.value).isprintable(), str(caught.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_MANIFESTS)
@example(data=b'{"format": "my_ops.manifest/2", "op_libraries": [], "package": {"sha256": "\\n"}}')
def test_fuzzed_manifest_is_refused_in_one_error(tmp_path_factory, data: bytes) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    files = {}
    for name in CONTRACT.export_files:
        files[name] = root / name
        files[name].write_bytes(data if name == "manifest.json" else b"stand-in")
    ops = root / "libmy_ops.so"
    ops.write_bytes(b"library")
    # Either a verdict (a BundleError with its exit status) or, only for a
    # manifest that vouches for both files, the manifest back: nothing else escapes.
    try:
        manifest = check_export(files, ops)
    except BundleError as e:
        assert e.code in (EXIT_FAILURE, EXIT_MISMATCH), e.code
        assert "\n" not in str(e)
    else:
        assert manifest["package"]["sha256"] == sha256(b"stand-in")
