"""Package integrity: the loader checks model.pt2 and every op library
against manifest.json (and, with --public-key, its signature) before it
loads either, and refuses with exit 10, one line naming the file, and no
output. Once the op libraries are loaded, the custom ops and classes the
manifest says the package calls must be registered as exported, or it stops
with exit 3 before the package loads."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import (
    EXIT_CODES,
    MAX_BATCH,
    NO_VERIFY_WARNING,
    error_lines,
    loader_error_lines,
    run_export,
    run_loader,
    writable_copy,
)

from deploy import default_model
from my_ops.pack import pack_linear_layers


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_manifest(path: Path, **changes) -> None:
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest, indent=2) + "\n")


@pytest.fixture
def pkg(exported: Path, ops_library: str, tmp_path: Path) -> Path:
    """A writable copy of the signed export, with the op library beside it."""
    folder = writable_copy(exported, tmp_path / "pkg")
    # copyfile: a new file with the default mode (0644), as writable as the copied ones.
    shutil.copyfile(ops_library, folder / "libmy_ops.so")
    return folder


def _run(loader_bin: str, pkg: Path, tmp_path: Path, *extra: str, ops: Path | None = None):
    out = tmp_path / "out.pt"
    argv = [
        "--ops", str(ops or pkg / "libmy_ops.so"),
        "--package", str(pkg / "model.pt2"),
        "--input", str(pkg / "sample_input.pt"),
        "--output", str(out),
        "--expect", str(pkg / "expected_output.pt"),
        *extra,
    ]  # fmt: skip
    proc = run_loader(loader_bin, argv, tmp_path / "tmpdir")
    assert os.listdir(tmp_path / "tmpdir") == [], "temporary files left behind"
    return proc, out


def _assert_refused(proc, out: Path, *needles: str) -> None:
    assert proc.returncode == EXIT_CODES["integrity"], (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loader: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()
    assert not Path(str(out) + ".tmp").exists()


def _assert_ran(proc, out: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "outputs match" in proc.stdout
    assert out.exists()


def test_manifest_describes_the_export(exported: Path, ops_library: str) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["format"] == "my_ops.manifest/2"
    assert manifest["package"] == {
        "file": "model.pt2",
        "sha256": _sha256(exported / "model.pt2"),
    }
    # The library the export loaded, which is the one under test here.
    assert manifest["op_libraries"] == [
        {"file": "libmy_ops.so", "sha256": _sha256(Path(ops_library))}
    ]
    assert manifest["torch_version"] == torch.__version__
    assert manifest["target"] == "linux-x86_64"
    assert manifest["isa"] == "x86-64-v3"  # the export's default, --isa portable
    assert {"avx2", "fma", "bmi2"} <= set(manifest["cpu_features"])
    assert not any(f.startswith("avx512") for f in manifest["cpu_features"])
    assert manifest["device"] == "cpu"


def test_matching_package_runs(loader_bin, pkg: Path, tmp_path: Path) -> None:
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ran(proc, out)
    assert proc.stderr == ""


def test_flipped_byte_in_package_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    _flip_byte(pkg / "model.pt2")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "model.pt2"), "sha256")


def test_flipped_byte_in_op_library_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    _flip_byte(pkg / "libmy_ops.so")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "libmy_ops.so"), "sha256")


def test_op_library_missing_from_manifest_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # Every library given must be listed, not only the ones the package needs.
    extra = pkg / "libextra.so"
    shutil.copy2(Path(torch.__file__).parent / "lib" / "libc10.so", extra)
    proc, out = _run(loader_bin, pkg, tmp_path, "--ops", str(extra))
    _assert_refused(proc, out, str(extra), "not listed")


def _another_build(model: Path, dest: Path) -> None:
    """The package's members in the reverse order: a package of the same model with
    other bytes, as another export run may write it."""
    with zipfile.ZipFile(model) as src, zipfile.ZipFile(dest, "w") as out:
        for info in reversed(src.infolist()):
            out.writestr(info, src.read(info))


def test_manifest_of_another_build_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # A well-formed manifest for the same torch, but of another package.
    _another_build(pkg / "model.pt2", tmp_path / "other.pt2")
    other = _sha256(tmp_path / "other.pt2")
    assert other != _sha256(pkg / "model.pt2")
    _edit_manifest(pkg / "manifest.json", package={"file": "model.pt2", "sha256": other})
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "model.pt2"), other)


def test_package_of_another_build_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    _another_build(pkg / "model.pt2", tmp_path / "other.pt2")
    shutil.copy2(tmp_path / "other.pt2", pkg / "model.pt2")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "model.pt2"))


def test_other_torch_version_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    _edit_manifest(pkg / "manifest.json", torch_version="2.13.0+cpu")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"), "2.13.0", "2.14")


def test_unknown_cpu_feature_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    _edit_manifest(pkg / "manifest.json", cpu_features=["avx2", "quantum-entanglement"])
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"), "quantum-entanglement")


def test_package_for_another_target_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # As an aarch64 export writes it: refused for its target, before its CPU
    # features (which this loader does not know) are looked at.
    _edit_manifest(
        pkg / "manifest.json", target="linux-aarch64", isa="armv8-a", cpu_features=["asimd", "fp"]
    )
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(
        proc,
        out,
        f"manifest {pkg / 'manifest.json'}: the package was exported for linux-aarch64; this "
        "loader runs on linux-x86_64 (export it with --target linux-x86_64)",
    )


def test_manifest_without_target_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    manifest = json.loads((pkg / "manifest.json").read_text())
    del manifest["target"]
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"), "malformed", "'target'")


def _missing_cpu_feature() -> str | None:
    """A feature the loader knows and this CPU lacks, from /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = next((line.split(":")[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    candidates = {"amx-tile": "amx_tile", "avx512fp16": "avx512_fp16", "avx512f": "avx512f",
                  "avx2": "avx2"}  # fmt: skip
    return next((name for name, flag in candidates.items() if flag not in flags), None)


def test_missing_cpu_feature_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    feature = _missing_cpu_feature()
    if feature is None:
        pytest.skip("this CPU has every candidate feature")
    _edit_manifest(pkg / "manifest.json", isa="native", cpu_features=[feature])
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"), feature, "lacks")


def test_package_file_that_is_a_path_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["package"]["file"] = "../../etc/passwd"
    (pkg / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(
        proc,
        out,
        str(pkg / "manifest.json"),
        "malformed: 'package': 'file' must be a plain file name, not '../../etc/passwd'",
    )


def test_manifest_of_the_previous_format_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # As an export before "ops" and "classes" wrote it: this loader could not check what the
    # package calls.
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest.pop("ops", None)
    manifest.pop("classes", None)
    manifest["format"] = "my_ops.manifest/1"
    (pkg / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(
        proc,
        out,
        str(pkg / "manifest.json"),
        "format 'my_ops.manifest/1', this loader reads 'my_ops.manifest/2'",
    )


def test_missing_manifest_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    (pkg / "manifest.json").unlink()
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"), str(pkg / "model.pt2"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"format": "my_ops.manifest/1"}',
        '{"format": "my_ops.manifest/2"}',
        "not json at all",
    ],
)
def test_malformed_manifest_is_refused(loader_bin, pkg: Path, tmp_path: Path, text: str) -> None:
    (pkg / "manifest.json").write_text(text)
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_refused(proc, out, str(pkg / "manifest.json"))


def test_manifest_flag_points_elsewhere(loader_bin, pkg: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere.json"
    (pkg / "manifest.json").rename(moved)
    proc, out = _run(loader_bin, pkg, tmp_path, "--manifest", str(moved))
    _assert_ran(proc, out)


def test_no_verify_runs_with_a_warning(loader_bin, pkg: Path, tmp_path: Path) -> None:
    (pkg / "manifest.json").unlink()
    proc, out = _run(loader_bin, pkg, tmp_path, "--no-verify")
    _assert_ran(proc, out)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(NO_VERIFY_WARNING), proc.stderr
    assert loader_error_lines(proc.stderr) == []


# --------------------------------------------------------------------------- signatures


def test_signed_manifest_verifies(
    loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path
) -> None:
    proc, out = _run(
        loader_bin, pkg, tmp_path, "--public-key", str(signing_keys / "public_key.pem")
    )
    _assert_ran(proc, out)


def test_raw_public_key_verifies(loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path) -> None:
    pem = (signing_keys / "public_key.pem").read_text().splitlines()
    raw = base64.b64decode("".join(line for line in pem if not line.startswith("-----")))[-32:]
    (tmp_path / "public.key").write_bytes(raw)
    proc, out = _run(loader_bin, pkg, tmp_path, "--public-key", str(tmp_path / "public.key"))
    _assert_ran(proc, out)


def test_wrong_public_key_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    proc = run_export(["--generate-key", str(tmp_path / "other")], tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    proc, out = _run(
        loader_bin, pkg, tmp_path, "--public-key", str(tmp_path / "other" / "public_key.pem")
    )
    _assert_refused(proc, out, str(pkg / "manifest.sig"), "does not verify")


def test_tampered_signed_manifest_is_refused(
    loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path
) -> None:
    # A change the other checks would let through: only the signature sees it.
    _edit_manifest(pkg / "manifest.json", device="cpu ")
    public_key = str(signing_keys / "public_key.pem")
    proc, out = _run(loader_bin, pkg, tmp_path, "--public-key", public_key)
    _assert_refused(proc, out, str(pkg / "manifest.json"), "does not verify")
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ran(proc, out)


def test_unsigned_manifest_is_refused_with_a_public_key(
    loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path
) -> None:
    (pkg / "manifest.sig").unlink()
    public_key = str(signing_keys / "public_key.pem")
    proc, out = _run(loader_bin, pkg, tmp_path, "--public-key", public_key)
    _assert_refused(proc, out, str(pkg / "manifest.sig"), "not signed")


def test_private_key_is_not_a_public_key(
    loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path
) -> None:
    private_key = str(signing_keys / "signing_key.pem")
    proc, out = _run(loader_bin, pkg, tmp_path, "--public-key", private_key)
    _assert_refused(proc, out, private_key)


# --------------------------------------------------------------------------- ops and classes


@functools.cache
def _graph_calls() -> tuple[list[dict], list[dict]]:
    """The custom ops and classes the default model calls, from its exported graph.

    Found here, as the manifest's "ops" and "classes" should list them: every
    op outside aten, prim and prims with its schema, and each custom class
    with the methods the graph calls on it.
    """
    spec = default_model.make_model(max_batch=MAX_BATCH)
    # As a CPU export compiles it by default (--float-linear packed).
    pack_linear_layers(spec.module)
    with torch.no_grad():
        program = torch.export.export(
            spec.module.eval(),
            tuple(spec.example_inputs),
            dynamic_shapes=spec.dynamic_shapes,
            strict=False,
        )
    # A placeholder's input spec names the object it stands for among the program's constants.
    spec_of = {s.arg.name: s for s in program.graph_signature.input_specs}
    ops: dict[str, str] = {}
    methods: dict[str, dict[str, str]] = {}
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            if isinstance(node.target, torch._ops.OpOverload):
                if node.target.namespace not in ("aten", "prim", "prims"):
                    ops[node.target.name()] = str(node.target._schema)
            elif node.target is torch.ops.higher_order.call_torchbind:
                holder, method = node.args[0], node.args[1]
                obj = program.constants[spec_of[holder.name].target]
                qualified = obj._type().qualified_name()
                schema = str(obj._get_method(method).schema)
                methods.setdefault(qualified, {})[method] = schema
    classes = [
        {
            "name": "::".join(q.removeprefix("__torch__.torch.classes.").split(".")),
            "methods": [{"name": m, "schema": s} for m, s in sorted(ms.items())],
        }
        for q, ms in methods.items()
    ]
    return (
        [{"name": n, "schema": s} for n, s in sorted(ops.items())],
        sorted(classes, key=lambda c: c["name"]),
    )


def test_manifest_names_what_the_package_calls(exported: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    ops, classes = _graph_calls()
    # Each op of the library is called as its C shim, AOTInductor's aoti_torch_cpu_<op>; an op
    # with an out= companion, <op>_out, is called as the companion instead (README, "How a
    # package calls the ops").
    called = []
    for op in ops:
        name = op["name"].split("::")[1]
        companion = getattr(torch.ops.my_ops, f"{name}_out", None)
        if companion is not None:
            op = {"name": f"my_ops::{name}_out", "schema": str(companion.default._schema)}
        called.append(op | {"c_shim": "aoti_torch_cpu_" + op["name"].split("::")[1]})
    assert manifest["ops"] == sorted(called, key=lambda op: op["name"])
    assert any(op["name"].endswith("_out") for op in called)
    assert manifest["classes"] == classes
    # What the default model is made of (see its docstring): the graph walk found something.
    assert {"my_ops::fused_bias_gelu", "my_ops::silu_and_mul", "my_ops::linear_packed"} <= {
        op["name"] for op in ops
    }
    assert [c["name"] for c in classes] == ["my_ops::RMSNorm"]


def _assert_ops_refused(proc, out: Path, *needles: str) -> None:
    assert proc.returncode == EXIT_CODES["ops_library"], (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loader: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()


def _write_calls(manifest_path: Path, ops: list[dict], classes: list[dict]) -> None:
    """The manifest with these "ops" and "classes", unsigned: every other check still passes."""
    _edit_manifest(manifest_path, ops=sorted(ops, key=lambda op: op["name"]), classes=classes)


def test_op_the_library_lacks_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # As if exported with a library that has one more op than the one given: a name no
    # op of the library will take.
    ops, classes = _graph_calls()
    extra = {
        "name": "my_ops::op_of_a_newer_library",
        "schema": "my_ops::op_of_a_newer_library(Tensor x) -> Tensor",
    }
    _write_calls(pkg / "manifest.json", [*ops, extra], classes)
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ops_refused(
        proc,
        out,
        "no op library registers op my_ops::op_of_a_newer_library, which the package calls",
        f"(looked in {pkg / 'libmy_ops.so'})",
        f"expected '{extra['schema']}', found none",
    )


def test_op_with_another_schema_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    # As from a library rebuilt with a changed schema since the export.
    ops, classes = _graph_calls()
    registered = str(torch.ops.my_ops.fused_bias_gelu.default._schema)
    exported = registered.replace('approximate="none"', 'approximate="tanh"')
    assert exported != registered
    changed = [op | {"schema": exported} if op["schema"] == registered else op for op in ops]
    assert changed != ops
    _write_calls(pkg / "manifest.json", changed, classes)
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ops_refused(
        proc,
        out,
        "op my_ops::fused_bias_gelu has another schema than the package was exported with",
        f"(looked in {pkg / 'libmy_ops.so'})",
        f"expected '{exported}', found '{registered}'",
    )


def test_class_method_with_another_schema_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    ops, classes = _graph_calls()
    (rms_norm,) = classes
    (method,) = (m for m in rms_norm["methods"] if m["name"] == "forward")
    exported = method["schema"].replace("Tensor x", "Tensor x, float scale")
    changed = [rms_norm | {"methods": [method | {"schema": exported}]}]
    _write_calls(pkg / "manifest.json", ops, changed)
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ops_refused(
        proc,
        out,
        "method forward of class my_ops::RMSNorm has another schema",
        f"expected '{exported}', found '{method['schema']}'",
    )


def test_class_the_library_lacks_is_refused(loader_bin, pkg: Path, tmp_path: Path) -> None:
    ops, classes = _graph_calls()
    _write_calls(pkg / "manifest.json", ops, [*classes, {"name": "my_ops::KVCache", "methods": []}])
    proc, out = _run(loader_bin, pkg, tmp_path)
    _assert_ops_refused(
        proc,
        out,
        "no op library registers class my_ops::KVCache, which the package uses",
        f"(looked in {pkg / 'libmy_ops.so'})",
    )


def test_signed_manifest_naming_a_missing_op_is_refused(
    loader_bin, pkg: Path, signing_keys: Path, tmp_path: Path
) -> None:
    # Re-signed with the key that signs exports, so the signature check passes and the op check
    # is what refuses it.
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(
        (signing_keys / "signing_key.pem").read_bytes(), password=None
    )
    ops, classes = _graph_calls()
    _write_calls(
        pkg / "manifest.json",
        [*ops, {"name": "my_ops::zz_extra", "schema": "my_ops::zz_extra() -> ()"}],
        classes,
    )
    (pkg / "manifest.sig").write_bytes(key.sign((pkg / "manifest.json").read_bytes()))
    public_key = str(signing_keys / "public_key.pem")
    proc, out = _run(loader_bin, pkg, tmp_path, "--public-key", public_key)
    _assert_ops_refused(proc, out, "no op library registers op my_ops::zz_extra")
