"""The compile cache's folder rules, on fabricated entries: nothing here compiles.

What the export keys on, and a real hit and miss, are in test_export_cache_e2e.py.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from deploy.exporter.cache import Cache, bytecode_in, default_dir, digest


def _package(path: Path, content: bytes) -> str:
    path.write_bytes(content)
    return str(path)


def test_default_dir_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == str(tmp_path / "xdg" / "my_ops" / "inductor")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_dir() == str(tmp_path / "home" / ".cache" / "my_ops" / "inductor")


def test_digest_ignores_dict_order_but_not_values():
    assert digest({"a": 1, "b": [1, 2]}) == digest({"b": [1, 2], "a": 1})
    assert digest({"a": 1, "b": [1, 2]}) != digest({"a": 1, "b": [2, 1]})
    assert digest({"a": 1}) != digest({"a": "1"})


def test_a_stored_package_comes_back_byte_for_byte(tmp_path):
    content = os.urandom(4096)
    with Cache(str(tmp_path / "c")) as cache:
        assert cache.get_package("k1") is None
        cache.put_package("k1", _package(tmp_path / "model.pt2", content))
        assert cache.get_package("k1") == content
        assert cache.get_package("k2") is None
    entry = json.loads((tmp_path / "c" / "packages" / "k1" / "entry.json").read_text())
    assert entry["sha256"] == hashlib.sha256(content).hexdigest()
    assert entry["size"] == len(content)


@pytest.mark.parametrize("damage", ["flip", "truncate", "entry_garbage", "entry_missing"])
def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path, capsys, damage):
    content = b"x" * 1000
    root = tmp_path / "c"
    with Cache(str(root)) as cache:
        cache.put_package("k", _package(tmp_path / "model.pt2", content))
    entry = root / "packages" / "k"
    model = entry / "model.pt2"
    if damage == "flip":
        data = bytearray(model.read_bytes())
        data[500] ^= 1
        model.write_bytes(bytes(data))
    elif damage == "truncate":
        model.write_bytes(content[:999])
    elif damage == "entry_garbage":
        (entry / "entry.json").write_text("[1, 2")
    else:
        (entry / "entry.json").unlink()
    with Cache(str(root)) as cache:
        assert cache.get_package("k") is None
    assert "does not match its sha256" in capsys.readouterr().out
    # Gone, so the next export can store a good one in its place.
    assert not entry.exists()
    with Cache(str(root)) as cache:
        cache.put_package("k", _package(tmp_path / "model.pt2", content))
        assert cache.get_package("k") == content


def _store(root: str, key: str, content: bytes, package: str) -> None:
    with Cache(root) as cache:
        for _ in range(20):
            cache.put_package(key, package)
            got = cache.get_package(key)
            assert got == content, "a reader saw a partial or foreign entry"


def test_concurrent_stores_of_one_key_leave_one_whole_entry(tmp_path):
    content = os.urandom(1 << 20)
    package = _package(tmp_path / "model.pt2", content)
    root = str(tmp_path / "c")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_store, args=(root, "k", content, package)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert os.listdir(os.path.join(root, "packages")) == ["k"]
    with Cache(root) as cache:
        assert cache.get_package("k") == content


def _fill(root: Path, names: list[str], size: int) -> None:
    """Entries whose last use is in list order, oldest first."""
    now = time.time()
    for i, name in enumerate(names):
        path = root / "packages" / name
        path.mkdir(parents=True)
        (path / "model.pt2").write_bytes(b"\0" * size)
        stamp = path / ".last_used"
        stamp.touch()
        os.utime(stamp, (now - 1000 + i, now - 1000 + i))


def test_eviction_removes_the_least_recently_used_first(tmp_path):
    root = tmp_path / "c"
    _fill(root, ["a", "b", "c", "d"], 100_000)
    leftover = root / "packages" / ".tmp-killed"
    leftover.mkdir()
    (leftover / "model.pt2").write_bytes(b"\0" * 10)
    with Cache(str(root), max_bytes=250_000):
        pass
    # Two of four 100 kB entries fit; the oldest go, and a killed export's
    # temporary folder with them.
    assert sorted(os.listdir(root / "packages")) == ["c", "d"]


def test_a_hit_refreshes_an_entry_and_entries_in_use_stay(tmp_path):
    root = tmp_path / "c"
    _fill(root, ["a", "b", "c"], 100_000)
    for name in ("a", "b", "c"):
        entry = root / "packages" / name
        content = (entry / "model.pt2").read_bytes()
        (entry / "entry.json").write_text(
            json.dumps({"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)})
        )
    with Cache(str(root), max_bytes=150_000) as cache:
        assert cache.get_package("a") is not None  # the oldest, now the newest
    assert sorted(os.listdir(root / "packages")) == ["a"]
    # An entry the export used is kept even when it alone is over the bound.
    with Cache(str(root), max_bytes=1) as cache:
        cache.get_package("a")
    assert "a" in os.listdir(root / "packages")


def test_no_eviction_while_another_export_holds_the_cache(tmp_path):
    root = tmp_path / "c"
    _fill(root, ["a", "b"], 100_000)
    other = Cache(str(root), max_bytes=1)
    other.__enter__()
    try:
        with Cache(str(root), max_bytes=1):
            pass
        assert sorted(os.listdir(root / "packages")) == ["a", "b"]
    finally:
        other.__exit__(None, None, None)
    # The last one out evicts.
    assert os.listdir(root / "packages") == []


def test_toolchain_folders_are_per_key(tmp_path):
    parts_a = {"op_library_sha256": "aa", "torch": "2.14.1"}
    parts_b = {"op_library_sha256": "bb", "torch": "2.14.1"}
    with Cache(str(tmp_path / "c")) as cache:
        a = cache.toolchain_dir(parts_a)
        b = cache.toolchain_dir(parts_b)
        assert a == cache.toolchain_dir(dict(reversed(list(parts_a.items()))))
    assert a != b
    assert json.loads(Path(a, "key.json").read_text()) == parts_a
    for sub in ("inductor", "triton", "bin"):
        assert Path(b, sub).is_dir()


def test_an_unusable_cache_folder_fails_on_enter(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError):
        Cache(str(blocker / "c")).__enter__()


def _aoti_output(inductor: Path, name: str, size: int) -> Path:
    """A folder shaped like AOTInductor's output for one compile."""
    folder = inductor / name
    folder.mkdir(parents=True)
    (folder / "cwrapper.wrapper.cpp").write_text("// wrapper")
    (folder / "cwrapper.wrapper.so").write_bytes(b"\0" * size)
    (folder / "cwrapper").mkdir()
    (folder / "cwrapper" / "constants.bin").write_bytes(b"\0" * size)
    return folder


def test_compile_outputs_go_even_from_the_toolchain_in_use(tmp_path):
    root = tmp_path / "c"
    with Cache(str(root)) as cache:  # far under the bound
        toolchain = Path(cache.toolchain_dir({"op_library_sha256": "aa"}))
        inductor = toolchain / "inductor"
        output = _aoti_output(inductor, "cplt3mrccnmf3lzb", 100_000)
        # A kernel Inductor compiled to benchmark a tuning choice: reused later.
        kernel = inductor / "kw" / "ckwcmm72.main.so"
        kernel.parent.mkdir()
        kernel.write_bytes(b"\0" * 1000)
        (inductor / "fxgraph").mkdir()
        (inductor / "fxgraph" / "entry").write_bytes(b"\0" * 10)
    assert not output.exists()
    assert kernel.exists()
    assert (inductor / "fxgraph" / "entry").exists()
    assert (toolchain / "key.json").exists()


def test_compile_outputs_stay_while_another_export_holds_the_cache(tmp_path):
    root = tmp_path / "c"
    other = Cache(str(root))
    other.__enter__()
    try:
        with Cache(str(root)) as cache:
            inductor = Path(cache.toolchain_dir({"op_library_sha256": "aa"}), "inductor")
            # The other export's compile, still being zipped into its package.
            output = _aoti_output(inductor, "cbusy", 10)
        assert output.exists()
    finally:
        other.__exit__(None, None, None)
    assert not output.exists()


def _fake_module(root: Path, name: str, with_bytecode: bool) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    if with_bytecode:
        cache = root / name / "__pycache__"
        cache.mkdir()
        (cache / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")


@pytest.mark.parametrize("with_bytecode", [False, True])
def test_bytecode_goes_to_the_cache_unless_torch_has_its_own(monkeypatch, tmp_path, with_bytecode):
    # A fake "torch" first on sys.path, not imported: only where its bytecode is.
    _fake_module(tmp_path / "path", "torch", with_bytecode)
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    with bytecode_in(str(tmp_path / "cache")):
        inside = sys.dont_write_bytecode, sys.pycache_prefix
    assert inside == ((True, None) if with_bytecode else (False, str(tmp_path / "cache")))
    assert (sys.dont_write_bytecode, sys.pycache_prefix) == (True, None)


@pytest.mark.parametrize("cap", ["MY_OPS_CPUID_CAP", "ATEN_CPU_CAPABILITY"])
def test_a_native_key_follows_a_cap_on_the_cpu(monkeypatch, tmp_path, cap):
    # Under a cap, -march=native and Inductor's vector code see a lower tier than
    # /proc/cpuinfo lists: a package compiled without it must not be a hit with it.
    from deploy.exporter.cache_key import toolchain_parts

    library = tmp_path / "libmy_ops.so"
    library.write_bytes(b"not a library")
    monkeypatch.delenv("MY_OPS_CPUID_CAP", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)

    def key(isa):
        parts = toolchain_parts(
            device="cpu", isa=isa, target="linux-x86_64", op_library=str(library), cross=None
        )
        return digest(parts)

    keys = [key("native")]
    for tier in ("avx2", "avx512"):
        monkeypatch.setenv(cap, tier)
        keys.append(key("native"))
    assert len(set(keys)) == 3
