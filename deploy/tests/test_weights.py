"""Weights files: `export --weights-only` and `loader --weights` on //deploy:default_package.

//deploy:retrained_weights holds the default model's weights after another training run
(default_model.make_retrained_model), for the default package, signed with the test key pair,
with that model's eager outputs on its sample. The package's code is unchanged, so the loader's
outputs with these weights are compared with eager at the exporter's own verify tolerance
(1e-4, float32: the package's kernels reorder float32 sums, nothing else).

Every refusal is exit 10 and one line: a weights file that is not what its manifest says, or a
manifest that does not fit the loaded package, are integrity failures of the shipped files, like
a package that does not match manifest.json; exit 7 is for the inputs of a run, which are not at
fault here.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (
    EXIT_CODES,
    child_env,
    error_lines,
    package_folder,
    run_export,
    run_loader,
    writable_copy,
)


def _run(
    loader_bin: str,
    package: Path,
    weights: Path | None,
    expect: Path,
    tmp_path: Path,
    *extra: str,
):
    args = [
        "--package",
        str(package / "model.pt2"),
        "--input",
        str(expect.parent / "sample_input.pt"),
    ]
    args += ["--output", str(tmp_path / "out.pt"), "--expect", str(expect), *extra]
    if weights is not None:
        args += ["--weights", str(weights / "weights.bin")]
    return run_loader(loader_bin, args, tmp_path / "tmp")


def _refused(proc, needle: str) -> str:
    assert proc.returncode == EXIT_CODES["integrity"], (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("loader: error: "), proc.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def test_new_weights_give_the_retrained_models_outputs(
    loader_bin: str, default_package: Path, retrained_weights: Path, tmp_path: Path
) -> None:
    proc = _run(
        loader_bin,
        default_package,
        retrained_weights,
        retrained_weights / "expected_output.pt",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "outputs match" in proc.stdout


def test_without_weights_the_package_keeps_its_own(
    loader_bin: str, default_package: Path, retrained_weights: Path, tmp_path: Path
) -> None:
    # The package alone is the original model (its own expected outputs) ...
    own = _run(loader_bin, default_package, None, default_package / "expected_output.pt", tmp_path)
    assert own.returncode == 0, own.stderr
    # ... and not the retrained one: the weights file is what changes the outputs.
    other = _run(
        loader_bin, default_package, None, retrained_weights / "expected_output.pt", tmp_path
    )
    assert other.returncode == EXIT_CODES["expect_mismatch"], other.stderr


def test_signed_weights_verify_with_the_public_key(
    loader_bin: str,
    exported: Path,
    retrained_weights: Path,
    signing_keys: Path,
    tmp_path: Path,
) -> None:
    key = ["--public-key", str(signing_keys / "public_key.pem")]
    proc = _run(
        loader_bin,
        exported,
        retrained_weights,
        retrained_weights / "expected_output.pt",
        tmp_path,
        *key,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def weights(retrained_weights: Path, tmp_path: Path) -> Path:
    """A writable copy of //deploy:retrained_weights."""
    return writable_copy(retrained_weights, tmp_path / "weights")


def _edit_manifest(folder: Path, edit) -> None:
    path = folder / "weights.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def _constant(manifest: dict, name: str) -> dict:
    return next(c for c in manifest["constants"] if c["name"] == name)


def test_weights_for_another_package_are_refused(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    _edit_manifest(weights, lambda m: m["package"].update(sha256="0" * 64))
    proc = _run(loader_bin, default_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, "is for another package")


def test_a_flipped_byte_is_refused(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    blob = bytearray((weights / "weights.bin").read_bytes())
    blob[len(blob) // 2] ^= 0x01
    (weights / "weights.bin").write_bytes(bytes(blob))
    proc = _run(loader_bin, default_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, "does not match weights manifest")


def test_a_truncated_weights_file_is_refused(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    blob = (weights / "weights.bin").read_bytes()
    (weights / "weights.bin").write_bytes(blob[:-64])
    proc = _run(loader_bin, default_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, "the manifest says")


def test_a_changed_signed_manifest_is_refused(
    loader_bin: str, exported: Path, weights: Path, signing_keys: Path, tmp_path: Path
) -> None:
    # Only the layout changes, not what it says: the signature covers the bytes.
    (weights / "weights.json").write_text(
        json.dumps(json.loads((weights / "weights.json").read_text()))
    )
    key = ["--public-key", str(signing_keys / "public_key.pem")]
    proc = _run(loader_bin, exported, weights, weights / "expected_output.pt", tmp_path, *key)
    _refused(proc, "does not verify weights manifest")


def test_unsigned_weights_are_refused_with_a_public_key(
    loader_bin: str, exported: Path, weights: Path, signing_keys: Path, tmp_path: Path
) -> None:
    (weights / "weights.sig").unlink()
    key = ["--public-key", str(signing_keys / "public_key.pem")]
    proc = _run(loader_bin, exported, weights, weights / "expected_output.pt", tmp_path, *key)
    _refused(proc, "is not signed")


def _rename(m: dict) -> None:
    _constant(m, "stem.weight")["name"] = "stem.w"


def _reshape(m: dict) -> None:
    # The same number of bytes: only the shape check can tell.
    _constant(m, "gate_up.weight")["shape"] = [128, 128]


def _retype(m: dict) -> None:
    _constant(m, "qkv.bias")["dtype"] = "Int"


def _drop_object(m: dict) -> None:
    m["custom_objects"] = []


def _drop_object_tensor(m: dict) -> None:
    m["custom_objects"][0]["tensors"] = []


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_rename, "it lacks the package's constant stem.weight"),
        (
            _reshape,
            "constant gate_up.weight is Float [128, 128] in the weights file, Float [8, 64, 32]",
        ),
        (_retype, "constant qkv.bias is Int [192] in the weights file, Float [192]"),
        (_drop_object, "it lacks the package's custom object _torchbind_obj0"),
        (_drop_object_tensor, "state item 0 is a tensor the weights file does not carry"),
    ],
    ids=["renamed", "reshaped", "retyped", "object-missing", "object-tensor-missing"],
)
def test_constants_that_do_not_fit_are_refused(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path, edit, needle: str
) -> None:
    """An unsigned manifest edited by hand: its sha256 sums still hold, the package's constants
    do not fit it. Nothing may be loaded, since the copy writes where the package's own
    constants are (exit 10, not the input-mismatch 7: the shipped files disagree)."""
    _edit_manifest(weights, edit)
    proc = _run(loader_bin, default_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, needle)


def test_weights_of_one_export_fit_the_same_model_exported_again(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    """The manifest names its package by sha256, not by file name: a renamed copy is accepted."""
    package = tmp_path / "renamed"
    package.mkdir()
    shutil.copyfile(default_package / "model.pt2", package / "model.pt2")
    shutil.copyfile(default_package / "manifest.json", package / "manifest.json")
    proc = _run(loader_bin, package, weights, weights / "expected_output.pt", tmp_path)
    assert proc.returncode == 0, proc.stderr


# --- the exporter -----------------------------------------------------------------------------


def _export_weights(model: str, base: Path, tmp_path: Path, *extra: str):
    out = tmp_path / "out"
    args = ["--weights-only", "--base", str(base), "--model", model, "--out", str(out), *extra]
    return run_export(args, tmp_path / "tmp"), out


@pytest.mark.parametrize(
    ("model", "needle"),
    [
        (
            "other_architectures:renamed",
            "constant input_proj.weight of this model is not in the base",
        ),
        (
            "other_architectures:reshaped",
            "constant down.weight is Float [2, 96, 32] here, Float [2, 128, 32]",
        ),
        (
            "other_architectures:retyped",
            "constant proj.bias is Double [64] here, Float [64] in the base",
        ),
        (
            "other_architectures:other_eps",
            "custom object _torchbind_obj0, state item 1: 1e-06 here, 1e-05",
        ),
        ("other_architectures:other_graph", "the exported graph differs from the base's"),
    ],
    ids=["renamed", "reshaped", "retyped", "object-state", "graph"],
)
def test_export_refuses_another_architecture(
    default_package: Path, tmp_path: Path, model: str, needle: str
) -> None:
    proc, out = _export_weights(model, default_package, tmp_path)
    assert proc.returncode == EXIT_CODES["not_base_architecture"], proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("export: error: "), proc.stderr
    assert needle in lines[0], lines[0]
    assert not out.exists()


def test_export_writes_the_weights_the_loader_takes(
    loader_bin: str, default_package: Path, tmp_path: Path
) -> None:
    """A weights export run here (the build-time one is checked above), of the same model as the
    package: its weights reproduce the package's own outputs bit for bit."""
    proc, out = _export_weights("deploy.default_model:make_model", default_package, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "expected_output.pt",
        "sample_input.pt",
        "weights.bin",
        "weights.json",
    ]
    manifest = json.loads((out / "weights.json").read_text())
    package_manifest = json.loads((default_package / "manifest.json").read_text())
    assert manifest["package"] == package_manifest["package"]
    assert manifest["blob"]["size"] == (out / "weights.bin").stat().st_size
    args = [
        "--package",
        str(default_package / "model.pt2"),
        "--input",
        str(default_package / "sample_input.pt"),
        "--output",
        str(tmp_path / "a.pt"),
    ]
    plain = run_loader(loader_bin, args, tmp_path / "tmp")
    assert plain.returncode == 0, plain.stderr
    args += ["--weights", str(out / "weights.bin"), "--expect", str(tmp_path / "a.pt"), "--exact"]
    args[5] = str(tmp_path / "b.pt")
    same = run_loader(loader_bin, args, tmp_path / "tmp")
    assert same.returncode == 0, same.stderr


def test_export_refuses_a_base_without_architecture(default_package: Path, tmp_path: Path) -> None:
    base = writable_copy(default_package, tmp_path / "base")
    (base / "architecture.json").unlink()
    proc, out = _export_weights("deploy.default_model:make_model", base, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "has no architecture.json" in proc.stderr
    assert not out.exists()


def test_export_refuses_a_base_whose_package_changed(default_package: Path, tmp_path: Path) -> None:
    base = writable_copy(default_package, tmp_path / "base")
    with open(base / "model.pt2", "ab") as f:
        f.write(b"\0")
    proc, out = _export_weights("deploy.default_model:make_model", base, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"{base / 'model.pt2'} is not the package {base / 'manifest.json'} describes" in (
        proc.stderr
    )
    assert not out.exists()


@pytest.fixture(scope="session")
def tuned_package() -> Path:
    """//deploy:tuned_package: the default model exported with --mode max-autotune."""
    return package_folder("MY_OPS_TUNED_PACKAGE", "//deploy:tuned_package")


def test_max_autotune_freezes_the_weights_and_the_default_mode_does_not(
    loader_bin: str, tuned_package: Path, default_package: Path, tmp_path: Path
) -> None:
    """The tuned package runs, matching the default model's eager outputs, and records that its
    weights are frozen; the package of the exporter's defaults records that they are not."""
    assert json.loads((tuned_package / "architecture.json").read_text())["frozen"] is True
    assert json.loads((default_package / "architecture.json").read_text())["frozen"] is False
    proc = _run(loader_bin, tuned_package, None, tuned_package / "expected_output.pt", tmp_path)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="session")
def int8_package() -> Path:
    """//deploy:int8_package: the default model exported with --quantize int8 and no --mode."""
    return package_folder("MY_OPS_INT8_PACKAGE", "//deploy:int8_package")


@pytest.fixture(scope="session")
def int8_retrained_weights() -> Path:
    """//deploy:int8_retrained_weights: the retrained model's int8 weights for int8_package,
    signed, with that quantized model's eager outputs."""
    return package_folder(
        "MY_OPS_INT8_RETRAINED_WEIGHTS", "//deploy:int8_retrained_weights", marker="weights.bin"
    )


def test_a_quantized_package_takes_signed_weights_of_its_scheme(
    loader_bin: str,
    int8_package: Path,
    int8_retrained_weights: Path,
    signing_keys: Path,
    tmp_path: Path,
) -> None:
    """--quantize's default mode leaves the weights updatable: every linear layer is an op of
    ours, which reads the int8 weights as they are, so there is nothing for freezing to prepack.
    The file's expected outputs are the package's own with its weights, which the loader
    reproduces to the bit; the quantized model's in eager can differ by a quantization step
    wherever compiled float math moves an activation across a rounding boundary (SmolLM2's
    logits by 1.8)."""
    manifest = json.loads((int8_package / "manifest.json").read_text())
    assert manifest["quantization"]["scheme"] == "int8"
    assert json.loads((int8_package / "architecture.json").read_text())["frozen"] is False
    weights = json.loads((int8_retrained_weights / "weights.json").read_text())
    dtypes = {c["name"]: c["dtype"] for c in weights["constants"]}
    assert dtypes["down.weight"] == "Char" and dtypes["down.weight_scale"] == "Float", dtypes
    expect = int8_retrained_weights / "expected_output.pt"
    key = ("--public-key", str(signing_keys / "public_key.pem"))
    proc = _run(loader_bin, int8_package, int8_retrained_weights, expect, tmp_path, *key, "--exact")
    assert proc.returncode == 0, proc.stderr
    assert "outputs match" in proc.stdout
    # The package's own weights do not give the retrained model's outputs.
    own = _run(loader_bin, int8_package, None, expect, tmp_path)
    assert own.returncode == EXIT_CODES["expect_mismatch"], own.stderr


def test_float_weights_for_a_quantized_package_are_refused(
    loader_bin: str, int8_package: Path, weights: Path, tmp_path: Path
) -> None:
    proc = _run(loader_bin, int8_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, "is for another package")
    # Even named as the int8 package's: the float file has no scales for its int8 weights, and
    # nothing is copied (the check compares the manifest with the package's constants).
    sha256 = json.loads((int8_package / "manifest.json").read_text())["package"]["sha256"]
    _edit_manifest(weights, lambda m: m["package"].update(sha256=sha256))
    proc = _run(loader_bin, int8_package, weights, weights / "expected_output.pt", tmp_path)
    line = _refused(proc, "does not fit the package: it lacks the package's constant ")
    assert line.endswith(".weight_scale"), line


def test_export_refuses_a_frozen_base(tuned_package: Path, tmp_path: Path) -> None:
    """Its constants are prepacked copies under Inductor's names: a weights file of the program's
    parameters would be refused by the loader, so none is written."""
    proc, out = _export_weights("deploy.default_model:make_model", tuned_package, tmp_path)
    assert proc.returncode == EXIT_CODES["not_base_architecture"], proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith("export: error: "), proc.stderr
    assert lines[0].startswith(f"export: error: --base {tuned_package}: "), lines[0]
    assert "weights frozen into it" in lines[0] and "--mode no-autotune" in lines[0], lines[0]
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["tmp"]


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("frozen", "no", "frozen is not true or false"),
        ("tied", ["a"], "tied is not names to names"),
        ("tied", {"a": 1}, "tied is not names to names"),
        ("unused", "a", "unused is not a list of names"),
        ("unused", [None], "unused is not a list of names"),
    ],
)
def test_export_refuses_a_base_with_a_malformed_architecture_field(
    default_package: Path, tmp_path: Path, field: str, value: object, why: str
) -> None:
    base = writable_copy(default_package, tmp_path / "base")
    arch = json.loads((base / "architecture.json").read_text())
    (base / "architecture.json").write_text(json.dumps(arch | {field: value}))
    proc, out = _export_weights("deploy.default_model:make_model", base, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert error_lines(proc.stderr) == [f"export: error: --base {base}: architecture.json's {why}"]
    assert not out.exists()


def test_a_constant_of_a_dtype_weights_files_cannot_hold(tmp_path: Path) -> None:
    """architecture.json records it (a full export must not fail for it); a weights file for
    such a model is refused with one line naming the constant."""
    import torch

    from deploy.exporter.errors import ExportError
    from deploy.exporter.weights import architecture, write_weights

    class WithComplex(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)
            self.register_buffer("phase", torch.ones(4, dtype=torch.complex64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x) * self.phase.real

    ep = torch.export.export(WithComplex(), (torch.ones(2, 4),))
    recorded = {c["name"]: c["dtype"] for c in architecture(ep)["constants"]}
    assert recorded == {
        "linear.weight": "Float",
        "linear.bias": "Float",
        "phase": "torch.complex64",
    }
    with pytest.raises(ExportError, match="constant phase has dtype torch.complex64"):
        write_weights(str(tmp_path), ep, {"file": "model.pt2", "sha256": "0" * 64}, None)


# --- crafted weights files: every refusal before anything is allocated from the manifest -------


def _peak_run(loader_bin: str, args: list[str], tmp_path: Path, limit_as: int | None = None):
    """Runs the loader; returns (exit status, stderr, its peak resident memory in KiB), the peak
    of that one process (wait4), whatever else the test process ran before."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    err_path = tmp_path / "stderr.txt"

    def limit() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [loader_bin, *args],
            env=child_env(scratch),
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=limit,
        )
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, err_path.read_text(), usage.ru_maxrss


def _claim_the_rest_of(weights: Path, size: int) -> None:
    """weights.bin made `size` bytes (sparse), and stem.weight claimed to fill all of it after
    the real tensors, with a sha256 that nothing can match."""
    blob = weights / "weights.bin"
    end = (blob.stat().st_size + 63) // 64 * 64
    os.truncate(blob, size)

    def claim(m: dict) -> None:
        m["blob"].update(size=size, sha256="0" * 64)
        _constant(m, "stem.weight").update(offset=end, shape=[(size - end) // 4])

    _edit_manifest(weights, claim)


def _weights_args(package: Path, weights: Path, tmp_path: Path) -> list[str]:
    return [
        "--package",
        str(package / "model.pt2"),
        "--input",
        str(weights / "sample_input.pt"),
        "--output",
        str(tmp_path / "out.pt"),
        "--weights",
        str(weights / "weights.bin"),
    ]


def test_a_claim_beyond_the_package_costs_no_memory(
    loader_bin: str, default_package: Path, retrained_weights: Path, weights: Path, tmp_path: Path
) -> None:
    """A 2 GiB weights file whose manifest claims stem.weight fills it: refused (exit 10, one
    line) against the package's own stem.weight before a tensor is allocated or a byte of the
    file read, so at the memory of a run with the right weights file (a read-and-hash-first
    reader peaked at 2.49 GB here, against 514 MiB)."""
    rc, err, normal_kib = _peak_run(
        loader_bin, _weights_args(default_package, retrained_weights, tmp_path), tmp_path
    )
    assert rc == 0, err
    _claim_the_rest_of(weights, 2 << 30)
    rc, err, crafted_kib = _peak_run(
        loader_bin, _weights_args(default_package, weights, tmp_path), tmp_path
    )
    assert rc == EXIT_CODES["integrity"], (rc, err)
    line = _refused(subprocess.CompletedProcess([], rc, "", err), "constant stem.weight is Float")
    assert "in the weights file" in line
    assert crafted_kib <= 1.1 * normal_kib, (crafted_kib, normal_kib)


def test_a_claim_beyond_the_address_space_is_an_integrity_error(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    """The same claim at 32 GiB with 8 GiB of address space: exit 10 as --help promises for a
    weights file that does not fit the package, not exit 1 from a failed allocation."""
    _claim_the_rest_of(weights, 32 << 30)
    rc, err, _ = _peak_run(
        loader_bin, _weights_args(default_package, weights, tmp_path), tmp_path, limit_as=8 << 30
    )
    assert rc == EXIT_CODES["integrity"], (rc, err)
    _refused(subprocess.CompletedProcess([], rc, "", err), "constant stem.weight is Float")


def test_an_empty_shape_whose_strides_overflow_is_refused(
    loader_bin: str, default_package: Path, weights: Path, tmp_path: Path
) -> None:
    # No bytes, but c10 could not compute its strides ("Stride calculation overflowed", exit 1).
    _edit_manifest(weights, lambda m: _constant(m, "stem_bias").update(shape=[0, 2**62, 2**62]))
    proc = _run(loader_bin, default_package, weights, weights / "expected_output.pt", tmp_path)
    _refused(proc, "'shape' is larger than any file")


@pytest.mark.parametrize(
    ("flag", "given"),
    [
        ("--weights", ["--weights", ""]),
        ("--weights", ["--weights="]),
        ("--public-key", ["--public-key", ""]),
        ("--weights-manifest", ["--weights-manifest", ""]),
    ],
    ids=["weights", "weights-inline", "public-key", "weights-manifest"],
)
def test_an_empty_flag_value_is_a_usage_error(
    loader_bin: str,
    default_package: Path,
    retrained_weights: Path,
    tmp_path: Path,
    flag: str,
    given: list[str],
) -> None:
    """`--public-key "$KEY"` with KEY unset ran unsigned weights; `--weights ""` ran the
    package's own. Each is exit 2, one line naming the flag, before anything is loaded."""
    args = _weights_args(default_package, retrained_weights, tmp_path)
    if flag != "--public-key":
        del args[-2:]
        if flag == "--weights-manifest":
            args += ["--weights", str(retrained_weights / "weights.bin")]
    proc = run_loader(loader_bin, [*args, *given], tmp_path / "tmp")
    assert proc.returncode == EXIT_CODES["usage"], (proc.returncode, proc.stderr)
    assert error_lines(proc.stderr) == [f"loader: error: {flag} needs a non-empty value"]
    assert not (tmp_path / "out.pt").exists()
