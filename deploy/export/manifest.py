"""manifest.json, which the C++ loader checks before it loads a package, and its signing keys.

The manifest records the sha256 of the package and of the op library it was
verified with, the torch version, the target (linux-x86_64, linux-aarch64),
the CPU instruction set and the device. The format and the CPU features come
from package_contract.json, which the loader compiles in.
It also names what the package calls that an op library must register, read
from the exported program: "ops", each custom op (every namespace but torch's
own) with its schema as torch prints it (str(op._schema)), and "classes", each
custom class (TorchBind) the program holds, as ns::Class, with the schema of
each method the graph calls. The loader checks them after it loads the op
libraries and before the package, so a missing or stale library is named
(exit 3) instead of failing inside torch with "Could not find schema".
manifest.sig, when the export is given a key, is an Ed25519 signature of the
manifest's exact bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

from ..contract.package_contract import CONTRACT_PATH, CpuFeature
from .compile import MARCH, compiler_record, load_contract, real_cxx
from .errors import ExportError, first_line


def manifest_format() -> str:
    """The format the C++ loader reads, the one make_manifest writes."""
    return load_contract().manifest_format


def target_macros() -> dict[str, str]:
    """The targets a package can be exported for, as manifest.json names them.

    Each with the macro by which a compiler says it compiles for that target.
    """
    return load_contract().target_macros


def read_cpu_features() -> tuple[CpuFeature, ...]:
    """The CPU features the loader can check, every target's, in the contract's order."""
    return load_contract().cpu_features


def _check_target(target: str) -> None:
    known = target_macros()
    if target not in known:
        raise ExportError(f"unknown target {target!r}; one of {', '.join(sorted(known))}")


def cpu_features(cxx: str, march: str, target: str = "linux-x86_64") -> list[str]:
    """The instruction-set extensions `cxx -march=MARCH` may emit, by loader name.

    For native that is this host's CPU as the compiler sees it, which is what
    the package then needs wherever it runs. `cxx` must compile for `target`.
    """
    _check_target(target)
    try:
        proc = subprocess.run(
            [cxx, f"-march={march}", "-dM", "-E", "-x", "c++", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        # The compiler's own first line says which of cxx and march it refused.
        stderr = getattr(e, "stderr", None) or ""
        why = stderr.strip().splitlines()[0] if stderr.strip() else first_line(e)
        raise ExportError(f"cannot ask {cxx} what -march={march} enables: {why}") from e
    defined = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}
    # Another architecture's compiler would match none of the target's macros
    # and so ask for nothing.
    macro = target_macros()[target]
    if macro not in defined:
        raise ExportError(f"{cxx} does not compile for {target}: it does not define {macro}")
    return sorted(
        row.name
        for row in read_cpu_features()
        if row.target == target and row.macro is not None and row.macro in defined
    )


def cpu_levels(target: str) -> list[str]:
    """The -march levels the loader for `target` can check, besides native."""
    _check_target(target)
    return [row.name for row in read_cpu_features() if row.target == target and row.macro is None]


# The namespaces of torch's own operators and higher-order operators, which LibTorch and
# AOTInductor provide without an op library. "prims" is registered from Python only, and
# Inductor lowers it into the package's own code.
TORCH_NAMESPACES = frozenset({"aten", "prim", "prims", "higher_order"})
# How torch names a custom class registered by TORCH_LIBRARY(ns) class_<T>("Class").
CUSTOM_CLASS_PREFIX = "__torch__.torch.classes."


@dataclasses.dataclass(frozen=True)
class PackageCalls:
    """What a package calls that op libraries register, as manifest.json's "ops" and "classes".

    ops: (name, schema) per op, name as "ns::op" or "ns::op.overload" (OpOverload.name()).
    classes: (name, ((method, schema), ...)) per custom class, name as "ns::Class".
    Each sorted by name, so the same program always gives the same manifest.
    c_shims: (op name, C function) for each op the package calls as a C shim
    (c_shims.py) rather than through the ProxyExecutor; the op's entry in "ops"
    names the function ("c_shim"), which the loader finds in the op libraries
    before it loads the package.
    """

    ops: tuple[tuple[str, str], ...]
    classes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    c_shims: tuple[tuple[str, str], ...] = ()

    def manifest_fields(self) -> dict[str, Any]:
        shims = dict(self.c_shims)
        return {
            "ops": [
                {"name": name, "schema": schema}
                | ({"c_shim": shims[name]} if name in shims else {})
                for name, schema in self.ops
            ],
            "classes": [
                {"name": name, "methods": [{"name": m, "schema": s} for m, s in methods]}
                for name, methods in self.classes
            ],
        }


def _custom_class_name(qualified: str) -> str:
    """The manifest's name of a custom class: ns::Class for __torch__.torch.classes.ns.Class."""
    parts = qualified.removeprefix(CUSTOM_CLASS_PREFIX).split(".")
    if not qualified.startswith(CUSTOM_CLASS_PREFIX) or len(parts) != 2:
        raise ExportError(
            f"the program holds an object of class {qualified}, which is not a custom class "
            "registered by an op library (torch.classes.NAMESPACE.CLASS)"
        )
    return f"{parts[0]}::{parts[1]}"


def _call_nodes(program: Any) -> Iterator[Any]:
    """Every call_function node of an ExportedProgram, its subgraphs' included."""
    import torch

    for module in program.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from (node for node in module.graph.nodes if node.op == "call_function")


def custom_ops(program: Any) -> list[Any]:
    """The OpOverloads of op libraries (not torch's own) that an ExportedProgram calls."""
    import torch

    ops = {}
    for node in _call_nodes(program):
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.namespace not in TORCH_NAMESPACES:
            ops[target.name()] = target
    return [ops[name] for name in sorted(ops)]


def package_calls(program: Any, c_shims: dict[Any, tuple[Any, str]] | None = None) -> PackageCalls:
    """The custom ops and classes an ExportedProgram's package calls, its subgraphs' included.

    Classes are those of the script objects the program holds (its constants);
    a method's schema comes from such an object, as the loader reads it from
    the class the op library registers. c_shims maps each OpOverload of the program
    that the package calls as a C shim to (the op it calls, the shim's name): the op
    itself, or its out= companion, which then stands in the manifest in its place.
    """
    import torch

    objects: dict[str, Any] = {}
    for value in program.constants.values():
        # A fake object stands for a real one, which it keeps.
        value = getattr(value, "real_obj", value)
        if isinstance(value, torch.ScriptObject):
            objects.setdefault(value._type().qualified_name(), value)
    c_shims = c_shims or {}
    program_ops = custom_ops(program)
    unknown = sorted(op.name() for op in c_shims if op not in program_ops)
    if unknown:
        raise ExportError(f"C shims given for ops the program does not call: {', '.join(unknown)}")
    ops: dict[str, str] = {}
    shims: dict[str, str] = {}
    for op in program_ops:
        target, shim = c_shims.get(op, (op, None))
        ops[target.name()] = str(target._schema)
        if shim is not None:
            shims[target.name()] = shim
    called: dict[str, set[str]] = {qualified: set() for qualified in objects}
    for node in _call_nodes(program):
        if node.target is torch.ops.higher_order.call_torchbind:
            obj, method = node.args[0], node.args[1]
            val = obj.meta.get("val") if isinstance(obj, torch.fx.Node) else None
            # CustomObjArgument in an exported graph, FakeScriptObject while tracing.
            qualified = getattr(val, "class_fqn", None) or getattr(val, "script_class_name", None)
            if qualified not in objects:
                raise ExportError(
                    f"the program calls {method} on an object of class {qualified}, "
                    "which it does not hold"
                )
            called[qualified].add(method)
    classes = []
    for qualified, methods in called.items():
        schemas = tuple((m, str(objects[qualified]._get_method(m).schema)) for m in sorted(methods))
        classes.append((_custom_class_name(qualified), schemas))
    return PackageCalls(
        ops=tuple(sorted(ops.items())),
        classes=tuple(sorted(classes)),
        c_shims=tuple(sorted(shims.items())),
    )


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_manifest(
    package: str,
    op_libraries: Sequence[str],
    isa: str,
    device: str,
    *,
    calls: PackageCalls,
    target: str = "linux-x86_64",
    march: str | None = None,
    cxx: str | None = None,
) -> bytes:
    """manifest.json for a package: what the C++ loader checks before loading it.

    calls is what the package calls (package_calls() of the exported program).
    march defaults to what --isa means (MARCH[isa]) and cxx to the compiler
    that built the package (real_cxx()); for another target, pass both.
    """
    import torch

    _check_target(target)
    march = MARCH[isa] if march is None else march
    # The loader refuses a level it does not know: fail here, not on every
    # edge machine.
    levels = cpu_levels(target)
    if march != "native" and march not in levels:
        raise ExportError(
            f"-march={march} is not a level the {target} loader can check; one of "
            f"{', '.join(levels)} or native (see {CONTRACT_PATH})"
        )
    libraries = []
    for lib in op_libraries:
        try:
            libraries.append({"file": os.path.basename(lib), "sha256": sha256_file(lib)})
        except OSError as e:
            raise ExportError(f"cannot read op library {lib}: {e.strerror}") from e
    manifest = {
        "format": manifest_format(),
        "package": {"file": os.path.basename(package), "sha256": sha256_file(package)},
        "op_libraries": libraries,
        "torch_version": torch.__version__,
        # The loader refuses a package for another target before anything else.
        "target": target,
        # A -march level the loader checks as a whole, or "native"; in both
        # cases cpu_features lists every extension the compiler could use.
        "isa": march,
        "cpu_features": cpu_features(real_cxx() if cxx is None else cxx, march, target),
        # Which compiler built the package's C++: Bazel's toolchain (the sysroot's
        # glibc floor), or outside Bazel $CXX or g++ (the build machine's).
        "compiler": compiler_record(cxx),
        "device": device,
        # What the op libraries must register; the loader checks it before the package loads.
        **calls.manifest_fields(),
    }
    return (json.dumps(manifest, indent=2) + "\n").encode()


def write_manifest(
    stage: str,
    package: str,
    isa: str,
    device: str,
    signing_key: Any | None,
    *,
    calls: PackageCalls,
    target: str = "linux-x86_64",
    march: str | None = None,
    cxx: str | None = None,
    op_library: str | None = None,
) -> None:
    """Write stage/manifest.json for `package`, and stage/manifest.sig when given a key.

    op_library is the op library the package is for; by default the one this
    process loaded, which cannot be another target's.
    """
    if op_library is None:
        import my_ops

        # The library this process loaded (a no-op when the model already did):
        # the package was compiled and verified against exactly that file.
        try:
            op_library = my_ops.load_library()
        except ImportError as e:
            raise ExportError(
                f"cannot find the op library for manifest.json: {first_line(e)}"
            ) from e
    manifest = make_manifest(
        package, [op_library], isa, device, calls=calls, target=target, march=march, cxx=cxx
    )
    with open(os.path.join(stage, "manifest.json"), "wb") as f:
        f.write(manifest)
    if signing_key is not None:
        # Over the file's exact bytes: the loader checks them before parsing.
        with open(os.path.join(stage, "manifest.sig"), "wb") as f:
            f.write(signing_key.sign(manifest))


def described_package(folder: str) -> tuple[bytes, dict[str, str]]:
    """folder/manifest.json's bytes, and the package it describes ({"file", "sha256"}).

    Only once the manifest is this exporter's format and names a file beside it whose sha256
    is the one it records; raises ExportError naming the file at fault otherwise. The bytes
    are the ones checked, read once.
    """
    manifest_path = os.path.join(folder, "manifest.json")
    try:
        with open(manifest_path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read {manifest_path}: {e.strerror}") from e
    try:
        manifest = json.loads(data)
        found_format = manifest["format"]
        package_name, recorded = manifest["package"]["file"], manifest["package"]["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{manifest_path} is not the manifest.json of an export") from e
    if found_format != manifest_format():
        raise ExportError(
            f"{manifest_path} has format {found_format!r}; this exporter writes "
            f"{manifest_format()!r} (export it again)"
        )
    if not isinstance(package_name, str) or os.path.basename(package_name) != package_name:
        raise ExportError(f"{manifest_path} names no package file beside it: {package_name!r}")
    package_path = os.path.join(folder, package_name)
    try:
        actual = sha256_file(package_path)
    except OSError as e:
        raise ExportError(f"cannot read {package_path}: {e.strerror}") from e
    if actual != recorded:
        raise ExportError(
            f"{package_path} is not the package {manifest_path} describes (its sha256 is "
            f"{actual}, the manifest's {recorded})"
        )
    return data, {"file": package_name, "sha256": recorded}


def sign_export(folder: str, signing_key: Any) -> str:
    """Write folder/manifest.sig for the manifest.json of an existing export; returns its path.

    For signing on another machine than the one that exported (a release step
    that holds the key). Only a manifest that vouches for the package beside
    it is signed (described_package). manifest.sig is replaced by a rename, so
    a reader sees the old signature or the new one.
    """
    data, _ = described_package(folder)
    signature_path = os.path.join(folder, "manifest.sig")
    try:
        fd, staged = tempfile.mkstemp(dir=folder, prefix=".manifest.sig.")
    except OSError as e:
        raise ExportError(f"cannot write in {folder}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(signing_key.sign(data))
        os.chmod(staged, 0o644)
        os.replace(staged, signature_path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        if isinstance(e, OSError):
            raise ExportError(f"cannot write {signature_path}: {e.strerror}") from e
        raise
    return signature_path


def generate_key(folder: str) -> tuple[str, str]:
    """Write a new Ed25519 key pair as PEM; never overwrites an existing key.

    Both files or neither: a private key whose public key was never written
    signs manifests nobody can check.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    paths = (os.path.join(folder, "signing_key.pem"), os.path.join(folder, "public_key.pem"))
    for path in paths:
        if os.path.lexists(path):
            raise ExportError(f"{path} exists; not overwriting a key")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create --generate-key folder {folder}: {e.strerror}") from e
    written: list[str] = []
    try:
        for path, data, mode in ((paths[0], private, 0o600), (paths[1], public, 0o644)):
            # O_EXCL: a key that appeared since the check above is not ours.
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            written.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
    except BaseException as e:
        for path in written:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if isinstance(e, FileExistsError):
            raise ExportError(f"{e.filename} exists; not overwriting a key") from e
        if isinstance(e, OSError):
            raise ExportError(f"cannot write a key in {folder}: {e.strerror}") from e
        raise
    return paths


def load_signing_key(path: str) -> Any:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read --signing-key {path}: {e.strerror}") from e
    if len(data) == 32:
        return Ed25519PrivateKey.from_private_bytes(data)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as e:
        raise ExportError(
            f"--signing-key {path} is neither an unencrypted PEM private key nor a 32-byte seed"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise ExportError(f"--signing-key {path} is not an Ed25519 key")
    return key
