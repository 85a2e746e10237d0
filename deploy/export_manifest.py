"""manifest.json, which the C++ loader checks before it loads a package, and its signing keys.

The manifest records the sha256 of the package and of the op library it was
verified with, the torch version, the CPU instruction set and the device.
manifest.sig, when the export is given a key, is an Ed25519 signature of the
manifest's exact bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from export_compile import MARCH, real_cxx
from export_error import ExportError, first_line

# The C++ loader reads exactly this format; change both together.
MANIFEST_FORMAT = "my_ops.manifest/1"

# Compiler macro -> the name the loader checks with __builtin_cpu_supports.
# Only extensions a compiler emits for C++ code; the loader knows each one.
_CPU_FEATURE_MACROS = {
    "__SSE3__": "sse3",
    "__SSSE3__": "ssse3",
    "__SSE4_1__": "sse4.1",
    "__SSE4_2__": "sse4.2",
    "__POPCNT__": "popcnt",
    "__AVX__": "avx",
    "__AVX2__": "avx2",
    "__FMA__": "fma",
    "__F16C__": "f16c",
    "__BMI__": "bmi",
    "__BMI2__": "bmi2",
    "__LZCNT__": "lzcnt",
    "__MOVBE__": "movbe",
    "__AVX512F__": "avx512f",
    "__AVX512BW__": "avx512bw",
    "__AVX512CD__": "avx512cd",
    "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl",
    "__AVX512VNNI__": "avx512vnni",
    "__AVX512BF16__": "avx512bf16",
    "__AVX512FP16__": "avx512fp16",
    "__AVX512IFMA__": "avx512ifma",
    "__AVX512VBMI__": "avx512vbmi",
    "__AVX512VBMI2__": "avx512vbmi2",
    "__AVX512BITALG__": "avx512bitalg",
    "__AVX512VPOPCNTDQ__": "avx512vpopcntdq",
    "__AVXVNNI__": "avxvnni",
    "__GFNI__": "gfni",
    "__VAES__": "vaes",
    "__VPCLMULQDQ__": "vpclmulqdq",
    "__AMX_TILE__": "amx-tile",
    "__AMX_INT8__": "amx-int8",
    "__AMX_BF16__": "amx-bf16",
}


def cpu_features(cxx: str, march: str) -> list[str]:
    """The instruction-set extensions `cxx -march=MARCH` may emit, by loader name.

    For native that is this host's CPU as the compiler sees it, which is what
    the package then needs wherever it runs.
    """
    try:
        proc = subprocess.run(
            [cxx, f"-march={march}", "-dM", "-E", "-x", "c++", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as e:
        raise ExportError(f"cannot ask {cxx} what -march={march} enables: {first_line(e)}") from e
    defined = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}
    return sorted(name for macro, name in _CPU_FEATURE_MACROS.items() if macro in defined)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_manifest(package: str, op_libraries: Sequence[str], isa: str, device: str) -> bytes:
    """manifest.json for a package: what the C++ loader checks before loading it."""
    import torch

    march = MARCH[isa]
    manifest = {
        "format": MANIFEST_FORMAT,
        "package": {"file": os.path.basename(package), "sha256": sha256_file(package)},
        "op_libraries": [
            {"file": os.path.basename(lib), "sha256": sha256_file(lib)} for lib in op_libraries
        ],
        "torch_version": torch.__version__,
        # A -march level the loader checks as a whole, or "native"; in both
        # cases cpu_features lists every extension the compiler could use.
        "isa": march,
        "cpu_features": cpu_features(real_cxx(), march),
        "device": device,
    }
    return (json.dumps(manifest, indent=2) + "\n").encode()


def write_manifest(
    stage: str, package: str, isa: str, device: str, signing_key: Any | None
) -> None:
    """Write stage/manifest.json for `package`, and stage/manifest.sig when given a key."""
    import my_ops

    # The library this process loaded (a no-op when the model already did):
    # the package was compiled and verified against exactly that file.
    try:
        library = my_ops.load_library()
    except ImportError as e:
        raise ExportError(f"cannot find the op library for manifest.json: {first_line(e)}") from e
    manifest = make_manifest(package, [library], isa, device)
    with open(os.path.join(stage, "manifest.json"), "wb") as f:
        f.write(manifest)
    if signing_key is not None:
        # Over the file's exact bytes: the loader checks them before parsing.
        with open(os.path.join(stage, "manifest.sig"), "wb") as f:
            f.write(signing_key.sign(manifest))


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
