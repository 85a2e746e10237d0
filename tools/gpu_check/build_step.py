"""The build step: libmy_ops.so and the C++ loader, compiled with g++ and nvcc in one pool."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import platform
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from check_run import LOG_FILES, ROOT, Job, Run, Step

FLAGS_FILE = "tools/torch/kernel_flags.bzl"
CUDA_TOOLKIT = "tools/cuda/private/cuda_toolkit.py"
KINDS = {"cpp": ["*.cpp"], "cu": ["*.cu"], "hdr": ["*.h", "*.cuh"]}
SYSTEM_INCLUDES = (Path("/usr/include"), Path("/usr/local/include"))


def find_sources(root: Path = ROOT) -> dict[str, list[str]]:
    """What torch_op_library compiles: ops/registration.cpp and every folder's kernel files.

    The macro refuses a folder of ops/ with such files that its `ops` list lacks, so every
    folder here is its list (the test compares the two).
    """
    found = {k: sorted({str(f.relative_to(root)) for p in pats for f in root.glob("ops/*/" + p)})
             for k, pats in KINDS.items()}  # fmt: skip
    found["cpp"].insert(0, "ops/registration.cpp")
    return found


def bzl_lists(path: Path) -> dict[str, list[str]]:
    """The NAME = ["string", ...] constants of a .bzl file that holds nothing else."""
    consts = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        value = None
        if isinstance(node, ast.Assign) and [type(t) for t in node.targets] == [ast.Name]:
            with contextlib.suppress(ValueError):
                value = ast.literal_eval(node.value)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise RuntimeError(f"{path}:{node.lineno}: not a NAME = [strings] constant")
        consts[node.targets[0].id] = value
    return consts


def nvidia_lib_dirs() -> list[Path]:
    """Library dirs of the nvidia wheels on sys.path.

    libtorch_cuda.so finds cuDNN, cuBLAS, ... through $ORIGIN/../../nvidia/*/lib, which
    misses where each wheel has its own tree (Bazel's rules_python), and their RUNPATHs
    keep the loader's RPATH from reaching them: linking gets -rpath-link, running gets
    LD_LIBRARY_PATH. Python's torch preloads them itself.
    """
    dirs = (d for e in sys.path for d in sorted(Path(e or ".").glob("nvidia/*/lib")))
    return list(dict.fromkeys(dirs))


def _cuda(run: Run, site_packages: Path) -> tuple[list[str], list[str]]:
    """nvcc's command up to its sources, and the link flags for the CUDA runtime."""
    cmd = [sys.executable, str(ROOT / CUDA_TOOLKIT), "--overlay", str(run.work / "overlay")]
    job = run.run(cmd)
    if job.rc != 0:
        raise RuntimeError(f"{CUDA_TOOLKIT}: {job.output.strip()[-500:]}")
    tk = json.loads(job.output.splitlines()[-1])
    if not tk["root"]:
        raise RuntimeError("no CUDA toolkit: $CUDA_PATH, $CUDA_HOME, nvcc on PATH, /usr/local/cuda")
    # g++ here is the host's, so the host's glibc decides, as for tools/cuda's host toolchain.
    overlay = tk["overlay"] if tk["host_needs_overlay"] else None
    # The CUDA runtime wheel torch loads (nvidia/cu13, ...): one cudart in the process, and
    # cublas_v2.h and cusparse.h, which ATen/cuda/CUDAContext.h needs and a minimal toolkit
    # may lack.
    wheels = [d for d in (site_packages / "nvidia").glob("cu*") if re.fullmatch(r"cu\d+", d.name)]
    wheels.sort(key=lambda d: -int(d.name[2:]))
    libs = [*(w / "lib" for w in wheels), Path(tk["root"]) / "lib64"]
    names = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
    cudart = next((d / n for d in libs for n in names if (d / n).exists()), None)
    if cudart is None:
        raise RuntimeError("libcudart.so not found in the nvidia wheels or the toolkit")
    run.facts.update(tk, rsqrt_overlay=bool(overlay), cudart=str(cudart))
    nvcc = [tk["nvcc"], "-std=c++20", "-x", "cu", "-Xcompiler", "-fPIC", "-O2"]
    nvcc += ["-ccbin", shutil.which(run.facts["cxx"]) or run.facts["cxx"]]
    # Only skips nvcc's host compiler version check: on a borrowed machine a g++ newer
    # than nvcc knows would otherwise cost the run.
    nvcc += ["-allow-unsupported-compiler", f"-arch={run.args.nvcc_arch}"]
    nvcc += [f"-I{overlay}"] if overlay else []
    nvcc += ["-isystem", str(wheels[0] / "include")] if wheels else []
    return nvcc, [f"-L{cudart.parent}", f"-Wl,-rpath,{cudart.parent}", f"-l:{cudart.name}"]


def _find(env_var: str, repo_glob: str, *files: str) -> tuple[Path, str] | None:
    """(prefix, file) for the first file under $env_var, under Bazel's repository beside
    this checkout in a runfiles tree, or under / (or under their usr/)."""
    prefixes = [Path(p) for p in [os.environ.get(env_var)] if p]
    prefixes += [*sorted(ROOT.parent.glob(repo_glob)), Path("/")]
    bases = [b for p in prefixes for b in (p, p / "usr")]
    return next(((b, f) for b in bases for f in files if (b / f).is_file()), None)


def _loader_command(run: Run, cxx_flags: list[str], torch_link: list[str]) -> list[str]:
    libs = [f"lib/{platform.machine()}-linux-gnu", "lib64", "lib"]
    sodium = _find("MY_OPS_LIBSODIUM", "*libsodium*", *[f"{d}/libsodium.a" for d in libs])
    nlohmann = _find("MY_OPS_NLOHMANN_JSON", "*nlohmann_json*", "include/nlohmann/json.hpp")
    # The loader includes a header Bazel generates from deploy/package_contract.json.
    gen = run.work / "gen"
    header = gen / "deploy/loader/package_contract.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    contract = [sys.executable, "deploy/package_contract.py", "deploy/package_contract.json"]
    run.run([*contract, str(header)], run.work / LOG_FILES["build"])
    cmd = [run.facts["cxx"], *cxx_flags, f"-I{gen}", "-O2", "-pthread"]
    cmd += ["-o", str(run.work / "loader")]
    for hit in (sodium, nlohmann):
        # g++ searches /usr/include anyway; an -isystem for it would come before libstdc++'s
        # headers, whose #include_next then fails. Without the headers the compile fails
        # on sodium.h or nlohmann/json.hpp, which the loader step explains.
        if hit and (hit[0] / "include").resolve() not in SYSTEM_INCLUDES:
            cmd += ["-isystem", str(hit[0] / "include")]
    cmd += sorted(str(p) for p in (ROOT / "deploy/loader").glob("*.cpp"))
    return cmd + ([str(sodium[0] / sodium[1])] if sodium else []) + torch_link + ["-ldl"]


def step_build(run: Run, step: Step) -> None:
    import torch

    cuda = not run.args.cpu_only
    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        raise RuntimeError(f"C++ compiler {cxx!r} not found (set CXX)")
    torch_dir = Path(torch.__file__).resolve().parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    run.facts.update(torch=torch.__version__, torch_dir=str(torch_dir), cxx=cxx, cxx11_abi=abi)
    run.facts["python"] = sys.version.split()[0]
    flags, sources = bzl_lists(ROOT / FLAGS_FILE), find_sources()
    includes = [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{ROOT}", "-isystem"]
    includes += [str(torch_dir / "include"), "-isystem"]
    includes += [str(torch_dir / "include/torch/csrc/api/include")]
    cxx_flags = ["-std=c++20", "-fPIC", *includes]
    lib = torch_dir / "lib"
    # DT_RPATH, not RUNPATH: it also covers the libraries they open, so a package's and the
    # op library's torch dependencies resolve to this torch. torch_cuda stays although
    # nothing calls it directly: a CUDA package needs it registered before it loads.
    torch_link = [f"-L{lib}", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{lib}", "-Wl,--no-as-needed"]
    torch_link += [f"-Wl,-rpath-link,{d}" for d in nvidia_lib_dirs()]
    torch_link += ["-ltorch", "-ltorch_cpu", "-lc10"]
    torch_link += ["-ltorch_cuda", "-lc10_cuda", "-Wl,--as-needed"] if cuda else ["-Wl,--as-needed"]
    jobs: dict[str, list[str]] = {}  # label: command, nvcc's (the slowest) first
    cudart: list[str] = []
    if cuda:
        nvcc, cudart = _cuda(run, torch_dir.parent)
        for src in sources["cu"]:
            jobs[src] = [*nvcc, *includes, *flags["TORCH_NVCC_COPTS"], "-c", str(ROOT / src)]
    arm = platform.machine() == "aarch64"
    copts = flags["TORCH_CPU_KERNEL_COPTS_AARCH64" if arm else "TORCH_CPU_KERNEL_COPTS"]
    for src in sources["cpp"]:
        jobs[src] = [cxx, *cxx_flags, *copts, "-c", str(ROOT / src)]
    objects = [run.work / (src.replace("/", "__") + ".o") for src in jobs]
    for cmd, obj in zip(jobs.values(), objects, strict=True):
        cmd += ["-o", str(obj)]
    with open(run.log(step), "a") as log:
        log.write("".join(f"{k}: {v}\n" for k, v in run.facts.items()))
    run.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    futures = {run.pool.submit(run.run, cmd): label for label, cmd in jobs.items()}
    # Queued last: the library is needed first, the loader only after the tests and export.
    run.loader = run.pool.submit(run.run, _loader_command(run, cxx_flags, torch_link))
    done: dict[str, Job] = {}
    for future in as_completed(futures):
        job = done[futures[future]] = future.result()
        with open(run.log(step), "a") as log:  # as it goes: a killed run still leaves its log
            log.write(f"\n{job.output}[exit {job.rc}] {futures[future]} ({job.seconds:.1f} s)\n")
    step.facts["compile_s"] = {label: round(job.seconds, 1) for label, job in done.items()}
    failed = [label for label, job in done.items() if job.rc != 0]
    if failed:
        return run.fail(step, "failed: " + ",".join(failed), done[failed[0]])
    out = run.work / "libmy_ops.so"
    link = [cxx, "-shared", "-o", str(out), *map(str, objects)]
    link += [*flags["TORCH_OP_LIBRARY_LINKOPTS"], *torch_link, *cudart]
    job = run.run(link, run.log(step))
    if job.rc != 0:
        return run.fail(step, "failed: link", job)
    step.status, step.detail, run.lib = "ok", f"{len(done)} objects", out
