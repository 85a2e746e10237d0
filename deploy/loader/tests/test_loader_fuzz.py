"""Fuzzing the loader's input reader, manifest reader and weights-file reader with Hypothesis.

Each example writes one malformed (or, by chance, valid) file and runs the
loader on it with //deploy:default_package. Whatever the file, the loader
must end with exit 0 and an output, or with a documented error code, one
`loader: error:` line and no output: never a signal, never a hang.

`bazel test` runs a fixed budget per case (MY_OPS_FUZZ_BUDGET, set per build
in deploy/BUILD.bazel: the full budget under --config=asan, where every read is
checked, a smoke run in the plain build), derandomized and without an example
database, so runs are repeatable. A longer, randomized run by hand:

    tools/bazel test //deploy/loader:loader_fuzz_test --test_env=MY_OPS_FUZZ_EXAMPLES=2000 \\
        --test_timeout=7200 --test_output=streamed

A failure prints the smallest file contents that reproduce it.
"""

from __future__ import annotations

import collections
import io
import json
import math
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import EXIT_CODES, child_env, error_lines
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("MY_OPS_FUZZ_EXAMPLES") or os.environ.get("MY_OPS_FUZZ_BUDGET", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="MY_OPS_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
# A run that loads the package takes about a second; far longer is a hang.
TIMEOUT_S = 120

CODES = {code for name, code in EXIT_CODES.items() if name != "ok"}
INPUT_ERRORS = {EXIT_CODES["input_unreadable"], EXIT_CODES["input_mismatch"]}
INTEGRITY = {EXIT_CODES["integrity"]}


@pytest.fixture(scope="module")
def package(default_package: Path) -> Path:
    return default_package / "model.pt2"


@pytest.fixture(scope="module")
def signature(package: Path) -> list[tuple[str, list[tuple[int, float]]]]:
    """The package's input signature ("my_ops.inputs"), the oracle for inputs."""
    with zipfile.ZipFile(package) as z:
        name = next(n for n in z.namelist() if n.endswith("wrapper_metadata.json"))
        inputs = json.loads(json.loads(z.read(name))["my_ops.inputs"])
    return [
        (
            spec["dtype"],
            [(d["min"], math.inf if d["max"] is None else d["max"]) for d in spec["sizes"]],
        )
        for spec in inputs
    ]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _run(
    loader_bin: str,
    ops: str,
    package: Path,
    work: Path,
    extra: tuple[str, ...] = (),
    **files: bytes,
):
    """Runs the loader with the sample input and default manifest, except for `files`, and with
    `extra` flags, in which {weights_manifest} stands for the path of the file of that name."""
    out = work / "out.pt"
    out.unlink(missing_ok=True)
    paths = {
        "input": package.parent / "sample_input.pt",
        "manifest": package.parent / "manifest.json",
    }
    for name, data in files.items():
        paths[name] = work / f"fuzzed_{name}"
        paths[name].write_bytes(data)
    argv = [
        loader_bin, "--ops", ops, "--package", str(package),
        "--input", str(paths["input"]), "--manifest", str(paths["manifest"]),
        "--output", str(out), *(a.format(**paths) for a in extra),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            argv, env=child_env(work / "tmp"), capture_output=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loader hung (over {TIMEOUT_S}s)")
    stderr = proc.stderr.decode(errors="replace")
    assert proc.returncode >= 0, f"loader killed by signal {-proc.returncode}: {stderr}"
    assert os.listdir(work / "tmp") == [], "temporary files left behind"
    return proc.returncode, stderr, out, paths


def _check(rc: int, stderr: str, out: Path, allowed: set[int]) -> str:
    """The one error line (or "" on success), after the common checks."""
    assert rc in allowed, (rc, stderr)
    assert not Path(str(out) + ".tmp").exists()
    if rc == 0:
        assert out.exists(), stderr
        return ""
    assert rc in CODES
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith("loader: error: "), stderr
    assert not out.exists()
    return lines[0]


def _saved(value) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


# --------------------------------------------------------------------------- byte-level


@st.composite
def _mutations(draw, base: bytes) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "random"]))
    data = bytearray(base)
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    if kind == "flip":
        for bit in draw(st.lists(st.integers(0, 8 * len(data) - 1), min_size=1, max_size=16)):
            data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)
    if kind == "overwrite":
        at = draw(st.integers(0, len(data) - 1))
        chunk = draw(st.binary(min_size=1, max_size=64))
        data[at : at + len(chunk)] = chunk
        return bytes(data)
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        return bytes(data[:at] + draw(st.binary(min_size=1, max_size=64)) + data[at:])
    prefix = draw(st.sampled_from([b"", b"PK\x03\x04", b"\x80\x02"]))
    return prefix + draw(st.binary(max_size=4096))


@FUZZ
@given(data=st.data())
def test_mutated_input_files(loader_bin, ops_library, package, work, data) -> None:
    base = (package.parent / "sample_input.pt").read_bytes()
    fuzzed = data.draw(_mutations(base), label="input")
    rc, stderr, out, _ = _run(loader_bin, ops_library, package, work, input=fuzzed)
    # A flip inside the tensor data leaves a valid input with other values.
    _check(rc, stderr, out, {0} | INPUT_ERRORS)


# --------------------------------------------------------------------------- torch.save values

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
           torch.int32, torch.uint8, torch.bool, torch.complex64]  # fmt: skip
_DIMS = st.sampled_from([0, 1, 2, 15, 16, 17, 63, 64, 65])


@st.composite
def _tensors(draw) -> torch.Tensor:
    dtype = draw(st.sampled_from(_DTYPES))
    shape = draw(st.lists(_DIMS, max_size=4))
    # Expanded from one element: any shape, tiny storage (zero strides).
    t = torch.ones((), dtype=dtype).expand(shape)
    numel = 1
    for d in shape:
        numel *= d
    if numel <= 1 << 16 and draw(st.booleans()):
        t = t.contiguous()
    return t


_LEAVES = _tensors() | st.none() | st.integers() | st.floats() | st.text(max_size=4)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=6,
)


def _expected_codes(value, signature) -> set[int]:
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(t, torch.Tensor) for t in items):
        return {EXIT_CODES["input_unreadable"]}
    if len(items) != len(signature):
        return {EXIT_CODES["input_mismatch"]}
    names = {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long"}
    for t, (dtype, ranges) in zip(items, signature, strict=True):
        if names.get(t.dtype) != dtype or t.dim() != len(ranges):
            return {EXIT_CODES["input_mismatch"]}
        if any(not lo <= n <= hi for n, (lo, hi) in zip(t.shape, ranges, strict=True)):
            return {EXIT_CODES["input_mismatch"]}
    return {EXIT_CODES["ok"]}


@FUZZ
@given(value=_VALUES)
@example(value=())
@example(value=[[torch.zeros(1, 16, 64)]])
@example(value=(torch.zeros(1, 16, 64), None))
@example(value={"x": torch.zeros(1, 16, 64)})
@example(value=torch.zeros(1, 16, 64, dtype=torch.float64))
@example(value=torch.ones(()).expand(2**20, 2**20, 64))
def test_wrong_values(loader_bin, ops_library, package, work, signature, value) -> None:
    rc, stderr, out, _ = _run(loader_bin, ops_library, package, work, input=_saved(value))
    _check(rc, stderr, out, _expected_codes(value, signature))


class _Rebuilt:
    """Pickles as torch.save pickles a tensor, with any sizes, strides and offset.

    torch.save records those separately from the storage, so a file can claim
    a tensor far larger than the data it holds.
    """

    def __init__(self, numel: int, offset: int, size: list[int], stride: list[int]) -> None:
        data = torch.zeros(numel)
        self.storage = torch.storage.TypedStorage(
            wrap_storage=data.untyped_storage(), dtype=data.dtype, _internal=True
        )
        self.args = (offset, tuple(size), tuple(stride))

    def __reduce_ex__(self, protocol):
        return (
            torch._utils._rebuild_tensor_v2,
            (self.storage, *self.args, False, collections.OrderedDict()),
        )


_HUGE = st.sampled_from([-1, 2**31, 2**40, 2**62, 2**63 - 1])


@FUZZ
@given(
    numel=st.integers(0, 128),
    offset=st.integers(0, 64) | _HUGE,
    size=st.lists(st.integers(0, 70) | _HUGE, max_size=4),
    stride=st.lists(st.integers(0, 70) | _HUGE, max_size=4),
)
@example(numel=4, offset=0, size=[1, 16, 64], stride=[1024, 64, 1])
@example(numel=4, offset=0, size=[2**40, 2**40, 64], stride=[0, 0, 0])
@example(numel=4, offset=2**60, size=[1, 16, 64], stride=[1024, 64, 1])
@example(numel=4, offset=0, size=[1, -16, 64], stride=[1024, 64, 1])
def test_declared_sizes_beyond_the_data(
    loader_bin, ops_library, package, work, numel, offset, size, stride
) -> None:
    fuzzed = _saved((_Rebuilt(numel, offset, size, stride),))
    rc, stderr, out, _ = _run(loader_bin, ops_library, package, work, input=fuzzed)
    _check(rc, stderr, out, {0} | INPUT_ERRORS)
    if rc == 0:
        # Only a tensor that fits its storage and the model's signature runs.
        assert size[2:] == [64] and len(size) == 3, (size, stride)


# --------------------------------------------------------------------------- raw pickles

_OPS = [b"]", b")", b"}", b"(", b"t", b"\x85", b"\x86", b"\x87", b"a", b"e", b"s", b"u",
        b"l", b"d", b"b", b"R", b"Q", b"0", b"1", b"2", b"N", b"K\x05", b"M\xff\xff",
        b"q\x00", b"h\x00", b"q\x01", b"h\x01", b"h\x07", b"X\x01\x00\x00\x00a",
        b"X\xff\xff\xff\x7f", b"ctorch._utils\n_rebuild_tensor_v2\n",
        b"ccollections\nOrderedDict\n", b"ctorch\nFloatStorage\n", b"\x94", b"I1\n"]  # fmt: skip


def _zip_with_pickle(pickle: bytes) -> bytes:
    # The container of an empty torch.save list, with its data.pkl replaced.
    src = zipfile.ZipFile(io.BytesIO(_saved([])))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, pickle if name.endswith("data.pkl") else src.read(name))
    return buf.getvalue()


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(_OPS), st.integers(1, 3000)), max_size=12))
@example([(b"]", 1_000_000), (b"a", 999_999)])  # a list nested a million deep
@example([(b")", 1), (b"\x85", 20_000)])  # a tuple nested 20,000 deep
@example([(b"]", 1), (b"q\x00", 1), (b"h\x00", 1), (b"a", 1)])  # a list holding itself
def test_raw_pickles(loader_bin, ops_library, package, work, ops) -> None:
    pickle = b"\x80\x02" + b"".join(op * count for op, count in ops) + b"."
    rc, stderr, out, _ = _run(
        loader_bin, ops_library, package, work, input=_zip_with_pickle(pickle)
    )
    # No tensor can come out of these, so no run either.
    _check(rc, stderr, out, INPUT_ERRORS)


# --------------------------------------------------------------------------- manifests

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=8,
)  # fmt: skip
_KEYS = ["format", "package", "op_libraries", "torch_version", "target", "isa", "cpu_features",
         "device", "extra"]  # fmt: skip


@st.composite
def _manifests(draw, base: bytes) -> bytes:
    if draw(st.booleans()):
        return draw(_mutations(base))
    manifest = json.loads(base)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(_KEYS))
        if draw(st.booleans()):
            manifest.pop(key, None)
        else:
            manifest[key] = draw(_JSON)
    return json.dumps(manifest).encode()


def _checked_fields(text: bytes) -> tuple | None:
    """What the loader compares, or None where Python reads no such manifest."""
    try:
        m = json.loads(text)
        return (
            m["format"],
            m["package"]["sha256"],
            sorted(lib["sha256"] for lib in m["op_libraries"]),
            m["torch_version"].split("+")[0],
            m["target"],
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _check_manifest_run(loader_bin, ops_library, package, work, fuzzed: bytes) -> None:
    base = (package.parent / "manifest.json").read_bytes()
    rc, stderr, out, paths = _run(loader_bin, ops_library, package, work, manifest=fuzzed)
    line = _check(rc, stderr, out, {0} | INTEGRITY)
    if rc == 0:
        # Accepted only if what is checked is what the export wrote.
        assert _checked_fields(fuzzed) == _checked_fields(base), fuzzed
    else:
        assert str(paths["manifest"]) in line


@FUZZ
@given(data=st.data())
def test_malformed_manifests(loader_bin, ops_library, package, work, data) -> None:
    base = (package.parent / "manifest.json").read_bytes()
    fuzzed = data.draw(_manifests(base), label="manifest")
    _check_manifest_run(loader_bin, ops_library, package, work, fuzzed)


# Found by the test above or written for what a JSON reader tends to get wrong.
_MANIFEST_EDITS = {
    "nul_as_whitespace": lambda m: m.replace(b"{\n", b"{\x00", 1),
    "nested_deep": lambda m: b'{"a":' * 100_000,
    "invalid_utf8": lambda m: m.replace(b'"cpu"', b'"c\xffu"'),
    "surrogate_escape": lambda m: m.replace(b'"cpu"', b'"\\ud800"'),
    "leading_zero": lambda m: m.rstrip().removesuffix(b"}") + b', "n": 01}',
    "duplicate_member": lambda m: m.rstrip().removesuffix(b"}") + b', "device": "cpu"}',
    "trailing_comma": lambda m: m.rstrip().removesuffix(b"}") + b",}",
    "many_members": lambda m: b"{" + b",".join(b'"k%d": 0' % i for i in range(50_000)) + b"}",
}


@pytest.mark.parametrize("edit", sorted(_MANIFEST_EDITS))
def test_manifest_regressions(loader_bin, ops_library, package, work, edit: str) -> None:
    base = (package.parent / "manifest.json").read_bytes()
    fuzzed = _MANIFEST_EDITS[edit](base)
    assert fuzzed != base
    # Each edit makes text that is not one unambiguous JSON manifest (a duplicate member is read
    # differently by different readers): every one must be refused, none accepted.
    rc, stderr, out, paths = _run(loader_bin, ops_library, package, work, manifest=fuzzed)
    line = _check(rc, stderr, out, INTEGRITY)
    assert rc == EXIT_CODES["integrity"], (rc, stderr)
    assert str(paths["manifest"]) in line and "malformed" in line, line


# --------------------------------------------------------------------------- weights files

_WEIGHTS_TENSOR_KEYS = ["name", "dtype", "shape", "offset", "index", "extra"]
_WEIGHTS_VALUES = st.one_of(
    _JSON,
    st.sampled_from(["Float", "Int", "Half", "Double", "Bool", "Byte", "Complex"]),
    st.lists(st.integers(-1, 2**63), max_size=4),
    st.integers(-1, 2**64 + 1),
)


@st.composite
def _weights_manifests(draw, base: bytes) -> bytes:
    """weights.json of //deploy:retrained_weights, mutated: bytes, or its entries and members."""
    if draw(st.booleans()):
        return draw(_mutations(base))
    m = json.loads(base)
    for _ in range(draw(st.integers(1, 3))):
        entries = m["constants"] + [t for o in m["custom_objects"] for t in o["tensors"]]
        kind = draw(st.sampled_from(["member", "drop", "duplicate", "swap_offsets", "top"]))
        if kind == "member" and entries:
            draw(st.sampled_from(entries))[draw(st.sampled_from(_WEIGHTS_TENSOR_KEYS))] = draw(
                _WEIGHTS_VALUES
            )
        elif kind == "drop" and m["constants"]:
            m["constants"].pop(draw(st.integers(0, len(m["constants"]) - 1)))
        elif kind == "duplicate" and m["constants"]:
            m["constants"].append(dict(draw(st.sampled_from(m["constants"]))))
        elif kind == "swap_offsets" and len(entries) > 1:
            a, b = draw(st.lists(st.sampled_from(entries), min_size=2, max_size=2, unique_by=id))
            a["offset"], b["offset"] = b.get("offset"), a.get("offset")
        else:
            key = draw(
                st.sampled_from(["format", "package", "blob", "constants", "custom_objects"])
            )
            if draw(st.booleans()):
                m.pop(key, None)
            else:
                m[key] = draw(_JSON)
            # The lists the other mutations edit may be gone or no lists now.
            break
    return json.dumps(m).encode()


def _layout(text: bytes) -> tuple | None:
    """What of a weights.json must match the package for the loader to take it."""
    try:
        m = json.loads(text)
        return (
            m["package"]["sha256"],
            m["blob"]["sha256"],
            sorted((c["name"], c["dtype"], c["shape"]) for c in m["constants"]),
            sorted(
                (
                    o["name"],
                    o["class"],
                    sorted((t["index"], t["dtype"], t["shape"]) for t in o["tensors"]),
                )
                for o in m["custom_objects"]
            ),
        )
    except (ValueError, KeyError, TypeError):
        return None


@FUZZ
@given(data=st.data())
def test_malformed_weights_manifests(
    loader_bin, ops_library, package, retrained_weights, work, data
) -> None:
    """The loader with --weights and a mutated (unsigned) weights.json beside the real weights.bin:
    exit 0 or 10, one line, nothing left behind; taken only with the package's own layout."""
    base = (retrained_weights / "weights.json").read_bytes()
    fuzzed = data.draw(_weights_manifests(base), label="weights.json")
    extra = ("--weights", str(retrained_weights / "weights.bin"), "--weights-manifest",
             "{weights_manifest}")  # fmt: skip
    rc, stderr, out, paths = _run(
        loader_bin, ops_library, package, work, extra, weights_manifest=fuzzed
    )
    line = _check(rc, stderr, out, {0} | INTEGRITY)
    if rc == 0:
        assert _layout(fuzzed) == _layout(base), fuzzed
    else:
        assert str(paths["weights_manifest"]) in line or "does not fit the package" in line, line
