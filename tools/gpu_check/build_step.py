"""The build step: libmy_ops.so and the C++ loader, compiled with g++ and nvcc in one pool."""

from __future__ import annotations

import fnmatch
import json
import os
import platform
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from check_run import ROOT, Job, Run, Step

# What the build compiles, from Bazel (tools/gpu_check/build_inputs.bzl says how).
BUILD_INPUTS = "tools/gpu_check/build_inputs.json"
CUDA_TOOLKIT = "third_party/rules_cuda/cuda/private/cuda_toolkit.py"
SYSTEM_INCLUDES = (Path("/usr/include"), Path("/usr/local/include"))
LIBRARY = "libmy_ops.so"
# The generated files the build writes, as Bazel names them.
C_SHIMS = "ops/my_ops_c_shims.cpp"
CONTRACT_HEADER = "deploy/runtime/src/package_contract.h"
# The flag lists of tools/torch/kernel_flags.bzl the build uses.
FLAG_LISTS = (
    "TORCH_CPU_KERNEL_COPTS",
    "TORCH_CPU_KERNEL_COPTS_AARCH64",
    "TORCH_NVCC_COPTS",
    "TORCH_OP_LIBRARY_CUDA_COPTS",
    "TORCH_OP_LIBRARY_LINKOPTS",
    "TORCH_STABLE_COPTS",
)
# torch_op_library's units with ATen's vector math (cpu_vec.cpp and the per-tier cpu_<tier>.cpp),
# compiled without the stable-ABI flags: the basename pattern of its _VEC_SRC glob.
VEC_SOURCE = "cpu_*.cpp"
# Where the search looks after nvcc on PATH (/usr/local/cuda); tests point it elsewhere.
DEFAULT_ROOT_VAR = "GPU_CHECK_DEFAULT_CUDA_ROOT"


def cuda_toolkit_script() -> Path:
    """The toolkit search @cuda's repository rule runs: in a checkout, under third_party/.

    Under `bazel run` and `bazel test` it is in @rules_cuda's runfiles folder instead, which
    the BUILD file names in GPU_CHECK_CUDA_TOOLKIT_PY (relative to the runfiles root).
    """
    in_runfiles = os.environ.get("GPU_CHECK_CUDA_TOOLKIT_PY")
    return ROOT.parent / in_runfiles if in_runfiles else ROOT / CUDA_TOOLKIT


def _string_lists(value: object, keys: tuple[str, ...] | None = None) -> bool:
    """Whether value is a dict of lists of strings (with exactly `keys`, when given)."""
    if not isinstance(value, dict) or (keys is not None and sorted(value) != sorted(keys)):
        return False
    return all(isinstance(v, list) and all(isinstance(s, str) for s in v) for v in value.values())


def read_build_inputs(root: Path = ROOT) -> dict:
    """BUILD_INPUTS: the op library's and the loader's sources and the kernel flags.

    Refused, in one line, unless it has that shape and its generated files are the ones
    this script writes.
    """
    path = root / BUILD_INPUTS
    try:
        inputs = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RuntimeError(f"{BUILD_INPUTS}: unreadable ({e})") from e
    parts, kinds = ("op_library", "companion", "loader"), ("cpp", "cu", "generated")
    shaped = isinstance(inputs, dict) and _string_lists(inputs.get("flags"), FLAG_LISTS)
    if not shaped or not all(_string_lists(inputs.get(p), kinds) for p in parts):
        raise RuntimeError(
            f"{BUILD_INPUTS}: unreadable (not the generated file's shape); "
            "tools/bazel run //tools/gpu_check:update_build_inputs rewrites it"
        )
    generated = {p: inputs[p]["generated"] for p in parts}
    expected = {"op_library": [C_SHIMS], "companion": [], "loader": [CONTRACT_HEADER]}
    if generated != expected:
        raise RuntimeError(
            f"{BUILD_INPUTS}: generated files {generated}, expected {expected}: "
            "this script writes only those"
        )
    return inputs


def nvidia_lib_dirs() -> list[Path]:
    """Library dirs of the nvidia wheels on sys.path.

    libtorch_cuda.so finds cuDNN, cuBLAS, ... through $ORIGIN/../../nvidia/*/lib, which
    misses where each wheel has its own tree (Bazel's rules_python), and their RUNPATHs
    keep the loader's RPATH from reaching them: linking gets -rpath-link, running gets
    LD_LIBRARY_PATH. Python's torch preloads them itself.
    """
    dirs = (d for e in sys.path for d in sorted(Path(e or ".").glob("nvidia/*/lib")))
    return list(dict.fromkeys(dirs))


def site_packages(torch_dir: Path) -> list[Path]:
    """Where this torch's nvidia wheels may be: its own site-packages first, then sys.path
    (under Bazel's rules_python each wheel has its own)."""
    dirs = [torch_dir.parent, *(Path(p) for p in sys.path if p and Path(p).is_dir())]
    return list(dict.fromkeys(dirs))


def cudart_major(lib: Path) -> int | None:
    """13 for libcudart.so.13 or libcudart.so.13.0.96; an unversioned libcudart.so: its
    symlink target's."""
    for name in (lib.name, lib.resolve().name):
        if m := re.fullmatch(r"libcudart\.so\.(\d+)(\.\d+)*", name):
            return int(m.group(1))
    return None


def _cudarts(lib_dirs: list[Path]) -> list[Path]:
    """The shared cudarts of lib_dirs, in their order, a versioned name before a plain one."""
    libs = []
    for d in lib_dirs:
        found = [f for f in d.glob("libcudart.so*") if f.is_file()]
        libs += sorted(found, key=lambda f: (f.name == "libcudart.so", f.name))
    return libs


def wheel_cudarts(sites: list[Path]) -> list[Path]:
    """The cudarts of the nvidia runtime wheels: nvidia/cu<N>/lib (newest N first), then
    nvidia/cuda_runtime/lib as CUDA 12's wheels lay it out."""
    dirs = []
    for sp in sites:
        cu = [d for d in sp.glob("nvidia/cu*") if re.fullmatch(r"cu\d+", d.name)]
        dirs += [d / "lib" for d in sorted(cu, key=lambda d: -int(d.name[2:]))]
        dirs.append(sp / "nvidia/cuda_runtime/lib")
    return _cudarts(dirs)


def toolkit_cudarts(root: Path) -> list[Path]:
    """The toolkit's own cudarts: lib64/, targets/*/lib/, or lib/ (a wheel's toolkit)."""
    return _cudarts([root / "lib64", *sorted(root.glob("targets/*/lib")), root / "lib"])


WHEEL, TOOLKIT = "torch's nvidia wheel", "the toolkit"


@dataclass
class Cudart:
    path: Path | None  # what the library links; None: no cudart anywhere
    source: str  # WHEEL or TOOLKIT
    warning: str | None  # one line, when nvcc is newer than torch's cudart


def choose_cudart(nvcc_version: str, wheel: list[Path], toolkit: list[Path]) -> Cudart:
    """The cudart to link objects of nvcc nvcc_version against: torch's wheel's (the one
    torch loads: one cudart in the process) when its major is at least nvcc's, else the
    toolkit's when its is, else whichever there is. nvcc N's objects import
    __cudaLaunchKernel and __cudaGetKernel, which libcudart.so.N has and older ones lack:
    the warning says so when torch's cudart is older than nvcc."""
    major = int(nvcc_version.split(".")[0])
    found = [(lib, WHEEL) for lib in wheel] + [(lib, TOOLKIT) for lib in toolkit]
    if not found:
        return Cudart(None, "", None)
    path, source = next((f for f in found if (cudart_major(f[0]) or 0) >= major), found[0])
    torch_major = cudart_major(wheel[0]) if wheel else None
    if torch_major is None or torch_major >= major:
        return Cudart(path, source, None)
    warning = (
        f"WARNING: nvcc {nvcc_version} is newer than torch's cudart ({wheel[0].name}): CUDA "
        f"{major} objects need __cudaLaunchKernel/__cudaGetKernel from libcudart.so.{major}; "
    )
    if (cudart_major(path) or 0) >= major:
        warning += f"linking the toolkit's {path} (a second CUDA runtime in the process)"
    else:
        warning += "none found, so libmy_ops.so will not load: set CUDA_HOME to a CUDA "
        warning += f"{torch_major} toolkit"
    return Cudart(path, source, warning)


def find_toolkit(run: Run, torch_dir: Path) -> tuple[dict, Cudart]:
    """cuda_toolkit.py's findings (searching torch's site-packages for a pip toolkit last),
    and the cudart to link; sets run.cuda_home, which every later command gets."""
    sites = site_packages(torch_dir)
    cmd = [sys.executable, str(cuda_toolkit_script()), "--overlay", str(run.work / "overlay")]
    cmd += [a for sp in sites for a in ("--site-packages", str(sp))]
    if os.environ.get(DEFAULT_ROOT_VAR):
        cmd += ["--default-root", os.environ[DEFAULT_ROOT_VAR]]
    job = run.run(cmd)
    if job.rc != 0:
        raise RuntimeError(f"{CUDA_TOOLKIT}: {job.output.strip()[-500:]}")
    tk = json.loads(job.output.splitlines()[-1])
    if not tk["root"]:
        raise RuntimeError(
            "no CUDA toolkit: none in $CUDA_PATH, $CUDA_HOME, nvcc on PATH, "
            f"{os.environ.get(DEFAULT_ROOT_VAR) or '/usr/local/cuda'}, or an nvidia-cuda-nvcc "
            f"wheel beside torch ({torch_dir.parent}); --cpu-only needs none"
        )
    cudart = choose_cudart(tk["version"], wheel_cudarts(sites), toolkit_cudarts(Path(tk["root"])))
    if cudart.path is None:
        raise RuntimeError("libcudart.so not found in the nvidia wheels or the toolkit")
    run.cuda_home = Path(tk["root"])
    keys = ("root", "nvcc", "version", "how", "overlay", "host_needs_overlay", "warnings")
    run.facts["cuda_toolkit"] = {k: tk[k] for k in keys}
    run.facts["glibc"] = tk["glibc"]
    run.facts["cudart"] = {"path": str(cudart.path), "from": cudart.source}
    run.facts["cudart"] |= {"major": cudart_major(cudart.path), "warning": cudart.warning}
    return tk, cudart


def _cuda(run: Run, torch_dir: Path) -> tuple[list[str], list[str]]:
    """nvcc's command up to its sources, and the link flags for the CUDA runtime."""
    tk, cudart = find_toolkit(run, torch_dir)
    run.say(
        f"toolkit: CUDA {tk['version']} at {tk['root']} (found: {tk['how']}), nvcc {tk['nvcc']}"
    )
    run.say(f"cudart: {cudart.path} ({cudart.source})")
    for warning in tk["warnings"] + [cudart.warning] * bool(cudart.warning):
        run.say(warning)
    # g++ here is the host's, so the host's glibc decides, as for tools/cuda's host toolchain.
    overlay = tk["overlay"] if tk["host_needs_overlay"] else None
    # The CUDA wheels beside torch (nvidia/cu13, ...) have cublas_v2.h and cusparse.h, which
    # ATen/cuda/CUDAContext.h needs and a minimal toolkit may lack.
    wheels = [
        d for d in (torch_dir.parent / "nvidia").glob("cu*") if re.fullmatch(r"cu\d+", d.name)
    ]
    wheels.sort(key=lambda d: -int(d.name[2:]))
    nvcc = [tk["nvcc"], "-std=c++20", "-x", "cu", "-Xcompiler", "-fPIC", "-O2"]
    nvcc += ["-ccbin", shutil.which(run.facts["cxx"]) or run.facts["cxx"]]
    # Only skips nvcc's host compiler version check: on a borrowed machine a g++ newer
    # than nvcc knows would otherwise cost the run.
    nvcc += ["-allow-unsupported-compiler", f"-arch={run.args.nvcc_arch}"]
    nvcc += [f"-I{overlay}"] if overlay else []
    nvcc += ["-isystem", str(wheels[0] / "include")] if wheels else []
    lib = cudart.path
    return nvcc, [f"-L{lib.parent}", f"-Wl,-rpath,{lib.parent}", f"-l:{lib.name}"]


def _find(env_var: str, repo_glob: str, *files: str) -> tuple[Path, str] | None:
    """(prefix, file) for the first file under $env_var, under Bazel's repository beside
    this checkout in a runfiles tree, or under / (or under their usr/)."""
    prefixes = [Path(p) for p in [os.environ.get(env_var)] if p]
    prefixes += [*sorted(ROOT.parent.glob(repo_glob)), Path("/")]
    bases = [b for p in prefixes for b in (p, p / "usr")]
    return next(((b, f) for b in bases for f in files if (b / f).is_file()), None)


@dataclass
class BuildPlan:
    """The build's commands, in the order they start."""

    shims: list[str]  # writes the op library's C shims (C_SHIMS), before any compile
    compiles: dict[str, list[str]]  # source: its compile, nvcc's (the slowest) first
    objects: list[Path]
    link: list[str]
    contract: list[str]  # writes the header the loader includes
    loader: list[str]
    companion: list[str]  # the op library's companion, for this machine's torch release

    def commands(self) -> list[list[str]]:
        return [
            self.shims,
            *self.compiles.values(),
            self.link,
            self.companion,
            self.contract,
            self.loader,
        ]


def _loader_commands(run: Run, sources: list[str], cxx_flags: list[str], torch_link: list[str]):
    """The loader's compile, after the command writing the header it includes."""
    libs = [f"lib/{platform.machine()}-linux-gnu", "lib64", "lib"]
    sodium = _find("MY_OPS_LIBSODIUM", "*libsodium*", *[f"{d}/libsodium.a" for d in libs])
    nlohmann = _find("MY_OPS_NLOHMANN_JSON", "*nlohmann_json*", "include/nlohmann/json.hpp")
    # Bazel generates it from deploy/contract/package_contract.json.
    gen = run.work / "gen"
    header = gen / CONTRACT_HEADER
    contract = [
        sys.executable,
        "deploy/contract/package_contract.py",
        "deploy/contract/package_contract.json",
    ]
    # The loader is built on the runtime library, whose public headers sit under its include/.
    cmd = [run.facts["cxx"], *cxx_flags, f"-I{gen}", f"-I{ROOT / 'deploy/runtime/include'}", "-O2"]
    cmd += ["-pthread"]
    cmd += ["-o", str(run.work / "loader")]
    for hit in (sodium, nlohmann):
        # g++ searches /usr/include anyway; an -isystem for it would come before libstdc++'s
        # headers, whose #include_next then fails. Without the headers the compile fails
        # on sodium.h or nlohmann/json.hpp, which the loader step explains.
        if hit and (hit[0] / "include").resolve() not in SYSTEM_INCLUDES:
            cmd += ["-isystem", str(hit[0] / "include")]
    cmd += [str(ROOT / src) for src in sources]
    cmd += ([str(sodium[0] / sodium[1])] if sodium else []) + torch_link + ["-ldl"]
    return [*contract, str(header)], cmd


TARGET_VERSION_FLAG = "-DTORCH_TARGET_VERSION="


def stable_flags(copts: list[str], torch_version: str) -> list[str]:
    """`copts` with TORCH_TARGET_VERSION lowered to `torch_version` when that is older.

    The library targets a release (kernel_flags.bzl) and runs under it and every later one;
    a machine with an older torch (a GPU machine's own build) builds it for its own.
    """
    numbers = [int(n) for n in re.findall(r"\d+", torch_version)[:3]]
    own = (numbers[0] << 56) | (numbers[1] << 48) | (numbers[2] << 40)
    out = []
    for flag in copts:
        if flag.startswith(TARGET_VERSION_FLAG):
            target = int(flag.removeprefix(TARGET_VERSION_FLAG), 16)
            flag = f"{TARGET_VERSION_FLAG}0x{min(target, own):016x}"
        out.append(flag)
    return out


def plan_build(run: Run) -> BuildPlan:
    """Every command of the build; in CUDA mode it first picks the toolkit (find_toolkit)."""
    import torch

    cuda = not run.args.cpu_only
    cxx = os.environ.get("CXX") or "g++"
    if not shutil.which(cxx):
        raise RuntimeError(f"C++ compiler {cxx!r} not found (set CXX)")
    torch_dir = Path(torch.__file__).resolve().parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    run.facts.update(torch=torch.__version__, torch_dir=str(torch_dir), cxx=cxx, cxx11_abi=abi)
    run.facts["python"] = sys.version.split()[0]
    inputs = read_build_inputs()
    flags, sources = inputs["flags"], inputs["op_library"]
    includes = [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{ROOT}", "-isystem"]
    includes += [str(torch_dir / "include"), "-isystem"]
    includes += [str(torch_dir / "include/torch/csrc/api/include")]
    cxx_flags = ["-std=c++20", "-fPIC", *includes]
    lib = torch_dir / "lib"
    # DT_RPATH, not RUNPATH: it also covers the libraries they open, so a package's and the
    # op library's torch dependencies resolve to this torch. libtorch_cpu and c10 only, as in
    # the Bazel build: the runtime loads libtorch_cuda.so from this folder for a CUDA package
    # (load_cuda_backend), which the CUDA export's run through the loader checks.
    torch_link = [f"-L{lib}", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{lib}", "-Wl,--no-as-needed"]
    torch_link += [f"-Wl,-rpath-link,{d}" for d in nvidia_lib_dirs()]
    torch_link += ["-ltorch_cpu", "-lc10", "-Wl,--as-needed"]
    jobs: dict[str, list[str]] = {}
    cudart: list[str] = []
    if cuda:
        nvcc, cudart = _cuda(run, torch_dir)
        for src in sources["cu"]:
            nvcc_copts = stable_flags(flags["TORCH_NVCC_COPTS"], torch.__version__)
            jobs[src] = [*nvcc, *includes, *nvcc_copts, "-c", str(ROOT / src)]
    arm = platform.machine() == "aarch64"
    vec_copts = flags["TORCH_CPU_KERNEL_COPTS_AARCH64" if arm else "TORCH_CPU_KERNEL_COPTS"]
    stable_copts = stable_flags(flags["TORCH_STABLE_COPTS"], torch.__version__)
    run.facts["torch_target_version"] = next(
        f.partition("=")[2] for f in stable_copts if f.startswith(TARGET_VERSION_FLAG)
    )
    # With the CUDA part, the generated file registers its kernels too.
    copts = [*stable_copts, *flags["TORCH_OP_LIBRARY_CUDA_COPTS"]] if cuda else stable_copts
    for src in sources["cpp"]:
        own = vec_copts if fnmatch.fnmatch(Path(src).name, VEC_SOURCE) else copts
        jobs[src] = [cxx, *cxx_flags, *own, "-c", str(ROOT / src)]
    # torch_op_library's genrule: every op's registrations and C shims, from the registration file.
    shims_cpp = run.work / "gen" / C_SHIMS
    shims = [sys.executable, "tools/torch/c_shims.py", "ops/registration.cpp", str(shims_cpp)]
    jobs[C_SHIMS] = [cxx, *cxx_flags, *copts, "-c", str(shims_cpp)]
    objects = [run.work / (src.replace("/", "__") + ".o") for src in jobs]
    for cmd, obj in zip(jobs.values(), objects, strict=True):
        cmd += ["-o", str(obj)]
    link = [cxx, "-shared", "-o", str(run.work / LIBRARY), *map(str, objects)]
    link += [*flags["TORCH_OP_LIBRARY_LINKOPTS"], *torch_link, *cudart]
    contract, loader = _loader_commands(run, inputs["loader"]["cpp"], cxx_flags, torch_link)
    # Named for this machine's torch release, which it is built for, as `import my_ops` expects.
    release = ".".join(re.findall(r"\d+", torch.__version__)[:3])
    companion = [cxx, "-shared", "-O2", *cxx_flags, "-o", str(run.work / companion_name(release))]
    companion += [str(ROOT / src) for src in inputs["companion"]["cpp"]]
    companion += ["-Wl,-z,defs", *torch_link]
    return BuildPlan(shims, jobs, objects, link, contract, loader, companion)


def companion_name(release: str) -> str:
    return f"libmy_ops_torch{release}.so"


def step_build(run: Run, step: Step) -> None:
    plan = plan_build(run)
    with open(run.log(step), "a") as log:
        log.write("".join(f"{k}: {v}\n" for k, v in run.facts.items()))
    Path(plan.shims[-1]).parent.mkdir(parents=True, exist_ok=True)
    job = run.run(plan.shims, run.log(step))
    if job.rc != 0:
        return run.fail(step, "failed: C shims", job)
    run.pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    futures = {run.pool.submit(run.run, cmd): label for label, cmd in plan.compiles.items()}
    # Queued last: the library is needed first, the loader only after the tests and export.
    Path(plan.contract[-1]).parent.mkdir(parents=True, exist_ok=True)
    run.run(plan.contract, run.log(step))
    run.loader = run.pool.submit(run.run, plan.loader)
    done: dict[str, Job] = {}
    for future in as_completed(futures):
        job = done[futures[future]] = future.result()
        with open(run.log(step), "a") as log:  # as it goes: a killed run still leaves its log
            log.write(f"\n{job.output}[exit {job.rc}] {futures[future]} ({job.seconds:.1f} s)\n")
    step.facts["compile_s"] = {label: round(job.seconds, 1) for label, job in done.items()}
    failed = [label for label, job in done.items() if job.rc != 0]
    if failed:
        return run.fail(step, "failed: " + ",".join(failed), done[failed[0]])
    job = run.run(plan.link, run.log(step))
    if job.rc != 0:
        return run.fail(step, "failed: link", job)
    job = run.run(plan.companion, run.log(step))
    if job.rc != 0:
        return run.fail(step, "failed: companion", job)
    step.status, step.detail, run.lib = "ok", f"{len(done)} objects", run.work / LIBRARY
