"""Loading an exported package in Python with its weights: my_ops.deploy.load.

A CPU package's export writes its weights beside model.pt2 (weights.bin and
weights.json), and the package holds none of them, so that a run maps the
weights once instead of holding a copy of them besides the model's library.
torch._inductor.aoti_load_package alone then gives a model without weights;
load() gives it its weights the way the C++ runtime does: weights.json must
name this package (by sha256) and weights.bin's sha256 and size, and list every
constant the package takes with the dtype and shape its metadata records;
weights.bin is mapped (privately: what the model writes stays in this process)
and hashed over the mapping the model then computes on.

This is for development and tests, in a process that trusts its files: the C++
runtime (the loader, the SDK) also checks signatures and copies every file into
a private folder before it checks it, so that nobody can change what it loads.
A package that holds its weights loads as aoti_load_package loads it, unless a
weights file is named, which then replaces its constants.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
from typing import Any

from .contract import load_contract
from .hashing import sha256_file


class WeightsError(ValueError):
    """A weights file that does not fit its package; the message names the file."""


def _dtype(c10_name: str) -> Any:
    import torch

    for torch_name, name in load_contract().input_dtypes.items():
        if name == c10_name:
            return getattr(torch, torch_name)
    raise WeightsError(f"unknown dtype {c10_name!r}")


def _mapped(path: str, size: int, sha256: str) -> Any:
    """weights.bin mapped privately as uint8, once its size and its sha256 over the mapping
    are the manifest's."""
    import torch

    with open(path, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        if actual != size:
            raise WeightsError(f"{path} is {actual} bytes, its manifest says {size}")
        if size == 0:
            return torch.empty(0, dtype=torch.uint8)
        view = mmap.mmap(
            f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
        )
    digest = hashlib.sha256(memoryview(view)).hexdigest()
    if digest != sha256:
        raise WeightsError(f"{path}: sha256 {digest}, its manifest has {sha256}")
    return torch.frombuffer(view, dtype=torch.uint8)


def load(package: str | os.PathLike[str], weights: str | os.PathLike[str] | None = None) -> Any:
    """The package at `package` (model.pt2), loaded with aoti_load_package and given its
    weights: `weights` (a weights.bin, its weights.json beside it) or, for a package exported
    without its weights, the weights.bin beside it.

    Raises WeightsError naming the file that does not fit.
    """
    import torch

    import my_ops

    # The package calls the ops' C shims, which it finds in the op library once loaded.
    my_ops.load_library()
    package = os.fspath(package)
    compiled = torch._inductor.aoti_load_package(package)
    specs_text = compiled.get_metadata().get(load_contract().weights_metadata_key)
    if weights is None and specs_text is None:
        return compiled
    blob = (
        os.fspath(weights)
        if weights is not None
        else os.path.join(os.path.dirname(package) or ".", "weights.bin")
    )
    manifest_path = os.path.join(os.path.dirname(blob) or ".", "weights.json")
    try:
        with open(manifest_path, "rb") as f:
            manifest = json.loads(f.read())
    except OSError as e:
        raise WeightsError(
            f"{manifest_path}: {e.strerror} (a package exported without its weights runs on "
            "the weights.bin and weights.json its export wrote beside it)"
        ) from e
    except ValueError as e:
        raise WeightsError(f"{manifest_path} is not JSON: {e}") from e
    try:
        if manifest["format"] != load_contract().weights_format:
            raise WeightsError(f"{manifest_path} is not a weights manifest of this release")
        named, blob_size, blob_sha256 = (
            manifest["package"]["sha256"],
            manifest["blob"]["size"],
            manifest["blob"]["sha256"],
        )
        objects = manifest["custom_objects"]
        listed = {entry["name"]: entry for entry in manifest["constants"]}
    except (KeyError, TypeError) as e:
        raise WeightsError(f"{manifest_path} is malformed: {e!r} is missing or wrong") from e
    if named != sha256_file(package):
        raise WeightsError(f"{manifest_path} is for another package than {package}")
    if objects and weights is not None:
        raise WeightsError(
            f"{manifest_path} carries custom objects' state, which only the C++ runtime sets"
        )
    data = _mapped(blob, blob_size, blob_sha256)
    held = set(compiled.get_constant_fqns())
    if set(listed) != held:
        missing = sorted(held - set(listed)) or sorted(set(listed) - held)
        raise WeightsError(
            f"{manifest_path} does not list the package's constants: {missing[0]} differs"
        )
    specs = json.loads(specs_text) if specs_text is not None else {}
    constants = {}
    for name, entry in listed.items():
        if specs and specs.get(name) != {"dtype": entry["dtype"], "shape": entry["shape"]}:
            raise WeightsError(f"{manifest_path}: constant {name} is not the package's")
        dtype = _dtype(entry["dtype"])
        count = 1
        for d in entry["shape"]:
            count *= d
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        offset = entry["offset"]
        if offset + nbytes > data.numel():
            raise WeightsError(f"{manifest_path}: constant {name} lies outside {blob}")
        constants[name] = data[offset : offset + nbytes].view(dtype).view(entry["shape"])
    # The model computes on these tensors: AOTInductor's user-managed constants.
    compiled.load_constants(constants, check_full_update=True, user_managed=True)
    return compiled
