"""deploy/contract/package_contract.py: the contract's reader and what it generates.

The exporter and the loader's generated header both come through this reader,
so what it lets through is what the two sides agree on. The loader's side of
the header is tested in deploy/runtime/tests/cpu_check_test.cpp.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deploy.contract import package_contract
from deploy.contract.package_contract import ContractError

SCRIPT = Path(package_contract.__file__)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return json.loads(Path(package_contract.CONTRACT_PATH).read_text())


def _x86(c: dict) -> dict:
    return c["targets"]["linux-x86_64"]


def _arm(c: dict) -> dict:
    return c["targets"]["linux-aarch64"]


def test_the_contract_is_read(raw: dict[str, Any]) -> None:
    c = package_contract.load()
    assert c.manifest_format == raw["manifest_format"] == "my_ops.manifest/2"
    assert c.input_metadata_key == "my_ops.inputs"
    assert c.input_dtypes["float32"] == "Float"
    assert c.target_macros == {"linux-x86_64": "__x86_64__", "linux-aarch64": "__aarch64__"}
    rows = {(r.target, r.name): r for r in c.cpu_features}
    assert rows["linux-x86_64", "avx2"].macro == "__AVX2__"
    assert rows["linux-x86_64", "avx2"].hwcap == ()
    assert rows["linux-aarch64", "armv8-a"].macro is None
    assert rows["linux-aarch64", "armv8-a"].hwcap == ("HWCAP_FP", "HWCAP_ASIMD")
    assert rows["linux-aarch64", "sve2"].auxv == "AT_HWCAP2"
    assert rows["linux-aarch64", "sve"].auxv == "AT_HWCAP"
    assert c.export_files == tuple(raw["export_files"]["required"])
    assert "manifest.json" in c.export_files and "model.pt2" in c.export_files
    assert c.optional_export_files == ("manifest.sig", "weights.bin", "weights.json", "weights.sig")
    assert c.weights_metadata_key == "my_ops.weights"


def test_every_exit_code_keeps_its_documented_number() -> None:
    """The numbers scripts on edge machines test for (README.md, BUNDLE_README.md, each
    program's --help), one meaning each, whichever program exits."""
    codes = {row.name: row.code for row in package_contract.load().exit_codes}
    assert codes == {
        "ok": 0,
        "other": 1,
        "usage": 2,
        "ops_library": 3,
        "package_missing": 4,
        "package_corrupt": 5,
        "input_unreadable": 6,
        "input_mismatch": 7,
        "output_unwritable": 8,
        "expect_mismatch": 9,
        "integrity": 10,
        "not_base_architecture": 11,
        "accuracy": 12,
        "no_cuda_backend": 13,
        "not_decoder": 14,
    }


def test_export_files_bzl_is_current() -> None:
    # Starlark cannot read JSON: the export rule loads this generated copy.
    bzl = Path(package_contract.CONTRACT_PATH).with_name("export_files.bzl")
    assert bzl.read_text() == package_contract.bzl_constants(package_contract.load()), (
        "regenerate it: python3 deploy/contract/package_contract.py --bzl "
        "deploy/contract/package_contract.json deploy/contract/export_files.bzl"
    )


def test_the_generator_writes_the_bzl_constants(tmp_path: Path) -> None:
    out = tmp_path / "export_files.bzl"
    proc = _generate("--bzl", package_contract.CONTRACT_PATH, str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == package_contract.bzl_constants(package_contract.load())


# Each edit leaves JSON that is not a contract; the error must say where.
_BROKEN: dict[str, tuple[Callable[[dict], None], str]] = {
    "no_format": (lambda c: c.pop("manifest_format"), "the top level lacks manifest_format"),
    "unknown_member": (lambda c: c.update(extra=1), "the top level has unknown extra"),
    "no_export_files": (lambda c: c.pop("export_files"), "the top level lacks export_files"),
    "export_files_without_manifest": (
        lambda c: c["export_files"]["required"].remove("manifest.json"),
        "export_files.required must list manifest.json",
    ),
    "export_file_twice": (
        lambda c: c["export_files"]["optional"].append("model.pt2"),
        "export_files lists a file twice",
    ),
    "export_file_with_a_slash": (
        lambda c: c["export_files"]["optional"].append("a/b"),
        "export_files.optional must be",
    ),
    "format_not_a_string": (lambda c: c.update(manifest_format=1), "manifest_format must be"),
    "format_with_a_quote": (lambda c: c.update(manifest_format='a"b'), "manifest_format must be"),
    "no_dtypes": (lambda c: c["input_signature"].update(dtypes={}), "dtypes must be a non-empty"),
    "odd_dtype": (
        lambda c: c["input_signature"]["dtypes"].update(float32="Float 32"),
        "input_signature.dtypes.float32 must be",
    ),
    "no_targets": (lambda c: c.update(targets={}), "targets must be a non-empty object"),
    "odd_target_name": (
        lambda c: c["targets"].update({"Linux x86": _x86(c)}),
        "a target name must be",
    ),
    "no_levels": (
        lambda c: _x86(c).update(cpu_levels=[]),
        "targets.linux-x86_64.cpu_levels is empty",
    ),
    "feature_without_macro": (
        lambda c: _x86(c)["cpu_features"][0].pop("macro"),
        r"cpu_features\[0\] lacks macro",
    ),
    "level_with_macro": (
        lambda c: _x86(c)["cpu_levels"][0].update(macro="__AVX2__"),
        r"cpu_levels\[0\] has unknown macro",
    ),
    "misspelt_member": (
        lambda c: _x86(c)["cpu_features"][0].update(macros="__X__"),
        r"cpu_features\[0\] has unknown macros",
    ),
    "macro_without_underscores": (
        lambda c: _x86(c)["cpu_features"][0].update(macro="AVX2"),
        r"cpu_features\[0\]\.macro must be",
    ),
    "upper_case_name": (
        lambda c: _x86(c)["cpu_features"][0].update(name="AVX2"),
        r"cpu_features\[0\]\.name must be",
    ),
    "row_not_an_object": (
        lambda c: _x86(c)["cpu_features"].append("avx2"),
        r"cpu_features\[\d+\] must be an object",
    ),
    "rows_not_a_list": (
        lambda c: _x86(c).update(cpu_features={}),
        "linux-x86_64.cpu_features must be a list",
    ),
    "name_twice": (
        lambda c: _x86(c)["cpu_features"].append({"name": "avx2", "macro": "__VAES__"}),
        "linux-x86_64: 'avx2' is listed twice",
    ),
    "level_of_two_targets": (
        lambda c: _arm(c)["cpu_features"].append(
            {"name": "x86-64-v3", "macro": "__X__", "hwcap": ["HWCAP_FP"]}
        ),
        "level 'x86-64-v3' of linux-x86_64 is known to another target",
    ),
    "hwcap_and_hwcap2_bits": (
        lambda c: _arm(c)["cpu_levels"][0].update(hwcap=["HWCAP_FP", "HWCAP2_SVE2"]),
        "hwcap must list HWCAP_ bits or HWCAP2_ bits, not both",
    ),
    "no_hwcap_bits": (
        lambda c: _arm(c)["cpu_levels"][0].update(hwcap=[]),
        "hwcap must list",
    ),
    "hwcap_a_string": (
        lambda c: _arm(c)["cpu_levels"][0].update(hwcap="HWCAP_FP | HWCAP_ASIMD"),
        "hwcap must be a list",
    ),
    "odd_hwcap_bit": (
        lambda c: _arm(c)["cpu_levels"][0].update(hwcap=["AT_HWCAP"]),
        r"cpu_levels\[0\]\.hwcap must be",
    ),
    "a_row_without_hwcap": (
        lambda c: _arm(c)["cpu_features"][0].pop("hwcap"),
        "linux-aarch64: every row has hwcap bits, or none does",
    ),
    "exit_code_twice": (
        lambda c: c["exit_codes"]["codes"].append({"name": "late", "code": 3, "meaning": "x"}),
        "exit_codes.codes: one code on two rows",
    ),
    "exit_name_twice": (
        lambda c: c["exit_codes"]["codes"].append({"name": "usage", "code": 99, "meaning": "x"}),
        "exit_codes.codes: one name on two rows",
    ),
    "exit_code_read_as_a_signal": (
        lambda c: c["exit_codes"]["codes"].append({"name": "late", "code": 130, "meaning": "x"}),
        r"exit_codes.codes\[\d+\]\.code must be an integer from 0 to 127",
    ),
    "usage_renumbered": (
        lambda c: c["exit_codes"]["codes"][2].update(code=64),
        "exit_codes.codes must hold usage = 2",
    ),
    "exit_meaning_with_a_quote": (
        lambda c: c["exit_codes"]["codes"][0].update(meaning='"ok"'),
        r"exit_codes.codes\[0\]\.meaning must be",
    ),
    "why_not_a_string": (
        lambda c: _arm(c)["cpu_levels"][0].update(why=["text"]),
        r"cpu_levels\[0\]\.why must be a string",
    ),
}


@pytest.mark.parametrize("edit", sorted(_BROKEN))
def test_the_reader_refuses(raw: dict[str, Any], tmp_path: Path, edit: str) -> None:
    change, message = _BROKEN[edit]
    contract = copy.deepcopy(raw)
    change(contract)
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(contract))
    with pytest.raises(ContractError, match=f"^{re.escape(str(path))}: .*{message}"):
        package_contract.load(str(path))


def test_the_reader_refuses_what_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "contract.json"
    path.write_text('{"manifest_format": "my_ops.manifest/1",}')
    with pytest.raises(ContractError, match=f"^{re.escape(str(path))}: not JSON"):
        package_contract.load(str(path))
    with pytest.raises(ContractError, match=f"cannot read {re.escape(str(tmp_path / 'none'))}"):
        package_contract.load(str(tmp_path / "none"))


def _macro_rows(header: str, target: str) -> list[str]:
    """The ROW(...) lines of MY_OPS_CPU_FEATURES_<TARGET> in a generated header."""
    name = "MY_OPS_CPU_FEATURES_" + re.sub(r"[^A-Z0-9]", "_", target.upper())
    body = header.split(f"#define {name}(ROW) \\\n", 1)[1]
    rows = []
    for line in body.splitlines():
        rows.append(line.strip().removesuffix("\\").strip())
        if not line.endswith("\\"):
            break
    return rows


def test_the_header_has_every_row_in_order() -> None:
    c = package_contract.load()
    header = package_contract.cc_header(c)
    assert 'kManifestFormat[] = "my_ops.manifest/2";' in header
    assert 'kInputSignatureKey[] = "my_ops.inputs";' in header
    assert '"Float", "Double", "Half", "BFloat16"' in header
    assert '#define MY_OPS_TARGET_LINUX_X86_64 "linux-x86_64"' in header
    assert '#define MY_OPS_TARGET_LINUX_AARCH64 "linux-aarch64"' in header
    for target in c.target_macros:
        want = []
        for r in c.cpu_features:
            if r.target != target:
                continue
            args = [f'"{r.name}"', "true" if r.macro is None else "false"]
            if r.hwcap:
                args += [r.auxv, " | ".join(r.hwcap)]
            want.append(f"ROW({', '.join(args)})")
        assert _macro_rows(header, target) == want
    assert 'ROW("armv8-a", true, AT_HWCAP, HWCAP_FP | HWCAP_ASIMD)' in header
    assert 'ROW("sve2", false, AT_HWCAP2, HWCAP2_SVE2)' in header
    assert 'ROW("avx2", false)' in header


def _generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_the_generator_writes_the_header(tmp_path: Path) -> None:
    out = tmp_path / "package_contract.h"
    proc = _generate(package_contract.CONTRACT_PATH, str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == package_contract.cc_header(package_contract.load())


def test_the_generator_fails_with_one_line_naming_the_file(raw: dict, tmp_path: Path) -> None:
    bad = copy.deepcopy(raw)
    _x86(bad)["cpu_features"][0].pop("macro")
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(bad))
    out = tmp_path / "package_contract.h"
    proc = _generate(str(path), str(out))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"package_contract: error: {path}: ")
    assert not out.exists()
    proc = _generate(str(path))
    assert proc.returncode == 2
    assert "usage:" in proc.stderr


def test_the_generator_names_a_header_it_cannot_write(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "package_contract.h"
    proc = _generate(package_contract.CONTRACT_PATH, str(out))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"package_contract: error: cannot write {out}: No such file or directory"
    ]
