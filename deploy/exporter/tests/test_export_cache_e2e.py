"""The compile cache through real exports: two at once, a hit, and a changed op library.

It is also where a whole export run of the CLI is checked: the files a signed
export writes, the stages it prints and the folders it leaves (none). The other
tests share //deploy:signed_package and //deploy:default_package instead of
exporting.

One test, in order, because each step needs the cache the previous one left
(three untuned compiles of the default model, two of them concurrent: about
two minutes on 2 cores). Whether a compiler ran is read from the compiler wrapper's log
(MY_OPS_COMPILE_LOG), not from the exporter's own words.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from conftest import child_env, export_command
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from deploy.contract.package_contract import load as load_contract


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _export(out: Path, cache: Path, tmp: Path, *flags: str, **env: str) -> subprocess.Popen:
    # Untuned: what is cached and shared does not depend on the mode, and tuning would
    # add its candidate builds to each of the three compiles (the tuned default model is
    # //deploy:tuned_package, which weights_test runs).
    return subprocess.Popen(
        [
            *export_command(),
            "--out",
            str(out),
            "--cache-dir",
            str(cache),
            "--mode=no-autotune",
            *flags,
        ],
        env=child_env(tmp) | env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=1200)
    assert proc.returncode == 0, f"export failed:\n{out}\n{err}"
    return out


def _compile_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("compile ...")]
    assert len(lines) == 1, stdout
    return lines[0]


def _compiler_runs(log: Path) -> list[str]:
    """The wrapper's logged runs that build something (not `--version` queries)."""
    runs = log.read_text().splitlines() if log.exists() else []
    return [r for r in runs if " -c " in f" {r} " or " -shared " in f" {r} "]


def test_cache_is_shared_safely_and_keyed_on_the_op_library(
    tmp_path: Path, ops_library: str, signing_keys: Path
):
    cache = tmp_path / "cache"
    logs = {i: tmp_path / f"compile{i}.log" for i in (1, 2, 3)}

    # Two exports at once into an empty cache: both compile, both succeed, and
    # the cache holds one whole entry. The first profiles its compile, which
    # takes the wrapper's log for itself.
    signing_key = signing_keys / "signing_key.pem"
    first = [
        _export(tmp_path / "out0", cache, tmp_path / "tmp0", "--profile-compile"),
        _export(
            tmp_path / "out1",
            cache,
            tmp_path / "tmp1",
            "--signing-key",
            str(signing_key),
            MY_OPS_COMPILE_LOG=str(logs[1]),
        ),
    ]
    outputs = [_finish(p) for p in first]
    for out in outputs:
        assert _compile_line(out).endswith("cache miss"), out
    # A whole run: its stages, its last line the output folder, its files, and
    # nothing left in its temporary folder (no staging or Inductor folders).
    for stage, note in (("export", ""), ("compile", ", cache miss"), ("verify", "")):
        assert re.search(rf"^{stage} *\.\.\. \d+\.\ds{note}$", outputs[1], re.M), outputs[1]
    assert outputs[1].strip().splitlines()[-1] == str(tmp_path / "out1")
    contract = load_contract()
    # A CPU package: its weights beside it, signed with it.
    beside = ["weights.bin", "weights.json"]
    signed = ["manifest.sig", "weights.sig"]
    assert sorted(os.listdir(tmp_path / "out1")) == sorted(
        [*contract.export_files, *beside, *signed]
    )
    assert sorted(os.listdir(tmp_path / "out0")) == sorted([*contract.export_files, *beside])
    assert os.listdir(tmp_path / "tmp1") == []
    # Nor anything beside the output folders: no staging folder.
    assert sorted(os.listdir(tmp_path)) == ["cache", "compile1.log", "out0", "out1", "tmp0", "tmp1"]
    public_key = load_pem_public_key((signing_keys / "public_key.pem").read_bytes())
    # Raises InvalidSignature unless manifest.sig signs manifest.json's bytes.
    public_key.verify(
        (tmp_path / "out1" / "manifest.sig").read_bytes(),
        (tmp_path / "out1" / "manifest.json").read_bytes(),
    )
    assert any(".wrapper.cpp" in run for run in _compiler_runs(logs[1]))
    profile = outputs[0][outputs[0].index("compile profile") :].splitlines()
    steps = {line.split()[0]: line.split()[1:] for line in profile[1:] if line.startswith("  ")}
    for step in ("wrapper", "kernels", "link", "codegen"):
        assert step in steps, profile
    assert steps["wrapper"][2:4] == ["1", "run"], profile
    # A portable package's vector ISA is known: no test build of it (vec_isa.py).
    assert "isa" not in steps, profile
    entries = os.listdir(cache / "packages")
    assert len(entries) == 1, entries
    entry = cache / "packages" / entries[0]
    recorded = json.loads((entry / "entry.json").read_text())
    assert recorded["sha256"] == _sha256(entry / "model.pt2")
    assert recorded["sha256"] in {_sha256(tmp_path / f"out{i}" / "model.pt2") for i in range(2)}

    # The same model again: served from the cache, no compiler runs, and the
    # published package is the cached bytes (which the manifest vouches for).
    out = _finish(
        _export(tmp_path / "out2", cache, tmp_path / "tmp2", MY_OPS_COMPILE_LOG=str(logs[2]))
    )
    assert _compile_line(out).endswith("cache hit"), out
    assert _compiler_runs(logs[2]) == []
    assert _sha256(tmp_path / "out2" / "model.pt2") == recorded["sha256"]
    manifest = json.loads((tmp_path / "out2" / "manifest.json").read_text())
    assert recorded["sha256"] in json.dumps(manifest)

    # A different op library (same code, one more byte, so another sha256):
    # nothing cached for the first may serve it, Inductor's caches included.
    changed = tmp_path / "changed" / "libmy_ops.so"
    changed.parent.mkdir()
    shutil.copyfile(ops_library, changed)
    with open(changed, "ab") as f:
        f.write(b"\0")
    out = _finish(
        _export(
            tmp_path / "out3",
            cache,
            tmp_path / "tmp3",
            MY_OPS_LIBRARY=str(changed),
            MY_OPS_COMPILE_LOG=str(logs[3]),
        )
    )
    assert _compile_line(out).endswith("cache miss"), out
    runs = _compiler_runs(logs[3])
    assert any(".wrapper.cpp" in run for run in runs) and any(" -shared " in run for run in runs)
    assert len(os.listdir(cache / "packages")) == 2
    assert len(os.listdir(cache / "toolchains")) == 2
    manifest = json.loads((tmp_path / "out3" / "manifest.json").read_text())
    assert _sha256(changed) in json.dumps(manifest)
