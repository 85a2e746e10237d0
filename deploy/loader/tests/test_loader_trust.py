"""What the loader trusts, and when: the bytes it verified are the bytes it
loads, whatever happens to the files afterwards; paths mean what a shell user
means by them; temporary files live exactly as long as the process; limits
hold before any work is done."""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import EXIT_CODES, absolute_from_env, child_env, error_lines

TIMEOUT_S = 120
# Virtual-memory cap for the loader, so that a regression that reads an
# endless file fails the test instead of exhausting the machine.
ADDRESS_SPACE_CAP = 16 << 30


def _cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))


def _test_file(env_name: str) -> Path:
    value = os.environ.get(env_name)
    if not value:
        pytest.fail(f"environment variable {env_name} must point at the file under test")
    return Path(os.path.realpath(absolute_from_env(value)))


def _argv(pkg: Path, out: Path, ops: str | None = None) -> list[str]:
    return [
        "--ops", ops or str(pkg / "libmy_ops.so"),
        "--package", str(pkg / "model.pt2"),
        "--input", str(pkg / "sample_input.pt"),
        "--output", str(out),
        "--expect", str(pkg / "expected_output.pt"),
    ]  # fmt: skip


def _run(
    loader: str,
    argv: list[str],
    tmp_path: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    scratch = tmp_path / "tmpdir"
    full_env = child_env(scratch) | (env or {})
    try:
        proc = subprocess.run(
            [loader, *argv],
            env=full_env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=_cap_address_space,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loader did not finish within {TIMEOUT_S}s")
    assert proc.returncode >= 0, f"loader killed by signal {-proc.returncode}: {proc.stderr}"
    assert os.listdir(scratch) == [], "temporary files left behind"
    return proc


def _assert_one_error(proc: subprocess.CompletedProcess, code: str, *needles: str) -> str:
    assert proc.returncode == EXIT_CODES[code], (proc.returncode, proc.stderr)
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loader: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _assert_ran(proc: subprocess.CompletedProcess, out: Path) -> None:
    assert proc.returncode == 0, proc.stderr
    assert "outputs match" in proc.stdout, proc.stdout
    assert out.is_file()


# --- the bytes that were verified are the bytes that load ---------------------


def test_files_swapped_after_verification_are_not_loaded(loader_bin, pkg, tmp_path) -> None:
    # Replacements staged in the same folder, so that rename() swaps them in
    # atomically, as an attacker with write access to the bundle would.
    foreign = pkg / "foreign.so"
    shutil.copyfile(_test_file("MY_OPS_FOREIGN_LIBRARY"), foreign)
    garbage = pkg / "garbage.pt2"
    garbage.write_bytes(b"PK\x03\x04" + b"\0" * 4096)
    marker = tmp_path / "foreign_code_ran"
    done = tmp_path / "swapped"
    env = {
        "LD_PRELOAD": str(_test_file("MY_OPS_SWAP_ON_DLOPEN")),
        "MY_OPS_SWAP": f"{foreign}={pkg / 'libmy_ops.so'};{garbage}={pkg / 'model.pt2'}",
        "MY_OPS_SWAP_DONE": str(done),
        "MY_OPS_FOREIGN_MARKER": str(marker),
    }
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out), tmp_path, env)
    # The swap really happened, while the loader was running.
    assert done.exists(), "the LD_PRELOAD shim never ran"
    assert (pkg / "model.pt2").read_bytes() == b"PK\x03\x04" + b"\0" * 4096
    assert not marker.exists(), "the loader loaded a library it had not verified"
    _assert_ran(proc, out)


def test_bare_ops_name_is_a_path_not_a_library_search(loader_bin, pkg, tmp_path) -> None:
    # dlopen("libmy_ops.so") would search LD_LIBRARY_PATH, not the current
    # folder whose file the manifest check hashed.
    elsewhere = tmp_path / "on_library_path"
    elsewhere.mkdir()
    shutil.copyfile(_test_file("MY_OPS_FOREIGN_LIBRARY"), elsewhere / "libmy_ops.so")
    marker = tmp_path / "foreign_code_ran"
    env = {
        "LD_LIBRARY_PATH": f"{elsewhere}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        "MY_OPS_FOREIGN_MARKER": str(marker),
    }
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out, ops="libmy_ops.so"), tmp_path, env, cwd=pkg)
    assert not marker.exists(), "--ops libmy_ops.so loaded a library from LD_LIBRARY_PATH"
    _assert_ran(proc, out)


def test_symlinked_package_is_refused(loader_bin, pkg, tmp_path) -> None:
    (pkg / "model.pt2").rename(pkg / "real.pt2")
    (pkg / "model.pt2").symlink_to(pkg / "real.pt2")
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out), tmp_path)
    _assert_one_error(proc, "package_missing", str(pkg / "model.pt2"), "symbolic link")
    assert not out.exists()


# --- the output -----------------------------------------------------------------


def test_output_never_follows_a_planted_symlink(loader_bin, pkg, tmp_path) -> None:
    # A fixed "OUT.tmp" name lets anyone who can write the output folder
    # redirect the write to any file the loader's user may write.
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    out = tmp_path / "out.pt"
    (tmp_path / "out.pt.tmp").symlink_to(victim)
    proc = _run(loader_bin, _argv(pkg, out), tmp_path)
    _assert_ran(proc, out)
    assert victim.read_bytes() == b"precious"
    assert torch.load(out)[0].shape == torch.load(pkg / "expected_output.pt")[0].shape
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.pt")) == [
        "out.pt",
        "out.pt.tmp",
    ], "only the output itself may be added"


# --- the extraction folder ------------------------------------------------------


def _mapped_files_under(pid: int, folder: Path) -> list[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return []
    paths = {line.split(maxsplit=5)[5] for line in maps.splitlines() if len(line.split()) == 6}
    return sorted(p for p in paths if p.startswith(str(folder)))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_extraction_folder_lives_until_exit_and_signals_clean_it(
    loader_bin, pkg, tmp_path, sig: int
) -> None:
    # CUDA packages load kernels lazily from the extracted files, so the
    # folder must outlive the first runs; nothing may outlive the process.
    scratch = tmp_path / "tmpdir"
    out = tmp_path / "out.pt"
    proc = subprocess.Popen(
        [loader_bin, *_argv(pkg, out), "--bench", "1000000"],
        env=child_env(scratch),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_cap_address_space,
    )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        mapped: list[str] = []
        while not any(p.endswith(".so") or p.endswith(".so (deleted)") for p in mapped):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the model was never mapped"
            time.sleep(0.1)
            mapped = _mapped_files_under(proc.pid, scratch)
        # Runs are under way (the bench loop runs until signalled).
        time.sleep(1.0)
        mapped = _mapped_files_under(proc.pid, scratch)
        assert proc.poll() is None
        assert mapped and not any(p.endswith(" (deleted)") for p in mapped), mapped
        assert all(os.path.exists(p) for p in mapped), mapped
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, (proc.returncode, stderr)
    assert os.listdir(scratch) == [], "the extraction folder outlived the process"
    assert not out.exists()


# --- zip checks, before torch sees the package ----------------------------------


def _repack(pkg: Path, extra: dict[str, bytes], compress: int = zipfile.ZIP_STORED) -> None:
    """Rewrites model.pt2 with extra entries (appended after the real ones)."""
    source = pkg / "model.pt2"
    data = source.read_bytes()
    with zipfile.ZipFile(source, "a", compression=compress) as z:
        for name, content in extra.items():
            z.writestr(zipfile.ZipInfo(name), content, compress_type=compress)
    assert source.read_bytes() != data


@pytest.mark.parametrize(
    "name",
    ["model/../../escape.so", "/etc/passwd_copy", "model\\data\\x.so", "model/./../x"],
)
def test_zip_entry_names_that_escape_are_refused(loader_bin, pkg, tmp_path, name: str) -> None:
    _repack(pkg, {name: b"x"})
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out), tmp_path)
    _assert_one_error(proc, "package_corrupt", str(pkg / "model.pt2"), "entry name")
    assert not out.exists()


def test_zip_bomb_is_refused_before_extraction(loader_bin, pkg, tmp_path) -> None:
    # 64 MiB of zeros deflate to about 64 KiB: the declared sizes decide.
    _repack(pkg, {"model/extra/zeros.bin": bytes(64 << 20)}, zipfile.ZIP_DEFLATED)
    assert (pkg / "model.pt2").stat().st_size < 8 << 20
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, [*_argv(pkg, out), "--max-unpacked-mib", "32"], tmp_path)
    _assert_one_error(proc, "package_corrupt", str(pkg / "model.pt2"), "--max-unpacked-mib")
    assert not out.exists()


# --- limits -----------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--threads", "--runners"])
def test_thread_counts_are_capped(loader_bin, pkg, tmp_path, flag: str) -> None:
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, [*_argv(pkg, out), flag, "100000"], tmp_path)
    line = _assert_one_error(proc, "usage", flag)
    assert re.search(r"<= \d+", line), line


def test_input_must_be_a_regular_file(loader_bin, pkg, tmp_path) -> None:
    out = tmp_path / "out.pt"
    argv = _argv(pkg, out)
    argv[argv.index("--input") + 1] = "/dev/zero"
    start = time.monotonic()
    proc = _run(loader_bin, argv, tmp_path)
    _assert_one_error(proc, "input_unreadable", "/dev/zero", "regular file")
    assert time.monotonic() - start < TIMEOUT_S / 2


def test_oversized_input_is_refused(loader_bin, pkg, tmp_path) -> None:
    big = tmp_path / "big.pt"
    with open(big, "wb") as f:
        f.truncate(3 << 20)
    out = tmp_path / "out.pt"
    argv = [*_argv(pkg, out), "--max-input-mib", "2"]
    argv[argv.index("--input") + 1] = str(big)
    proc = _run(loader_bin, argv, tmp_path)
    _assert_one_error(proc, "input_unreadable", str(big), "--max-input-mib")


# --- run by Bazel, as a newcomer would -------------------------------------------


def test_bazel_run_resolves_paths_and_finds_the_op_library(loader_bin, pkg, tmp_path) -> None:
    # `bazel run` starts the binary in its runfiles tree; the user's relative
    # paths are relative to BUILD_WORKING_DIRECTORY, and the op library is a
    # runfile, not a file beside bazel-bin/deploy/loader/loader.
    user_dir = tmp_path / "checkout" / "sub"
    (user_dir / "out").mkdir(parents=True)
    for f in pkg.iterdir():
        if f.name != "libmy_ops.so":
            shutil.copyfile(f, user_dir / "out" / f.name)
    runfiles_cwd = tmp_path / "runfiles_cwd"
    runfiles_cwd.mkdir()
    argv = [
        "--package", "out/model.pt2",
        "--input", "out/sample_input.pt",
        "--output", "out/o.pt",
        "--expect", "out/expected_output.pt",
    ]  # fmt: skip
    env = {"BUILD_WORKING_DIRECTORY": str(user_dir)}
    proc = _run(loader_bin, argv, tmp_path, env, cwd=runfiles_cwd)
    _assert_ran(proc, user_dir / "out" / "o.pt")
    assert os.listdir(runfiles_cwd) == []


# --- the kernels' tier (MY_OPS_CPU_ISA) -----------------------------------------


def test_a_cpu_tier_cap_it_cannot_honour_is_a_usage_error(loader_bin, pkg, tmp_path) -> None:
    out = tmp_path / "out.pt"
    proc = _run(loader_bin, _argv(pkg, out), tmp_path, env={"MY_OPS_CPU_ISA": "avx9000"})
    _assert_one_error(proc, "usage", "MY_OPS_CPU_ISA=avx9000: unknown tier")
    assert not out.exists()


def test_the_portable_tier_runs_the_package(loader_bin, pkg, tmp_path) -> None:
    out = tmp_path / "out.pt"
    _assert_ran(_run(loader_bin, _argv(pkg, out), tmp_path, env={"MY_OPS_CPU_ISA": "scalar"}), out)
