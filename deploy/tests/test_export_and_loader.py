"""End-to-end: the default model's signed package (//deploy:signed_package),
checked from Python and from the C++ loader, including every documented loader
error."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import (
    EXIT_CODES,
    HOST_BUNDLE_FILES,
    MAX_BATCH,
    NO_VERIFY_WARNING,
    absolute_from_env,
    child_env,
    error_lines,
    loader_error_lines,
    run_loader,
)

from deploy.exporter.loading import load


@pytest.fixture(scope="module")
def eager():
    from deploy import default_model

    return default_model.make_model(max_batch=MAX_BATCH)


@pytest.fixture(scope="module")
def compiled(exported: Path, tmp_path_factory: pytest.TempPathFactory):
    import my_ops

    # The package calls into the op library, which must be loaded first.
    my_ops.load_library(os.environ["MY_OPS_LIBRARY"])
    tmp = tmp_path_factory.mktemp("aoti_extract")
    old_env, old_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(tmp), str(tmp)
    try:
        yield load(str(exported / "model.pt2"))
    finally:
        tempfile.tempdir = old_tempdir
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env


def test_sample_files_hold_tuples_of_tensors(exported: Path) -> None:
    # The exact list of files a signed export writes: test_export_cache_e2e.py.
    inputs = torch.load(exported / "sample_input.pt")
    expected = torch.load(exported / "expected_output.pt")
    assert isinstance(inputs, tuple) and all(isinstance(t, torch.Tensor) for t in inputs)
    assert isinstance(expected, tuple) and all(isinstance(t, torch.Tensor) for t in expected)


@pytest.mark.parametrize("batch", [1, 7, MAX_BATCH])
def test_python_parity(compiled, eager, batch: int) -> None:
    inputs = eager.make_inputs(batch)
    with torch.no_grad():
        want = eager.module(*inputs)
    got = compiled(*inputs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_python_parity_sample(compiled, eager, exported: Path) -> None:
    inputs = torch.load(exported / "sample_input.pt")
    expected = torch.load(exported / "expected_output.pt")
    with torch.no_grad():
        torch.testing.assert_close(eager.module(*inputs), expected[0])
    got = compiled(*inputs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    torch.testing.assert_close(got, expected[0], atol=1e-4, rtol=1e-4)


# --------------------------------------------------------------------------- C++ loader


def _loader(loader_bin, ops_library, tmp_path: Path, *args: str, ops: bool = True):
    tmp = tmp_path / "tmpdir"
    extra = ["--ops", ops_library] if ops else []
    proc = run_loader(loader_bin, [*extra, *args], tmp)
    leftovers = os.listdir(tmp)
    assert leftovers == [], f"temporary files left behind: {leftovers}"
    return proc


def test_loader_parity(loader_bin, ops_library, exported: Path, eager, tmp_path: Path) -> None:
    out = tmp_path / "out.pt"
    proc = _loader(
        loader_bin, ops_library, tmp_path,
        "--package", str(exported / "model.pt2"),
        "--input", str(exported / "sample_input.pt"),
        "--output", str(out),
        "--expect", str(exported / "expected_output.pt"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = torch.load(out)
    assert isinstance(got, tuple) and len(got) == 1
    inputs = torch.load(exported / "sample_input.pt")
    with torch.no_grad():
        torch.testing.assert_close(got[0], eager.module(*inputs), atol=1e-4, rtol=1e-4)
    assert not Path(str(out) + ".tmp").exists()


@pytest.mark.parametrize("batch", [1, 7, MAX_BATCH])
def test_loader_batches(loader_bin, ops_library, exported, eager, tmp_path, batch: int) -> None:
    inputs = eager.make_inputs(batch)
    torch.save(list(inputs), tmp_path / "in.pt")  # a list must work as well as a tuple
    proc = _loader(
        loader_bin, ops_library, tmp_path,
        "--package", str(exported / "model.pt2"),
        "--input", str(tmp_path / "in.pt"),
        "--output", str(tmp_path / "out.pt"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        want = eager.module(*inputs)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt")[0], want, atol=1e-4, rtol=1e-4)


def test_loader_concurrent_bench(loader_bin, ops_library, exported: Path, tmp_path: Path) -> None:
    proc = _loader(
        loader_bin, ops_library, tmp_path,
        "--package", str(exported / "model.pt2"),
        "--input", str(exported / "sample_input.pt"),
        "--output", str(tmp_path / "out.pt"),
        "--bench", "10", "--threads", "3", "--runners", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "p50" in proc.stdout and "p99" in proc.stdout


def _libtorch_dir(loader_bin: str) -> str:
    """A LibTorch lib folder in which every library's dependencies resolve.

    $LIBTORCH_LIB (a folder, or a file inside it) wins: under Bazel it names
    the merged LibTorch tree, where libtorch's relative RUNPATH also finds the
    CUDA libraries of the cu13x wheel. Otherwise use what the loader resolves.
    """
    value = os.environ.get("LIBTORCH_LIB")
    if value:
        path = absolute_from_env(value)
        return path if os.path.isdir(path) else os.path.dirname(path)
    proc = subprocess.run(["ldd", loader_bin], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name == "libtorch_cpu.so" and rest.startswith("/"):
            return os.path.dirname(rest.split(" (")[0])
    return str(Path(torch.__file__).parent / "lib")


def test_loader_default_ops_beside_executable(
    loader_bin, ops_library, exported: Path, tmp_path: Path
) -> None:
    # The edge bundle layout: loader and libmy_ops.so side by side, no --ops.
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy2(loader_bin, bundle / "loader")
    shutil.copy2(ops_library, bundle / "libmy_ops.so")
    env = child_env(tmp_path / "tmpdir")
    # A copied binary may lose a relative rpath; the bundle uses LD_LIBRARY_PATH too.
    torch_lib = _libtorch_dir(loader_bin)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [torch_lib, env.get("LD_LIBRARY_PATH")]))
    proc = subprocess.run(
        [str(bundle / "loader"),
         "--package", str(exported / "model.pt2"), "--input", str(exported / "sample_input.pt"),
         "--output", str(tmp_path / "o.pt"), "--expect", str(exported / "expected_output.pt")],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(tmp_path / "tmpdir") == []


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    files = {
        "wrong_shape": (torch.randn(1, 16, 32),),
        "wrong_dtype": (torch.randn(1, 16, 64, dtype=torch.float64),),
        "too_many": (torch.randn(1, 16, 64), torch.randn(1, 16, 64)),
        "too_few": (),
        "batch_too_big": (torch.randn(MAX_BATCH + 1, 16, 64),),
        "wrong_rank": (torch.randn(16, 64),),
        "not_tensors": {"x": 1},
    }
    paths = {}
    for name, value in files.items():
        paths[name] = tmp_path / f"{name}.pt"
        torch.save(value, paths[name])
    return paths


def _write_zip(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for n in names:
            z.writestr(n, b"x")
    return path


CASES = [
    # name, expected exit, a phrase of the error line (the cases that share an
    # exit code differ in it); how to build the arguments is below
    ("missing_package", "package_missing", "cannot open package"),
    ("not_a_zip", "package_corrupt", "not a zip"),
    ("truncated", "package_corrupt", "truncated"),
    ("zip_without_model", "package_corrupt", "AOTInductor model named 'model' inside"),
    ("torch_save_as_package", "package_corrupt", "AOTInductor model named 'model' inside"),
    ("missing_ops", "ops_library", "cannot open op library"),
    ("ops_not_a_library", "ops_library", "cannot load op library"),
    ("ops_without_my_ops", "ops_library", "the op libraries do not provide"),
    ("ops_not_in_manifest", "integrity", "is not listed in manifest"),
    ("missing_input", "input_unreadable", "cannot open input file"),
    ("garbage_input", "input_unreadable", "is not a torch.save file"),
    ("not_tensors", "input_unreadable", "must hold a tensor or a tuple/list of tensors"),
    ("wrong_shape", "input_mismatch", "dim 2 is 32, must be 64"),
    ("wrong_dtype", "input_mismatch", "dtype Double, expected Float"),
    ("too_many", "input_mismatch", "model takes 1 input(s), got 2"),
    ("too_few", "input_mismatch", "model takes 1 input(s), got 0"),
    ("batch_too_big", "input_mismatch", f"dim 0 is {MAX_BATCH + 1}, must be 1..{MAX_BATCH}"),
    ("wrong_rank", "input_mismatch", "rank 2, expected 3"),
    ("output_unwritable", "output_unwritable", "cannot write output"),
    ("expect_mismatch", "expect_mismatch", "differs from"),
    ("no_args", "usage", "--package is required"),
    ("unknown_flag", "usage", "unknown argument '--frobnicate'"),
    ("bad_bench", "usage", "--bench needs an integer"),
    ("runs_and_bench", "usage", "--bench and --runs exclude each other"),
    ("exact_without_expect", "usage", "--exact needs --expect"),
]

# These check what happens when a library gets past the manifest check, so
# they skip it; "ops_not_in_manifest" shows that the check stops them first.
NO_VERIFY_CASES = {"ops_not_a_library", "ops_without_my_ops"}


@pytest.mark.parametrize("case, code, phrase", CASES)
def test_loader_errors(
    loader_bin, ops_library, exported: Path, tmp_path: Path, case, code, phrase
) -> None:
    package = exported / "model.pt2"
    sample = exported / "sample_input.pt"
    out = tmp_path / "out.pt"
    ops = ["--ops", ops_library]
    bad = _bad_inputs(tmp_path)
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"this is not a zip file at all")

    def args(pkg=package, inp=sample, output=out, ops=ops, extra=()):
        return [*ops, "--package", str(pkg), "--input", str(inp), "--output", str(output), *extra]

    if case == "missing_package":
        argv = args(pkg=tmp_path / "nope.pt2")
    elif case == "not_a_zip":
        argv = args(pkg=garbage)
    elif case == "truncated":
        data = package.read_bytes()
        (tmp_path / "t.pt2").write_bytes(data[: len(data) // 2])
        argv = args(pkg=tmp_path / "t.pt2")
    elif case == "zip_without_model":
        argv = args(pkg=_write_zip(tmp_path / "z.pt2", ["model/archive_format", "model/x.txt"]))
    elif case == "torch_save_as_package":
        argv = args(pkg=sample)
    elif case == "missing_ops":
        argv = args(ops=["--ops", str(tmp_path / "libnothing.so")])
    elif case == "ops_not_a_library":
        argv = args(ops=["--ops", str(garbage)])
    elif case in ("ops_without_my_ops", "ops_not_in_manifest"):
        # A real shared library that registers nothing the package needs.
        # Its real path: the loader opens nothing through a symbolic link.
        libc10 = Path(os.path.realpath(Path(torch.__file__).parent / "lib" / "libc10.so"))
        argv = args(ops=["--ops", str(libc10)])
    elif case == "missing_input":
        argv = args(inp=tmp_path / "nope.pt")
    elif case == "garbage_input":
        argv = args(inp=garbage)
    elif case in bad:
        argv = args(inp=bad[case])
    elif case == "output_unwritable":
        argv = args(output=garbage / "out.pt")
        out = garbage / "out.pt"
    elif case == "expect_mismatch":
        torch.save((torch.zeros(1, 16, 64),), tmp_path / "zeros.pt")
        argv = args(extra=["--expect", str(tmp_path / "zeros.pt")])
    elif case == "no_args":
        argv = []
    elif case == "unknown_flag":
        argv = args(extra=["--frobnicate"])
    elif case == "bad_bench":
        argv = args(extra=["--bench", "ten"])
    elif case == "runs_and_bench":
        argv = args(extra=["--bench", "2", "--runs", "2"])
    elif case == "exact_without_expect":
        argv = args(extra=["--exact"])
    else:
        raise AssertionError(case)
    if case in NO_VERIFY_CASES:
        argv.append("--no-verify")

    proc = _loader(loader_bin, ops_library, tmp_path, *argv, ops=False)
    assert proc.returncode == EXIT_CODES[code], (proc.returncode, proc.stderr)
    assert (NO_VERIFY_WARNING in proc.stderr) == (case in NO_VERIFY_CASES), proc.stderr
    lines = loader_error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("loader: error: "), proc.stderr
    # Without this test's folder, whose name holds the case's ("..._truncated_p0").
    assert phrase in lines[0].replace(str(tmp_path), "<tmp>"), proc.stderr
    if case != "expect_mismatch":  # the output is valid there; only the comparison failed
        assert not out.exists()
    assert not Path(str(out) + ".tmp").exists()


def test_loader_help_documents_exit_codes(loader_bin) -> None:
    proc = subprocess.run([loader_bin, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for code in EXIT_CODES.values():
        assert f"\n  {code}  " in proc.stdout


def test_loader_has_no_libpython(loader_bin) -> None:
    proc = subprocess.run(["readelf", "-d", loader_bin], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    needed = [line for line in proc.stdout.splitlines() if "(NEEDED)" in line]
    assert needed, proc.stdout
    assert not [line for line in needed if "python" in line.lower()], needed


def test_bundle_run_sh(
    loader_bin, ops_library, exported: Path, signing_keys: Path, tmp_path: Path
) -> None:
    # The bundle as edge_bundle lays it out (//deploy/bundle:bundle_test unpacks the
    # real one), from a signed export: run.sh with --public-key.
    top = "my_ops_bundle"
    bundle = tmp_path / "x" / top
    bundle.mkdir(parents=True)
    for name in os.listdir(exported):
        shutil.copy(exported / name, bundle / name)
    shutil.copy(loader_bin, bundle / "loader")
    shutil.copy(ops_library, bundle / "libmy_ops.so")
    shutil.copy(absolute_from_env("deploy/bundle/run.sh"), bundle / "run.sh")
    shutil.copy(absolute_from_env("deploy/bundle/BUNDLE_README.md"), bundle / "README.md")
    assert sorted(os.listdir(bundle)) == sorted(HOST_BUNDLE_FILES + ("manifest.sig", "weights.sig"))
    torch_lib = _libtorch_dir(loader_bin)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = child_env(tmp_path / "tmpdir")
    env.pop("LIBTORCH_LIB", None)
    run_sh = str(tmp_path / "x" / top / "run.sh")
    proc = subprocess.run(
        [run_sh, torch_lib], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout
    assert os.listdir(tmp_path / "tmpdir") == []
    assert os.listdir(elsewhere) == []
    # The signed bundle also passes with its signature required...
    public_key = signing_keys / "public_key.pem"
    proc = subprocess.run(
        [run_sh, torch_lib, "--public-key", str(public_key)],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # ...and run.sh never lets the check be skipped.
    for flag in ("--no-verify", "--manifest=/dev/null"):
        proc = subprocess.run([run_sh, torch_lib, flag], cwd=elsewhere, env=env,
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert len(error_lines(proc.stderr)) == 1
        line = error_lines(proc.stderr)[0]
        assert line.startswith(f"run.sh: error: {flag} is not allowed"), proc.stderr
    # Without a LibTorch directory run.sh explains what it needs.
    proc = subprocess.run([run_sh], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert len(error_lines(proc.stderr)) == 1
    assert "LibTorch lib directory" in proc.stderr, proc.stderr
    assert "LIBTORCH_LIB" in proc.stderr, proc.stderr
