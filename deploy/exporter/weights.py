"""Weights files: new values for the constants of an exported package, without new native code.

An export writes architecture.json beside model.pt2: what a weights file for
the package must match, which is everything of the exported program but the
constants' values:
  graph_sha256     of the graph's code, its signature and its shape ranges;
  frozen           whether the weights were frozen into the package (--mode
                   max-autotune): its constants are then prepacked copies under
                   Inductor's names, and no weights file is written for it;
  constants        each tensor the package holds as a constant (parameters,
                   buffers, tensor constants), by the name AOTInductor's
                   load_constants takes, with its dtype and shape;
  tied             {name: held name} for each constant the program reaches by
                   a second name (a tied embedding and output projection): the
                   compile keeps such a tensor once, under one of its names,
                   and a weights file holds it once, under that name;
  unused           the program's constants the package does not hold at all
                   (a buffer no operation reads): a weights file leaves them
                   out;
  custom_objects   each custom-class object the program holds, by the name
                   AOTInductor's get_custom_objs() gives it: its class, and
                   its state (def_pickle's __getstate__), item by item: a
                   tensor's dtype and shape, any other value as it is.

`export --weights-only --base DIR --model M:F --out OUT` exports M:F with
torch.export only, checks that its architecture is the one in
DIR/architecture.json (one line naming the first difference otherwise), and
writes into OUT:
  weights.bin         every constant's bytes, then each custom object's state
                      tensors, each contiguous, little-endian and at an offset
                      that is a multiple of the contract's alignment;
  weights.json        the file's sha256 and size, the sha256 of the package in
                      DIR (the one package these weights fit), and where each
                      constant and state tensor lies in weights.bin;
  weights.sig         with --signing-key: Ed25519 signature of weights.json;
  sample_input.pt, expected_output.pt: batch 1's inputs, and M:F's eager
                      outputs on them, for `loader --weights ... --expect`.
The C++ loader (--weights) and the deploy API (Model::update_weights) check
all of it before a byte of the new values reaches the model.

A package export writes the same three files beside model.pt2 when the
package is compiled without its weights (Inductor's
aot_inductor.package_constants_in_so off): a CPU package for this machine's
architecture whose constants a weights file can hold, unless frozen. Its
metadata (weights_metadata) lists every constant's dtype and shape; the
runtime maps weights.bin and hands the model tensors on the mapping, so that
a run holds each weight once, where a package with its weights inside holds
them twice (AOTInductor copies them out of the model's library).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Collection
from typing import Any

from .contract import load_contract
from .errors import EXIT_NOT_BASE_ARCHITECTURE, ExportError, first_line
from .manifest import described_package
from .options import FLOAT_LINEARS
from .program_calls import CUSTOM_CLASS_PREFIX

ARCHITECTURE_FILE = "architecture.json"
ARCHITECTURE_FORMAT = "my_ops.architecture/1"
# Scalars a custom object's state may hold besides tensors; each must be the same in the base.
_PLAIN = (bool, int, float, str, type(None))


def weights_format() -> str:
    return load_contract().weights_format


def _dtype_name(dtype: Any, where: str | None) -> str:
    """c10's name of a dtype the contract lists. Another dtype raises ExportError naming `where`,
    or with `where` None is named as torch names it: architecture.json records what a package
    holds, and only a weights file must be something the loader reads."""
    name = load_contract().input_dtypes.get(str(dtype).removeprefix("torch."))
    if name is not None:
        return name
    if where is None:
        return str(dtype)
    raise ExportError(f"{where} has dtype {dtype}, which a weights file cannot hold")


def tensor_spec(t: Any, where: str | None) -> dict[str, Any]:
    return {"dtype": _dtype_name(t.dtype, where), "shape": list(t.shape)}


def program_constants(ep: Any) -> dict[str, Any]:
    """The tensors a program's package holds as constants, by their fully qualified name."""
    import torch

    sig = ep.graph_signature
    found: dict[str, Any] = {}
    for fqn in (
        *sig.inputs_to_parameters.values(),
        *sig.inputs_to_buffers.values(),
        *sig.inputs_to_lifted_tensor_constants.values(),
    ):
        value = ep.state_dict[fqn] if fqn in ep.state_dict else ep.constants[fqn]
        if not isinstance(value, torch.Tensor):
            raise ExportError(f"constant {fqn} of the program is a {type(value).__name__}")
        found[fqn] = value.detach()
    return dict(sorted(found.items()))


def weights_metadata(constants: dict[str, Any]) -> str | None:
    """The value of the package metadata entry (the contract's weights.metadata_key) of a package
    compiled without its weights: {name: {"dtype", "shape"}} of every constant of the program,
    which the runtime checks a weights file's tensors against before it maps them. None where a
    constant cannot be in a weights file (a dtype the contract lacks, or not contiguous, as the
    package's code would then read it with other strides): such a package keeps its weights."""
    specs: dict[str, Any] = {}
    for name, t in constants.items():
        listed = str(t.dtype).removeprefix("torch.") in load_contract().input_dtypes
        if not listed or not t.is_contiguous():
            return None
        specs[name] = tensor_spec(t, None)
    return json.dumps(specs, separators=(",", ":"), sort_keys=True)


def _same_tensor(a: Any, b: Any) -> bool:
    return (
        a.device == b.device
        and a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.data_ptr() == b.data_ptr()
    )


def tied_constants(constants: dict[str, Any], held: Collection[str]) -> dict[str, str]:
    """{name: held name} for each of `constants` that the package does not hold by its own name
    but as the same tensor under a name it does hold (`held`: the package's constant names)."""
    tied = {}
    for name, t in constants.items():
        if name in held:
            continue
        same = [h for h in sorted(held) if h in constants and _same_tensor(constants[h], t)]
        if len(same) == 1:
            tied[name] = same[0]
    return tied


def _ties_of(constants: dict[str, Any], tied: dict[str, str]) -> dict[str, str]:
    """Those of a base's `tied` names that are one tensor with their held name in `constants`."""
    return {
        name: held
        for name, held in tied.items()
        if name in constants
        and held in constants
        and _same_tensor(constants[name], constants[held])
    }


def _custom_object_state(name: str, obj: Any) -> tuple[str, list[Any] | str]:
    """(class as ns::Class, state items) of a custom-class object: what a weights file carries.

    In place of the items, why a weights file cannot carry the object's state.
    """
    import torch

    obj = getattr(obj, "real_obj", obj)
    qualified = obj._type().qualified_name()
    cls = qualified.removeprefix(CUSTOM_CLASS_PREFIX).replace(".", "::", 1)
    try:
        # From Python, (the state def_pickle's getter returns, the class's qualified name).
        state, _ = obj.__getstate__()
    except Exception:  # noqa: BLE001
        return cls, "its class has no def_pickle state"
    if not isinstance(state, tuple) or not all(
        isinstance(v, (torch.Tensor, *_PLAIN)) for v in state
    ):
        return cls, (
            "its state (def_pickle's getter) is not a tuple of tensors and numbers, strings or None"
        )
    return cls, list(state)


def _package_object_names(ep: Any) -> dict[str, str]:
    """The name AOTInductor gives each custom-class object of the program: fqn -> name.

    Inductor traces the program again and stores each object it meets as an argument under
    _torchbind_obj0, 1, ... in the order it meets them (torch.fx's Tracer.create_arg): the
    order of first use in the graph. get_custom_objs() returns them under those names.
    """
    import torch

    lifted = ep.graph_signature.inputs_to_lifted_custom_objs
    names: dict[str, str] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        used: list[Any] = []
        torch.fx.node.map_arg((node.args, node.kwargs), used.append)
        for arg in used:
            fqn = lifted.get(arg.name) if arg.op == "placeholder" else None
            if fqn is not None and fqn not in names:
                names[fqn] = f"_torchbind_obj{len(names)}"
    return names


def program_custom_objects(ep: Any) -> dict[str, tuple[str, list[Any] | str]]:
    """Each custom-class object the program holds, by the name the package gives it:
    name -> (class, state items or why a weights file cannot carry them)."""
    import torch

    names = _package_object_names(ep)
    objects = {}
    for fqn, value in ep.constants.items():
        if isinstance(getattr(value, "real_obj", value), torch.ScriptObject):
            cls, state = _custom_object_state(fqn, value)
            if fqn not in names:
                # Never called: the package holds no such object.
                continue
            objects[names[fqn]] = (cls, state)
    return dict(sorted(objects.items()))


def confirm_object_names(package: str, ep: Any) -> str | None:
    """Why the package's custom objects are not the program's under _package_object_names, or None.

    The package stores each object (its def_pickle state) under the name get_custom_objs()
    gives it; each must hold exactly the state of the object the names say it is.
    """
    import zipfile

    import torch

    objects = program_custom_objects(ep)
    try:
        with zipfile.ZipFile(package) as z:
            configs = [n for n in z.namelist() if n.endswith("/custom_objs_config.json")]
            stored = json.loads(z.read(configs[0])) if configs else {}
            root = configs[0].split("/data/", 1)[0] if configs else ""
            loaded = {
                name: torch._C._pickle_load_obj(z.read(f"{root}/data/constants/{entry}"))
                for name, entry in stored.items()
            }
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RuntimeError) as e:
        return f"cannot read the package's custom objects ({e})"
    if sorted(loaded) != sorted(objects):
        return f"the package names its objects {sorted(loaded)}, not {sorted(objects)}"
    for name, (_, items) in objects.items():
        if isinstance(items, str):
            continue
        try:
            state, _ = loaded[name].__getstate__()
            same = len(state) == len(items) and all(
                torch.equal(a, b.to(a.device)) if isinstance(a, torch.Tensor) else a == b
                for a, b in zip(state, items, strict=True)
            )
        except Exception as e:  # noqa: BLE001
            # Whatever goes wrong here rules out weights files for this model, not its export.
            return f"cannot compare the package's {name} with the program's ({first_line(e)})"
        if not same:
            return f"the package's {name} does not hold the program's state for it"
    return None


def graph_sha256(ep: Any) -> str:
    """Of everything that decides what the package computes, but the constants' values."""
    h = hashlib.sha256()
    for part in (ep.graph_module.code, str(ep.graph_signature), str(ep.range_constraints)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def architecture(
    ep: Any,
    unconfirmed: str | None = None,
    tied: dict[str, str] | None = None,
    unused: Collection[str] = (),
) -> dict[str, Any]:
    """architecture.json's content for an ExportedProgram.

    unconfirmed: why the package's names for the custom objects are not known for sure, which
    rules out a weights file for them. tied: the constants the package holds under another of
    their names (tied_constants); unused: those it does not hold; both left out of the list of
    constants.
    """
    import torch

    tied = tied or {}
    objects = []
    for name, (cls, items) in program_custom_objects(ep).items():
        if unconfirmed is not None:
            items = unconfirmed
        if isinstance(items, str):
            # Recorded, so that a weights export names it; a package is still exported.
            objects.append({"name": name, "class": cls, "state": None, "why": items})
            continue
        state = [
            {"tensor": tensor_spec(v, None)} if isinstance(v, torch.Tensor) else {"value": v}
            for v in items
        ]
        objects.append({"name": name, "class": cls, "state": state})
    return {
        "format": ARCHITECTURE_FORMAT,
        "graph_sha256": graph_sha256(ep),
        "constants": [
            {"name": name, **tensor_spec(t, None)}
            for name, t in program_constants(ep).items()
            if name not in tied and name not in unused
        ],
        "tied": dict(sorted(tied.items())),
        "unused": sorted(unused),
        "custom_objects": objects,
    }


def weights_architecture(ep: Any, base: dict[str, Any]) -> tuple[dict[str, Any], set[str]]:
    """This model's architecture, to compare with the `base` architecture's (first_difference),
    and the program constants a weights file for the base's package leaves out: the base's tied
    constants, as far as this model ties them too (first_difference tells where it does not),
    and those the base's package does not hold (both absent from older architecture files)."""
    tied = _ties_of(program_constants(ep), base.get("tied", {}))
    unused = base.get("unused", [])
    return architecture(ep, tied=tied, unused=unused), {*tied, *unused}


def write_architecture(
    stage: str, package: str, ep: Any, *, frozen: bool, held: Collection[str] | None
) -> None:
    """stage/architecture.json for the program `ep`, compiled into `package`.

    frozen: the compile folded the weights into the package (Inductor's freezing), which then
    holds them prepacked under its own names, so that no weights file fits it. held: the names
    of the package's constants as the loaded package gives them, None where it was not loaded
    here (a cross target): then every constant of the program is listed, and a weights file for
    a package that holds fewer (tied or unused ones) is refused by the loader."""
    unconfirmed = confirm_object_names(package, ep)
    constants = program_constants(ep)
    tied = tied_constants(constants, held) if held is not None else {}
    unused = [] if held is None else [n for n in constants if n not in held and n not in tied]
    with open(os.path.join(stage, ARCHITECTURE_FILE), "w") as f:
        json.dump(architecture(ep, unconfirmed, tied, unused) | {"frozen": frozen}, f, indent=1)
        f.write("\n")


def _describe(entry: dict[str, Any]) -> str:
    return f"{entry['dtype']} {entry['shape']}"


def _paired(
    kind: str, base: list[dict[str, Any]], new: list[dict[str, Any]]
) -> tuple[str | None, list[tuple[str, dict[str, Any], dict[str, Any]]]]:
    """(why not, []) when a name is on one side only; else (None, [(name, base's, new's)])."""
    base_by_name = {e["name"]: e for e in base}
    new_by_name = {e["name"]: e for e in new}
    one_side = sorted(base_by_name.keys() ^ new_by_name.keys())
    if one_side:
        name = one_side[0]
        if name in base_by_name:
            return f"{kind} {name} of the base is not in this model", []
        return f"{kind} {name} of this model is not in the base", []
    return None, [(name, base_by_name[name], new_by_name[name]) for name in sorted(base_by_name)]


def first_difference(base: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first way `new` (this model's architecture) differs from `base`, as a phrase; or None."""
    # Absent from architecture files written before ties were recorded.
    base_tied, new_tied = base.get("tied", {}), new.get("tied", {})
    for name in sorted(base_tied.keys() ^ new_tied.keys()):
        held = base_tied.get(name) or new_tied[name]
        where = ("the base", "this model") if name in base_tied else ("this model", "the base")
        return f"constants {name} and {held} are one tensor in {where[0]} (tied), two in {where[1]}"
    missing, constants = _paired("constant", base["constants"], new["constants"])
    if missing:
        return missing
    for name, b, n in constants:
        if b["dtype"] != n["dtype"] or b["shape"] != n["shape"]:
            return f"constant {name} is {_describe(n)} here, {_describe(b)} in the base"
    missing, objects = _paired("custom object", base["custom_objects"], new["custom_objects"])
    if missing:
        return missing
    for name, b, n in objects:
        if b["class"] != n["class"]:
            return f"custom object {name} is a {n['class']} here, a {b['class']} in the base"
        if b["state"] is None or n["state"] is None:
            why = (b if b["state"] is None else n)["why"]
            return f"custom object {name} ({n['class']}) cannot be carried by a weights file: {why}"
        if len(b["state"]) != len(n["state"]):
            return (
                f"custom object {name} has {len(n['state'])} state items here, "
                f"{len(b['state'])} in the base"
            )
        for i, (bi, ni) in enumerate(zip(b["state"], n["state"], strict=True)):
            if bi != ni:
                show = {"tensor": lambda s: _describe(s["tensor"]), "value": lambda s: s["value"]}
                described = [show[next(iter(s))](s) for s in (ni, bi)]
                return (
                    f"custom object {name}, state item {i}: {described[0]!r} here, "
                    f"{described[1]!r} in the base"
                )
    if base["graph_sha256"] != new["graph_sha256"]:
        return (
            "the exported graph differs from the base's (same constants, other operations, "
            "inputs or shape ranges)"
        )
    return None


def read_base(folder: str) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """The package (file, sha256) a weights file for export `folder` is for, its architecture,
    and manifest.json's record of its quantization ({"scheme": "none"} for a float package).

    The sha256 is the one manifest.json records, and model.pt2 in `folder` must have it: the
    weights file names the package the fleet runs, which is that one.
    """
    try:
        manifest_bytes, package = described_package(folder)
    except ExportError as e:
        raise ExportError(f"--base {folder}: {e}") from e
    # Absent in packages exported before --quantize, which were float.
    quantization = json.loads(manifest_bytes).get("quantization", {"scheme": "none"})
    if not isinstance(quantization, dict) or not isinstance(quantization.get("scheme"), str):
        raise ExportError(f"--base {folder}: manifest.json's quantization is not a scheme's record")
    if quantization.get("float_linear", "inductor") not in FLOAT_LINEARS:
        raise ExportError(
            f"--base {folder}: manifest.json's quantization.float_linear is not one of "
            f"{', '.join(FLOAT_LINEARS)}"
        )
    alpha = quantization.get("smooth_alpha", 0.0)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 <= alpha <= 1:
        raise ExportError(
            f"--base {folder}: manifest.json's quantization.smooth_alpha is not a number in [0, 1]"
        )
    arch_path = os.path.join(folder, ARCHITECTURE_FILE)
    try:
        with open(arch_path, "rb") as f:
            arch = json.loads(f.read())
    except FileNotFoundError as e:
        raise ExportError(
            f"--base {folder} has no {ARCHITECTURE_FILE}: it was exported before weights files "
            "existed; export it again"
        ) from e
    except (OSError, ValueError) as e:
        raise ExportError(f"--base {folder}: cannot read {ARCHITECTURE_FILE}") from e
    if not isinstance(arch, dict) or arch.get("format") != ARCHITECTURE_FORMAT:
        raise ExportError(
            f"--base {folder}: {ARCHITECTURE_FILE} is not of format {ARCHITECTURE_FORMAT}"
        )
    # Absent in packages exported before --mode, which were not frozen.
    frozen = arch.get("frozen", False)
    if not isinstance(frozen, bool):
        raise ExportError(f"--base {folder}: {ARCHITECTURE_FILE}'s frozen is not true or false")
    if frozen:
        # Checked here, before the model is exported: nothing it holds could change this.
        raise ExportError(
            f"--base {folder}: its package was compiled with its weights frozen into it (--mode "
            "max-autotune or --inductor-option freezing=True): a weights file cannot update it; "
            "export the base with --mode no-autotune (the default) to update its weights",
            EXIT_NOT_BASE_ARCHITECTURE,
        )
    # Absent in packages exported before they were recorded, which listed every constant.
    tied, unused = arch.get("tied", {}), arch.get("unused", [])
    if not isinstance(tied, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tied.items()
    ):
        raise ExportError(f"--base {folder}: {ARCHITECTURE_FILE}'s tied is not names to names")
    if not isinstance(unused, list) or not all(isinstance(n, str) for n in unused):
        raise ExportError(f"--base {folder}: {ARCHITECTURE_FILE}'s unused is not a list of names")
    return package, arch, quantization


def check_base_scheme(record: dict[str, Any], opts: Any, spell: Callable[[str], str]) -> None:
    """A weights file carries values of the base package's scheme: its constants are int8 or
    int4 codes and scales for a quantized package, floats for a float one. Checked before the
    model is quantized or exported, and named as the flags to give."""
    scheme = record["scheme"]
    mine = opts.quantize or "none"
    same_groups = scheme != "int4" or record.get("group_size") == opts.quantize_group_size
    # Packages exported before --float-linear ran Inductor's product.
    float_linear = record.get("float_linear", "inductor")
    if scheme == mine and same_groups:
        # Packages exported before --smooth-alpha were not smoothed.
        alpha = record.get("smooth_alpha", 0.0)
        if scheme != "none" and opts.smooth_alpha is not None and opts.smooth_alpha != alpha:
            raise ExportError(
                f"{spell('base')} {opts.base}: its package was quantized with "
                f"{spell('smooth_alpha')} {alpha:g}, this export asks for {opts.smooth_alpha:g}: "
                "a weights file's layers are smoothed as its base's are; leave "
                f"{spell('smooth_alpha')} out to take the base's",
                EXIT_NOT_BASE_ARCHITECTURE,
            )
        if float_linear == opts.float_linear:
            return
        raise ExportError(
            f"{spell('base')} {opts.base}: its package's float linear layers are "
            f"{spell('float_linear')} {float_linear}, this export's {opts.float_linear}: a "
            "weights file holds the weights as its base's package does; export the weights "
            f"with {spell('float_linear')} {float_linear}",
            EXIT_NOT_BASE_ARCHITECTURE,
        )

    def described(name: str, group_size: Any) -> str:
        if name == "none":
            return f"float (no {spell('quantize')})"
        how = f"{spell('quantize')} {name}"
        if name == "int4":
            how += f", {spell('quantize_group_size')} {group_size}"
        return f"{name} ({how})"

    raise ExportError(
        f"{spell('base')} {opts.base}: its package is {described(scheme, record.get('group_size'))}"
        f", this export {described(mine, opts.quantize_group_size)}: a weights file holds values "
        "of its base's scheme; export the weights as the base was exported",
        EXIT_NOT_BASE_ARCHITECTURE,
    )


def _tensor_bytes(t: Any) -> bytes:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def write_weights(
    stage: str,
    ep: Any,
    package: dict[str, str],
    signing_key: Any | None,
    left_out: Collection[str] = (),
) -> None:
    """stage/weights.bin, stage/weights.json and, with a key, stage/weights.sig.

    weights.bin holds the constants in name order but those `left_out` (the package holds them
    under another name, or not at all), then each custom object's state tensors.
    """
    import torch

    alignment = load_contract().weights_alignment
    h = hashlib.sha256()
    size = 0

    def place(f: Any, t: Any, where: str) -> dict[str, Any]:
        nonlocal size
        pad = -size % alignment
        data = b"\0" * pad + _tensor_bytes(t)
        f.write(data)
        h.update(data)
        entry = {**tensor_spec(t, where), "offset": size + pad}
        size += len(data)
        return entry

    constants = []
    objects = []
    with open(os.path.join(stage, "weights.bin"), "wb") as f:
        for name, t in program_constants(ep).items():
            if name not in left_out:
                constants.append({"name": name, **place(f, t, f"constant {name}")})
        for name, (cls, items) in program_custom_objects(ep).items():
            tensors = [
                {"index": i, **place(f, v, f"custom object {name}, state item {i}")}
                for i, v in enumerate(items)
                if isinstance(v, torch.Tensor)
            ]
            objects.append({"name": name, "class": cls, "tensors": tensors})
    manifest = {
        "format": weights_format(),
        "package": package,
        "blob": {"file": "weights.bin", "sha256": h.hexdigest(), "size": size},
        "constants": constants,
        "custom_objects": objects,
    }
    data = (json.dumps(manifest, indent=1) + "\n").encode()
    with open(os.path.join(stage, "weights.json"), "wb") as f:
        f.write(data)
    if signing_key is not None:
        with open(os.path.join(stage, "weights.sig"), "wb") as f:
            f.write(signing_key.sign(data))
