"""The loader against crafted files: each case is a file (or a command line)
an attacker or an accident could hand it, with the one line and the exit code
`loader --help` promises, no memory over-read, nothing written outside the
loader's private folder and no temporary file left behind."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import EXIT_CODES, child_env, loader_error_lines

TIMEOUT_S = 120


def _argv(pkg: Path, out: Path, **files: Path | str) -> list[str]:
    paths = {
        "ops": pkg / "libmy_ops.so",
        "package": pkg / "model.pt2",
        "input": pkg / "sample_input.pt",
        "output": out,
    } | files
    argv = []
    for flag, value in paths.items():
        argv += [f"--{flag}", str(value)]
    return argv


def _run(
    loader: str,
    argv: list[str],
    tmp_path: Path,
    stdout: int | None = subprocess.PIPE,
    preexec_fn=None,
) -> subprocess.CompletedProcess:
    scratch = tmp_path / "tmpdir"
    try:
        return subprocess.run(
            [loader, *argv],
            env=child_env(scratch),
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=preexec_fn,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loader did not finish within {TIMEOUT_S}s")


def _refused(proc: subprocess.CompletedProcess, tmp_path: Path, code: str, phrase: str) -> str:
    """The one error line of a refusal with `code`, which must contain `phrase`."""
    lines = loader_error_lines(proc.stderr)
    assert proc.returncode == EXIT_CODES[code], (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loader: error: "), proc.stderr
    assert phrase in lines[0], proc.stderr
    assert os.listdir(tmp_path / "tmpdir") == [], "temporary files left behind"
    return lines[0]


def _rezip(src: Path, dst: Path, replace: dict[str, bytes | None]) -> None:
    """`src` rewritten to `dst`, entries stored, with the entries whose name ends with a key of
    `replace` replaced by its bytes (or dropped, for None)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            for suffix, new in replace.items():
                if info.filename.endswith(suffix):
                    data = new
            if data is not None:
                zout.writestr(info.filename, data)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# 1. A storage record shorter than data.pkl declares.


@pytest.mark.parametrize("size", [16, 0])
@pytest.mark.parametrize("flag", ["input", "expect"])
def test_a_storage_record_shorter_than_declared_is_refused(
    loader_bin: str, pkg: Path, tmp_path: Path, size: int, flag: str
) -> None:
    # data.pkl still declares the 1x16x64 float tensor (4096 bytes).
    short = tmp_path / "short.pt"
    _rezip(pkg / "sample_input.pt", short, {"/data/0": b"\0" * size})
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out, **{flag: short}), tmp_path)
    what = "input file" if flag == "input" else "expected-output file"
    line = _refused(
        proc,
        tmp_path,
        "input_unreadable",
        f"storage record 'data/0' holds {size} bytes, data.pkl declares 4096",
    )
    assert f"{what} {short}" in line
    assert not out.exists()


# 2. Zip archives that two readers read differently.


def _eocd(data: bytes) -> int:
    at = data.rfind(b"PK\x05\x06")
    assert at >= 0
    return at


def _two_directory_package(src: Path, dst: Path, extra_name: str, extra_size: int) -> None:
    """`src` plus a second central directory holding one more entry, reachable only through a
    zip64 locator and record; the classic end record (no field saturated) still points at the
    clean directory, and names the same count."""
    data = src.read_bytes()
    eocd = _eocd(data)
    count, cd_size, cd_offset = struct.unpack_from("<HII", data, eocd + 10)
    body = bytearray(data[:eocd])
    extra_offset = len(body)
    name = extra_name.encode()
    payload = b"x" * extra_size
    body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, 0,
                        len(payload), len(payload), len(name), 0) + name + payload  # fmt: skip
    cd2_offset = len(body)
    body += data[cd_offset : cd_offset + cd_size]
    body += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, 0,
                        len(payload), len(payload), len(name), 0, 0, 0, 0, 0,
                        extra_offset) + name  # fmt: skip
    cd2_size = len(body) - cd2_offset
    record_at = len(body)
    body += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0,
                        count + 1, count + 1, cd2_size, cd2_offset)  # fmt: skip
    body += struct.pack("<IIQI", 0x07064B50, 0, record_at, 1)
    body += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, cd_size, cd_offset, 0)
    dst.write_bytes(bytes(body))


def test_a_zip64_record_that_disagrees_cannot_smuggle_an_entry(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    crafted = pkg / "crafted.pt2"
    _two_directory_package(
        pkg / "model.pt2",
        crafted,
        "model/data/aotinductor/model/../../../../ESCAPED.txt",
        4,
    )
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, ["--no-verify", *_argv(pkg, out, package=crafted)], tmp_path)
    _refused(proc, tmp_path, "package_corrupt", "zip64 end record disagrees")
    assert not any(p.name == "ESCAPED.txt" for p in tmp_path.rglob("*")), "an entry escaped"


def test_a_zip64_record_cannot_hide_a_zip_bomb(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    crafted = pkg / "crafted.pt2"
    _two_directory_package(pkg / "model.pt2", crafted, "model/data/big.bin", 3 << 20)
    argv = [
        "--no-verify",
        "--max-unpacked-mib",
        "2",
        *_argv(pkg, tmp_path / "out.pt", package=crafted),
    ]
    _refused(
        _run(loader_bin, argv, tmp_path), tmp_path, "package_corrupt", "zip64 end record disagrees"
    )


def test_a_package_with_its_metadata_twice_is_refused(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # The second copy, without the input signature, would win in miniz's index.
    crafted = pkg / "twice.pt2"
    with zipfile.ZipFile(pkg / "model.pt2") as zin, zipfile.ZipFile(crafted, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
        name = next(n for n in zin.namelist() if n.endswith(".wrapper_metadata.json"))
        with pytest.warns(UserWarning, match="Duplicate name"):
            zout.writestr(name, json.dumps({"AOTI_DEVICE_KEY": "cpu"}))
    proc = _run(
        loader_bin, ["--no-verify", *_argv(pkg, tmp_path / "o.pt", package=crafted)], tmp_path
    )
    _refused(proc, tmp_path, "package_corrupt", "appears twice")


# 3. Ends that used to skip the cleanup.


def test_the_same_op_library_twice_is_a_usage_error(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy_of_libmy_ops.so"
    shutil.copyfile(pkg / "libmy_ops.so", copy)
    for second in (pkg / "libmy_ops.so", copy):
        argv = ["--ops", str(second), *_argv(pkg, tmp_path / "out.pt")]
        _refused(_run(loader_bin, argv, tmp_path), tmp_path, "usage", "is the same library as")


def test_a_model_that_aborts_while_it_loads_ends_in_one_line(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # The model .so replaced by a copy of the op library: its TORCH_LIBRARY block registers the
    # namespace a second time, which LibTorch reports by throwing from a static initialiser.
    crafted = pkg / "ops_as_model.pt2"
    _rezip(pkg / "model.pt2", crafted, {".wrapper.so": (pkg / "libmy_ops.so").read_bytes()})
    proc = _run(
        loader_bin, ["--no-verify", *_argv(pkg, tmp_path / "o.pt", package=crafted)], tmp_path
    )
    line = _refused(proc, tmp_path, "package_corrupt", f"cannot load package {crafted}: ")
    assert "Only a single TORCH_LIBRARY" in line


def test_a_libtorch_error_in_an_op_library_is_exit_3(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # A second copy of libc10.so registers keys the loader's own copy has registered.
    libc10 = tmp_path / "libc10.so"
    shutil.copyfile(Path(os.environ["LIBTORCH_LIB"]).with_name("libc10.so"), libc10)
    argv = ["--no-verify", *_argv(pkg, tmp_path / "o.pt", ops=libc10)]
    _refused(
        _run(loader_bin, argv, tmp_path),
        tmp_path,
        "ops_library",
        f"cannot load op library {libc10}: ",
    )


def test_a_closed_stdout_is_an_error_not_a_signal(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        argv = [*_argv(pkg, tmp_path / "out.pt"), "--bench", "3"]
        proc = _run(loader_bin, argv, tmp_path, stdout=write_end)
    finally:
        os.close(write_end)
    _refused(proc, tmp_path, "other", "cannot write to standard output: Broken pipe")


def test_a_closed_stderr_keeps_the_exit_code(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [loader_bin, *_argv(pkg, tmp_path / "out.pt", input=tmp_path / "missing.pt")],
            env=child_env(tmp_path / "tmpdir"),
            stdout=subprocess.DEVNULL,
            stderr=write_end,
            timeout=TIMEOUT_S,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_CODES["input_unreadable"]
    assert os.listdir(tmp_path / "tmpdir") == []


def test_a_file_size_limit_is_an_error_not_a_signal(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    limit = 512 << 10
    assert (pkg / "model.pt2").stat().st_size > limit

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = _run(loader_bin, _argv(pkg, tmp_path / "out.pt"), tmp_path, preexec_fn=limit_file_size)
    _refused(proc, tmp_path, "other", "File too large")


def _private_folders(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir() if p.name.startswith("my_ops_loader."))


def test_folders_of_killed_loaders_are_removed_at_start(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    base = tmp_path / "tmpdir"
    base.mkdir()
    # One left by a loader killed with SIGKILL, mid-run.
    killed = subprocess.Popen(
        [loader_bin, *_argv(pkg, tmp_path / "o.pt"), "--runs", "1000000"],
        env=child_env(base),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not _private_folders(base) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    left = _private_folders(base)
    assert len(left) == 1, left
    # One whose loader is still running: its lock is held.
    live = base / "my_ops_loader.LIVE00"
    live.mkdir()
    holder = open(live / "lock", "w")  # noqa: SIM115
    fcntl.flock(holder, fcntl.LOCK_EX)
    # Not ours to judge: another user's name pattern, or not a folder.
    (base / "my_ops_loader.FILE00").write_text("x")
    try:
        proc = _run(loader_bin, _argv(pkg, tmp_path / "out.pt"), tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert _private_folders(base) == ["my_ops_loader.FILE00", "my_ops_loader.LIVE00"]
    finally:
        holder.close()


# 4. Output paths.


def test_an_output_that_is_not_a_regular_file_is_refused(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = _run(loader_bin, _argv(pkg, fifo), tmp_path)
    _refused(proc, tmp_path, "output_unwritable", "exists and is not a regular file")
    assert fifo.is_fifo()


@pytest.mark.parametrize("victim", ["input", "package", "manifest", "ops", "expect"])
def test_an_output_that_is_a_file_the_run_reads_is_refused(
    loader_bin: str, pkg: Path, tmp_path: Path, victim: str
) -> None:
    files = {
        "input": pkg / "sample_input.pt",
        "package": pkg / "model.pt2",
        "manifest": pkg / "manifest.json",
        "ops": pkg / "libmy_ops.so",
        "expect": pkg / "expected_output.pt",
    }
    before = _sha256(files[victim])
    argv = _argv(pkg, files[victim], manifest=files["manifest"], expect=files["expect"])
    proc = _run(loader_bin, argv, tmp_path)
    _refused(proc, tmp_path, "output_unwritable", "is a file this run reads")
    assert _sha256(files[victim]) == before


def test_an_output_name_as_long_as_the_folder_allows(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    out = tmp_path / ("o" * 255)
    proc = _run(loader_bin, _argv(pkg, out), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()


# 5. One line, the right code.


def test_the_models_own_input_check_gives_one_line(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # Without the signature in the metadata (both of its copies, the wrapper's and the
    # kernels'), the loader cannot check the input; AOTI's runtime check refuses the float64
    # tensor and prints its reason on stderr.
    crafted = pkg / "no_signature.pt2"
    replace = {}
    with zipfile.ZipFile(pkg / "model.pt2") as z:
        for name in z.namelist():
            if name.endswith("_metadata.json"):
                metadata = json.loads(z.read(name))
                del metadata["my_ops.inputs"]
                replace[name] = json.dumps(metadata).encode()
    assert len(replace) == 2, replace
    _rezip(pkg / "model.pt2", crafted, replace)
    double = tmp_path / "double.pt"
    torch.save(tuple(t.double() for t in torch.load(pkg / "sample_input.pt")), double)
    argv = ["--no-verify", *_argv(pkg, tmp_path / "o.pt", package=crafted, input=double)]
    proc = _run(loader_bin, argv, tmp_path)
    line = _refused(proc, tmp_path, "input_mismatch", "model run failed: input_handles[0]")
    assert "API call failed" not in line


def test_a_path_with_a_newline_cannot_forge_a_line(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    forged = tmp_path / "x\nloader: error: forged\x1b[2J"
    proc = _run(loader_bin, _argv(pkg, tmp_path / "o.pt", input=forged), tmp_path)
    _refused(proc, tmp_path, "input_unreadable", "x\\nloader: error: forged\\x1b[2J")
    assert "\x1b" not in proc.stderr


def test_a_repeated_flag_is_a_usage_error(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    for flag in ("--package", "--output"):
        argv = [*_argv(pkg, tmp_path / "o.pt"), flag, str(tmp_path / "other")]
        proc = _run(loader_bin, argv, tmp_path)
        assert proc.returncode == EXIT_CODES["usage"], proc.stderr
        assert loader_error_lines(proc.stderr) == [f"loader: error: {flag} is given more than once"]


def test_a_noexec_temporary_folder_is_named(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    # A private mount namespace (as an unprivileged user namespace) with a noexec tmpfs.
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        # Only the kernel's namespace policy can stop this; the check itself is covered by
        # nothing else, so the reason is printed rather than the case passed.
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    noexec = tmp_path / "noexec"
    noexec.mkdir()
    script = 'mount -t tmpfs -o noexec tmpfs "$1" && shift && TMPDIR="$NOEXEC" exec "$@"'
    env = child_env(tmp_path / "tmpdir") | {"NOEXEC": str(noexec)}
    argv = ["unshare", "-rm", "sh", "-c", script, "sh", str(noexec), loader_bin]
    proc = subprocess.run(
        argv + _argv(pkg, tmp_path / "o.pt"), env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == EXIT_CODES["other"], proc.stderr
    lines = loader_error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert f"the temporary folder {noexec} is on a file system mounted noexec" in lines[0]


@pytest.mark.parametrize("protocol", [3, 4, 5])
def test_another_pickle_protocol_is_named(
    loader_bin: str, pkg: Path, tmp_path: Path, protocol: int
) -> None:
    saved = tmp_path / "protocol.pt"
    torch.save(torch.load(pkg / "sample_input.pt"), saved, pickle_protocol=protocol)
    proc = _run(loader_bin, _argv(pkg, tmp_path / "o.pt", input=saved), tmp_path)
    _refused(proc, tmp_path, "input_unreadable", f"pickle protocol {protocol} is not supported")


def test_too_many_tensors_is_a_count_error(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    many = tmp_path / "many.pt"
    # Six pickle containers a tensor: 1000 of them are over the cap of 4096.
    torch.save(tuple(torch.zeros(1) for _ in range(1000)), many)
    proc = _run(loader_bin, _argv(pkg, tmp_path / "o.pt", input=many), tmp_path)
    _refused(proc, tmp_path, "input_mismatch", "holds more tensors than this loader reads")


# 6. Packages that would compile on the edge host.


@pytest.mark.parametrize("keep_model", [False, True])
def test_a_package_with_compile_flags_is_refused(
    loader_bin: str, pkg: Path, tmp_path: Path, keep_model: bool
) -> None:
    marker = tmp_path / "MARKER"
    flags = json.dumps({"compiler": f"touch {marker}; g++", "options": [f"; touch {marker}"]})
    with zipfile.ZipFile(pkg / "model.pt2") as z:
        so = next(n for n in z.namelist() if n.endswith(".wrapper.so"))
    stem = so.removesuffix(".wrapper.so")
    crafted = pkg / "sources.pt2"
    _rezip(pkg / "model.pt2", crafted, {} if keep_model else {".wrapper.so": None})
    with zipfile.ZipFile(crafted, "a") as z:
        z.writestr(f"{stem}.wrapper_compile_flags.json", flags)
    proc = _run(
        loader_bin, ["--no-verify", *_argv(pkg, tmp_path / "o.pt", package=crafted)], tmp_path
    )
    _refused(proc, tmp_path, "package_corrupt", "holds compiler flags")
    assert not marker.exists()


def test_a_package_of_sources_only_is_refused(loader_bin: str, pkg: Path, tmp_path: Path) -> None:
    crafted = pkg / "sources.pt2"
    _rezip(pkg / "model.pt2", crafted, {".wrapper.so": None})
    proc = _run(
        loader_bin, ["--no-verify", *_argv(pkg, tmp_path / "o.pt", package=crafted)], tmp_path
    )
    _refused(proc, tmp_path, "package_corrupt", "has no compiled AOTInductor model")


# 7. Input size and memory.


def _peak_rss_kib(loader_bin: str, argv: list[str], tmp_path: Path) -> tuple[int, int, str]:
    """The loader's exit code, peak RSS and stderr, measured in a process of its own."""
    measure = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", measure, loader_bin, *argv],
        env=child_env(tmp_path / "tmpdir"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    rc, rss = proc.stdout.split()
    return int(rc), int(rss), proc.stderr


def test_an_oversized_input_is_refused_by_its_size(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    sparse = tmp_path / "sparse.pt"
    with open(sparse, "wb") as f:
        f.truncate(1025 << 20)
    rc, rss_kib, stderr = _peak_rss_kib(
        loader_bin, _argv(pkg, tmp_path / "o.pt", input=sparse), tmp_path
    )
    assert rc == EXIT_CODES["input_unreadable"], stderr
    assert "is larger than 1073741824 bytes" in stderr
    # Refused before it is read: no more memory than refusing a missing file (LibTorch alone
    # is a few hundred MiB), where reading up to the cap costs a GiB.
    rc, missing_kib, stderr = _peak_rss_kib(
        loader_bin, _argv(pkg, tmp_path / "o.pt", input=tmp_path / "missing.pt"), tmp_path
    )
    assert rc == EXIT_CODES["input_unreadable"], stderr
    assert rss_kib - missing_kib < 64 << 10, (rss_kib, missing_kib)


def test_a_large_input_costs_about_its_size_in_memory(
    loader_bin: str, pkg: Path, tmp_path: Path
) -> None:
    # A valid torch.save file the model then refuses (wrong shape): the cost of reading it.
    size = 256 << 20
    big = tmp_path / "big.pt"
    torch.save(torch.zeros(size // 4), big)
    rc, big_kib, stderr = _peak_rss_kib(
        loader_bin, _argv(pkg, tmp_path / "o.pt", input=big), tmp_path
    )
    assert rc == EXIT_CODES["input_mismatch"], stderr
    rc, small_kib, stderr = _peak_rss_kib(loader_bin, _argv(pkg, tmp_path / "o.pt"), tmp_path)
    assert rc == 0, stderr
    extra = (big_kib - small_kib) * 1024 / size
    print(f"peak RSS {big_kib} KiB with a 256 MiB input, {small_kib} KiB with the sample: "
          f"{extra:.2f} x the input")  # fmt: skip
    assert extra < 2, extra
