"""package_contract.json: what the exporter writes and the C++ runtime reads, written once.

The exporter and the bundle check read the file through load(); Bazel runs
this file as a program to write the C++ header the runtime compiles in
(//deploy/runtime:package_contract):

    package_contract.py CONTRACT.json HEADER.h

and export_files.bzl beside it, the export rule's list of output files, is
written with (//deploy/contract:package_contract_test checks that it is current):

    package_contract.py --bzl CONTRACT.json export_files.bzl

Both go through the same strict reader, so the two sides cannot read the file
differently: any entry that is missing, misspelt or of the wrong type is an
error naming the file.

Entries:
  manifest_format   manifest.json's "format"; the loader reads no other.
  export_files      required: the files every export writes into its folder;
                    optional: those it writes only sometimes (manifest.sig,
                    when signed). Nothing else may be in an export's folder.
  weights           format: weights.json's "format", the one the loader reads;
                    alignment: the byte multiple at which each tensor starts
                    in weights.bin; files: what a weights export
                    (export --weights-only) writes, required and optional;
                    metadata_key: the package metadata entry of a package
                    compiled without its weights, which lists the constants
                    it takes ({name: [dtype, shape]}, JSON).
  state             metadata_key: the package metadata entry of a package whose
                    runs update buffers in place (its state: {name: {dtype,
                    shape}}, JSON); decoder_key: a decoder package's
                    {"cache_length", "vocab_size"} (JSON).
  exit_codes        codes: every program's exit statuses, one row per number:
                    name (the Python tools' key, and my_ops/error.h's
                    enumerator: usage is kUsage), code, and meaning (one
                    sentence, what `loader --help` lists for it).
  input_signature   metadata_key: the package metadata entry in which the
                    exporter stores the model's input signature (JSON, see
                    export_compile.input_signature); dtypes: torch dtype name
                    -> c10::toString name, the dtypes a signature may hold.
  targets           per target (manifest.json's "target"): compiler_macro, by
                    which a compiler says it compiles for that target, and the
                    CPU features a manifest may name. cpu_levels are -march
                    values the manifest's "isa" may hold, checked as a whole;
                    cpu_features are what the compiler may emit once `macro`
                    is defined. x86 names are __builtin_cpu_supports's.
                    aarch64 names are /proc/cpuinfo's, and `hwcap` lists the
                    bits of getauxval(AT_HWCAP) (HWCAP_*) or of AT_HWCAP2
                    (HWCAP2_*), as glibc's <sys/auxv.h> names them, that must
                    all be set. Within a target every row has `hwcap` or none
                    does. Only macros gcc can define for C++ code belong here:
                    a feature no compiler reports is never asked for. Names are
                    unique within a target; renaming one refuses every package
                    exported under the old name.
  about, why        prose for the reader of the file, nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from typing import Any

# Beside this file in a checkout, in the runfiles of whatever takes both as data
# (abspath, not realpath: the runfiles tree is what holds them), and in
# tools/gpu_check's copy of deploy/.
CONTRACT_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "package_contract.json")

_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")
_MACRO = re.compile(r"__[A-Za-z0-9_]+")
_HWCAP = re.compile(r"HWCAP2?_[A-Z0-9]+")
_TARGET = re.compile(r"[a-z0-9]+-[a-z0-9_]+")
_DTYPE = re.compile(r"[A-Za-z0-9]+")
# What goes into a C++ string literal as it is.
_LITERAL = re.compile(r"[A-Za-z0-9._/-]+")
# A file name in an export's folder.
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_EXIT_NAME = re.compile(r"[a-z][a-z0-9_]*")
# What goes into a C++ string literal as it is, spaces and punctuation included.
_MEANING = re.compile(r"[A-Za-z0-9 .,:;()/'+_-]+")


class ContractError(ValueError):
    """The contract file is unreadable or not one this reader understands."""


@dataclasses.dataclass(frozen=True)
class CpuFeature:
    target: str
    name: str
    # The compiler macro that says code may use it; None for a -march level.
    macro: str | None
    # The auxiliary-vector bits the loader checks (aarch64), all of one word.
    hwcap: tuple[str, ...] = ()

    @property
    def auxv(self) -> str | None:
        """AT_HWCAP or AT_HWCAP2: the word `hwcap` is read from."""
        if not self.hwcap:
            return None
        return "AT_HWCAP2" if self.hwcap[0].startswith("HWCAP2_") else "AT_HWCAP"


@dataclasses.dataclass(frozen=True)
class ExitCode:
    name: str
    code: int
    meaning: str

    @property
    def cc_name(self) -> str:
        """my_ops/error.h's enumerator: kUsage, kOpsLibrary."""
        return "k" + "".join(part.capitalize() for part in self.name.split("_"))


@dataclasses.dataclass(frozen=True)
class Contract:
    manifest_format: str
    input_metadata_key: str
    input_dtypes: dict[str, str]
    # Target -> the macro a compiler defines when it compiles for it.
    target_macros: dict[str, str]
    # Each target's levels, then its features, in file order.
    cpu_features: tuple[CpuFeature, ...]
    export_files: tuple[str, ...] = ()
    optional_export_files: tuple[str, ...] = ()
    weights_format: str = ""
    weights_alignment: int = 64
    weights_metadata_key: str = ""
    state_metadata_key: str = ""
    decoder_metadata_key: str = ""
    weights_files: tuple[str, ...] = ()
    optional_weights_files: tuple[str, ...] = ()
    exit_codes: tuple[ExitCode, ...] = ()

    def exit_code(self, name: str) -> int:
        """The exit status called `name` in exit_codes. Raises KeyError."""
        for row in self.exit_codes:
            if row.name == name:
                return row.code
        raise KeyError(f"no exit code {name!r} in the contract")


def _members(obj: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> dict:
    if not isinstance(obj, dict):
        raise ContractError(f"{where} must be an object")
    missing = sorted(required - obj.keys())
    if missing:
        raise ContractError(f"{where} lacks {', '.join(missing)}")
    unknown = sorted(obj.keys() - required - optional)
    if unknown:
        raise ContractError(f"{where} has unknown {', '.join(unknown)}")
    if "why" in obj and not isinstance(obj["why"], str):
        raise ContractError(f"{where}.why must be a string")
    return obj


def _string(value: Any, where: str, pattern: re.Pattern[str]) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ContractError(f"{where} must be a string matching {pattern.pattern}, not {value!r}")
    return value


def _mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict) or not value:
        raise ContractError(f"{where} must be a non-empty object")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise ContractError(f"{where} must be a list")
    return value


def _row(target: str, obj: Any, where: str, level: bool) -> CpuFeature:
    required = {"name"} if level else {"name", "macro"}
    row = _members(obj, where, required, {"hwcap", "why"})
    name = _string(row["name"], f"{where}.name", _NAME)
    macro = None if level else _string(row["macro"], f"{where}.macro", _MACRO)
    bits: tuple[str, ...] = ()
    if "hwcap" in row:
        hwcap = _list(row["hwcap"], f"{where}.hwcap")
        bits = tuple(_string(b, f"{where}.hwcap", _HWCAP) for b in hwcap)
        # The loader reads the bits of one row from one auxiliary-vector word:
        # an HWCAP2_ bit tested against AT_HWCAP would check another feature.
        if not bits or len({b.startswith("HWCAP2_") for b in bits}) != 1:
            raise ContractError(f"{where}.hwcap must list HWCAP_ bits or HWCAP2_ bits, not both")
    return CpuFeature(target, name, macro, bits)


def _target(name: str, obj: Any, where: str) -> tuple[str, list[CpuFeature]]:
    t = _members(obj, where, {"compiler_macro", "cpu_levels", "cpu_features"}, {"why"})
    macro = _string(t["compiler_macro"], f"{where}.compiler_macro", _MACRO)
    rows = [
        _row(name, r, f"{where}.{key}[{i}]", key == "cpu_levels")
        for key in ("cpu_levels", "cpu_features")
        for i, r in enumerate(_list(t[key], f"{where}.{key}"))
    ]
    if not any(r.macro is None for r in rows):
        raise ContractError(f"{where}.cpu_levels is empty: a manifest's isa could never be checked")
    seen: set[str] = set()
    for row in rows:
        if row.name in seen:
            raise ContractError(f"{where}: {row.name!r} is listed twice")
        seen.add(row.name)
    if len({bool(r.hwcap) for r in rows}) != 1:
        raise ContractError(f"{where}: every row has hwcap bits, or none does")
    return macro, rows


def parse(data: Any, path: str) -> Contract:
    """The contract in `data` (parsed JSON); errors name `path`."""
    try:
        top = _members(
            data,
            "the top level",
            {
                "manifest_format",
                "export_files",
                "weights",
                "state",
                "exit_codes",
                "input_signature",
                "targets",
            },
            {"about"},
        )
        fmt = _string(top["manifest_format"], "manifest_format", _LITERAL)
        required, optional = _files(top["export_files"], "export_files")
        for needed in ("model.pt2", "manifest.json", "architecture.json"):
            if needed not in required:
                raise ContractError(f"export_files.required must list {needed}")
        weights = _members(
            top["weights"], "weights", {"format", "alignment", "files", "metadata_key"}, {"why"}
        )
        weights_fmt = _string(weights["format"], "weights.format", _LITERAL)
        weights_key = _string(weights["metadata_key"], "weights.metadata_key", _LITERAL)
        alignment = weights["alignment"]
        # A power of two: the loader checks offsets with a mask.
        if type(alignment) is not int or alignment < 8 or alignment & (alignment - 1):
            raise ContractError(f"weights.alignment must be a power of two >= 8, not {alignment!r}")
        weights_required, weights_optional = _files(weights["files"], "weights.files")
        for needed in ("weights.bin", "weights.json"):
            if needed not in weights_required:
                raise ContractError(f"weights.files.required must list {needed}")
        state = _members(top["state"], "state", {"metadata_key", "decoder_key"}, {"why"})
        state_key = _string(state["metadata_key"], "state.metadata_key", _LITERAL)
        decoder_key = _string(state["decoder_key"], "state.decoder_key", _LITERAL)
        exit_codes = _exit_codes(top["exit_codes"], "exit_codes")
        sig = _members(top["input_signature"], "input_signature", {"metadata_key", "dtypes"})
        key = _string(sig["metadata_key"], "input_signature.metadata_key", _LITERAL)
        dtypes = _mapping(sig["dtypes"], "input_signature.dtypes")
        for torch_name, c10_name in dtypes.items():
            _string(torch_name, "input_signature.dtypes", _NAME)
            _string(c10_name, f"input_signature.dtypes.{torch_name}", _DTYPE)
        targets = _mapping(top["targets"], "targets")
        macros: dict[str, str] = {}
        rows: list[CpuFeature] = []
        for name, obj in targets.items():
            _string(name, "a target name", _TARGET)
            macros[name], target_rows = _target(name, obj, f"targets.{name}")
            rows += target_rows
        # The level in "isa" is always checked, so a package for another
        # architecture is refused as unknown even if its target were never compared.
        levels = {(r.target, r.name) for r in rows if r.macro is None}
        for target, level in levels:
            if any(r.name == level and r.target != target for r in rows):
                raise ContractError(f"level {level!r} of {target} is known to another target")
    except ContractError as e:
        raise ContractError(f"{path}: {e}") from None
    return Contract(
        fmt,
        key,
        dict(dtypes),
        macros,
        tuple(rows),
        required,
        optional,
        weights_fmt,
        alignment,
        weights_key,
        state_key,
        decoder_key,
        weights_required,
        weights_optional,
        exit_codes,
    )


def _exit_codes(obj: Any, where: str) -> tuple[ExitCode, ...]:
    table = _members(obj, where, {"codes"}, {"why"})
    rows = []
    for i, row in enumerate(_list(table["codes"], f"{where}.codes")):
        at = f"{where}.codes[{i}]"
        row = _members(row, at, {"name", "code", "meaning"})
        code = row["code"]
        # Above 127 an exit status reads as a signal's (128 + N).
        if type(code) is not int or not 0 <= code <= 127:
            raise ContractError(f"{at}.code must be an integer from 0 to 127, not {code!r}")
        name = _string(row["name"], f"{at}.name", _EXIT_NAME)
        rows.append(ExitCode(name, code, _string(row["meaning"], f"{at}.meaning", _MEANING)))
    for attr in ("name", "code"):
        values = [getattr(r, attr) for r in rows]
        if len(set(values)) != len(values):
            raise ContractError(f"{where}.codes: one {attr} on two rows")
    for needed, code in (("ok", 0), ("other", 1), ("usage", 2)):
        if not any(r.name == needed and r.code == code for r in rows):
            raise ContractError(f"{where}.codes must hold {needed} = {code}")
    return tuple(sorted(rows, key=lambda r: r.code))


def _files(obj: Any, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) file names of a {"required": [...], "optional": [...]} entry."""
    files = _members(obj, where, {"required", "optional"}, {"why"})
    required = tuple(
        _string(f, f"{where}.required", _FILE)
        for f in _list(files["required"], f"{where}.required")
    )
    optional = tuple(
        _string(f, f"{where}.optional", _FILE)
        for f in _list(files["optional"], f"{where}.optional")
    )
    if len(set(required + optional)) != len(required + optional):
        raise ContractError(f"{where} lists a file twice")
    return required, optional


def load(path: str = CONTRACT_PATH) -> Contract:
    """The contract in `path`. Raises ContractError."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ContractError(f"cannot read {path}: {e.strerror}") from e
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ContractError(f"{path}: not JSON: {e}") from e
    return parse(data, path)


def _cc_id(target: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", target.upper())


def cc_header(contract: Contract, source: str = "deploy/contract/package_contract.json") -> str:
    """The C++ header the loader compiles in.

    Each target's rows are an X-macro, MY_OPS_CPU_FEATURES_<TARGET>(ROW): the
    loader expands only its own target's, so another target's constants
    (AT_HWCAP2 on x86-64) are never expanded where they do not exist.
    """
    out = [
        f"// Generated from {source} by deploy/contract/package_contract.py: edit that file, "
        "not this one.",
        "#pragma once",
        "",
        "namespace my_ops::deploy::detail::contract {",
        "",
        '// manifest.json\'s "format".',
        f'inline constexpr char kManifestFormat[] = "{contract.manifest_format}";',
        "// The package metadata entry that holds the input signature.",
        f'inline constexpr char kInputSignatureKey[] = "{contract.input_metadata_key}";',
        '// weights.json\'s "format", and the byte multiple at which each tensor of weights.bin '
        "starts.",
        f'inline constexpr char kWeightsFormat[] = "{contract.weights_format}";',
        f"inline constexpr unsigned kWeightsAlignment = {contract.weights_alignment};",
        "// The package metadata entry of a package compiled without its weights: the constants",
        "// it takes, {name: [dtype, shape]}.",
        f'inline constexpr char kWeightsMetadataKey[] = "{contract.weights_metadata_key}";',
        "// The package metadata entries of a package with state: the buffers its runs update,",
        '// {name: {dtype, shape}}, and a decoder\'s {"cache_length", "vocab_size"}.',
        f'inline constexpr char kStateMetadataKey[] = "{contract.state_metadata_key}";',
        f'inline constexpr char kDecoderMetadataKey[] = "{contract.decoder_metadata_key}";',
        "// The dtypes an input signature may name, as c10::toString names them.",
        "inline constexpr const char* kInputDtypes[] = {"
        + ", ".join(f'"{v}"' for v in contract.input_dtypes.values())
        + "};",
        "",
        "// Every exit status, in order: ROW(enumerator, code, meaning). my_ops/error.h's ExitCode",
        "// is checked against it.",
        "#define MY_OPS_EXIT_CODES(ROW) \\",
        " \\\n".join(f'  ROW({r.cc_name}, {r.code}, "{r.meaning}")' for r in contract.exit_codes),
        "",
        "}  // namespace my_ops::deploy::detail::contract",
    ]
    for target in contract.target_macros:
        rows = [r for r in contract.cpu_features if r.target == target]
        cc = _cc_id(target)
        out += ["", f'#define MY_OPS_TARGET_{cc} "{target}"']
        if rows[0].hwcap:
            out.append("// ROW(name, is_level, auxv, bits): all of `bits` set in getauxval(auxv).")
        else:
            out.append("// ROW(name, is_level)")
        out.append(f"#define MY_OPS_CPU_FEATURES_{cc}(ROW) \\")
        lines = []
        for r in rows:
            args = [f'"{r.name}"', "true" if r.macro is None else "false"]
            if r.hwcap:
                args += [r.auxv, " | ".join(r.hwcap)]
            lines.append(f"  ROW({', '.join(args)})")
        out.append(" \\\n".join(lines))
    return "\n".join(out) + "\n"


def bzl_constants(contract: Contract) -> str:
    """export_files.bzl: the export files for Starlark, which cannot read JSON files."""
    return (
        "\n".join(
            [
                '"""Generated from package_contract.json by package_contract.py --bzl: '
                'edit that file, not this one."""',
                "",
                "# What every export writes.",
                f"EXPORT_FILES = {json.dumps(list(contract.export_files))}",
                "",
                "# What an export writes only sometimes (manifest.sig: when signed).",
                f"OPTIONAL_EXPORT_FILES = {json.dumps(list(contract.optional_export_files))}",
                "",
                "# What a weights export (--weights-only) writes, and writes only when signed.",
                f"WEIGHTS_FILES = {json.dumps(list(contract.weights_files))}",
                f"OPTIONAL_WEIGHTS_FILES = {json.dumps(list(contract.optional_weights_files))}",
            ]
        )
        + "\n"
    )


def main(argv: list[str]) -> int:
    render = cc_header
    if argv[:1] == ["--bzl"]:
        render, argv = bzl_constants, argv[1:]
    if len(argv) != 2:
        print(
            "usage: package_contract.py [--bzl] CONTRACT.json HEADER.h|CONSTANTS.bzl",
            file=sys.stderr,
        )
        return 2
    source, header = argv
    try:
        contract = load(source)
    except ContractError as e:
        print(f"package_contract: error: {e}", file=sys.stderr)
        return 1
    try:
        with open(header, "w", encoding="utf-8") as f:
            f.write(render(contract))
    except OSError as e:
        print(f"package_contract: error: cannot write {header}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
