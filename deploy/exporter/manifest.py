"""manifest.json, which the C++ loader checks before it loads a package.

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
manifest's exact bytes (signing.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..contract.package_contract import CONTRACT_PATH
from .compile import MARCH, compiler_record, real_cxx
from .contract import load_contract
from .cpu_features import check_target, cpu_features, cpu_levels
from .errors import ExportError, first_line
from .hashing import sha256_file
from .program_calls import PackageCalls


def manifest_format() -> str:
    """The format the C++ loader reads, the one make_manifest writes."""
    return load_contract().manifest_format


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
    quantization: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
) -> bytes:
    """manifest.json for a package: what the C++ loader checks before loading it.

    calls is what the package calls (package_calls() of the exported program).
    quantization is export --quantize's record of the package's linear layers
    (pipeline.quantization_record); None for a float package, {"scheme": "none"}.
    state is what the package's runs update (state.manifest_record), None for none.
    march defaults to what --isa means (MARCH[isa]) and cxx to the compiler
    that built the package (real_cxx()); for another target, pass both.
    """
    import torch

    check_target(target)
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
        # How the linear layers' weights are held: what a weights file must carry too.
        "quantization": quantization if quantization is not None else {"scheme": "none"},
        # What the op libraries must register; the loader checks it before the package loads.
        **calls.manifest_fields(),
    }
    if state is not None:
        # What the package's runs update in place (a decoder's KV cache), for the reader: the
        # runtime reads the same from the package's metadata.
        manifest["state"] = state
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
    quantization: dict[str, Any] | None = None,
    state: dict[str, Any] | None = None,
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
        package,
        [op_library],
        isa,
        device,
        calls=calls,
        target=target,
        march=march,
        cxx=cxx,
        quantization=quantization,
        state=state,
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
