"""Ed25519 keys and signatures: manifest.sig over manifest.json's exact bytes, weights.sig over
weights.json's."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any

from .errors import ExportError
from .manifest import described_package


def sign_export(folder: str, signing_key: Any) -> list[str]:
    """Write folder/manifest.sig for the manifest.json of an existing export, and
    folder/weights.sig for the weights.json beside it where there is one; returns their paths.

    For signing on another machine than the one that exported (a release step
    that holds the key). Only a manifest that vouches for the package beside
    it is signed (described_package), and only a weights manifest for that
    package. Each signature is replaced by a rename, so a reader sees the old
    signature or the new one.
    """
    data, package = described_package(folder)
    signed = [_write_signature(folder, "manifest.sig", signing_key.sign(data))]
    weights_path = os.path.join(folder, "weights.json")
    try:
        with open(weights_path, "rb") as f:
            weights = f.read()
    except FileNotFoundError:
        return signed
    except OSError as e:
        raise ExportError(f"cannot read {weights_path}: {e.strerror}") from e
    try:
        names = json.loads(weights)["package"]["sha256"]
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{weights_path} is not a weights manifest") from e
    if names != package["sha256"]:
        raise ExportError(f"{weights_path} is for another package than the one beside it")
    signed.append(_write_signature(folder, "weights.sig", signing_key.sign(weights)))
    return signed


def _write_signature(folder: str, name: str, signature: bytes) -> str:
    signature_path = os.path.join(folder, name)
    try:
        fd, staged = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
    except OSError as e:
        raise ExportError(f"cannot write in {folder}: {e.strerror}") from e
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(signature)
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
