"""The build step: libmy_ops.so from ops/my_ops_sources.txt and the C++ loader, in one pool."""

from __future__ import annotations

import concurrent.futures
import json
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from check_run import ROOT, AppendLog, Run, Step, tail
from toolchain import Toolchain, detect_toolchain, libsodium, nlohmann_json, nvidia_lib_dirs

SOURCES_FILE = "ops/my_ops_sources.txt"


@dataclass
class Sources:
    cpp: list[str] = field(default_factory=list)
    cu: list[str] = field(default_factory=list)
    hdr: list[str] = field(default_factory=list)
    cpu_copt: list[str] = field(default_factory=list)
    nvcc_copt: list[str] = field(default_factory=list)
    linkopt: list[str] = field(default_factory=list)


def read_sources(path: Path) -> Sources:
    src = Sources()
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind, _, value = line.partition(" ")
        if not value or not hasattr(src, kind):
            raise RuntimeError(f"{path}:{n}: cannot parse {raw!r}")
        getattr(src, kind).append(value.strip())
        if kind in ("cpp", "cu", "hdr") and not (ROOT / value.strip()).exists():
            raise RuntimeError(f"{path}:{n}: {value.strip()} does not exist")
    if not src.cpp:
        raise RuntimeError(f"{path}: no cpp sources")
    return src


def _gencode(archs: list[str]) -> list[str]:
    nums = sorted((a[3:] for a in archs), key=lambda n: int(n.rstrip("a")))
    flags = [f"-gencode=arch=compute_{n},code=sm_{n}" for n in nums]
    # PTX for the newest architecture lets newer GPUs JIT-compile the kernels.
    flags.append(f"-gencode=arch=compute_{nums[-1]},code=compute_{nums[-1]}")
    return flags


def _isystem(include: Path | None) -> list[str]:
    # g++ searches /usr/include anyway, and naming it again with -isystem
    # moves it before libstdc++'s headers, whose #include_next then fails.
    if include is None or include.resolve() in (Path("/usr/include"), Path("/usr/local/include")):
        return []
    return ["-isystem", str(include)]


def loader_command(tc: Toolchain, binary: Path, cuda: bool) -> list[str]:
    lib = tc.torch_dir / "lib"
    # Without them the compile fails on sodium.h or nlohmann/json.hpp, which
    # step_loader explains.
    sodium = libsodium()
    sodium_include = _isystem(sodium[0] if sodium else None)
    sodium_lib = [str(sodium[1])] if sodium else []
    json_include = _isystem(nlohmann_json())
    nvidia = []
    for d in nvidia_lib_dirs():
        nvidia.append(f"-Wl,-rpath-link,{d}")
    libs = ["-ltorch", "-ltorch_cpu", "-lc10"]
    if cuda:
        libs += ["-ltorch_cuda", "-lc10_cuda"]
    return [
        tc.cxx,
        *tc.cxx_flags(),
        *sodium_include,
        *json_include,
        "-O2",
        "-pthread",
        # The loader's units include each other as "deploy/loader/x.h".
        f"-I{ROOT}",
        *sorted(str(p) for p in (ROOT / "deploy/loader").glob("*.cpp")),
        *sodium_lib,
        "-o",
        str(binary),
        f"-L{lib}",
        # DT_RPATH (not RUNPATH) also applies to the libraries the loader
        # opens, so the package's and the op library's torch dependencies
        # resolve to this torch.
        "-Wl,--disable-new-dtags",
        f"-Wl,-rpath,{lib}",
        *nvidia,
        # Keep torch_cuda although the loader calls nothing in it directly: a
        # CUDA package needs it registered before it loads.
        "-Wl,--no-as-needed",
        *libs,
        "-Wl,--as-needed",
        "-ldl",
    ]


_GPU_PROBE = """\
import json, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
info = {"count": n, "torch_cuda": torch.version.cuda}
if n:
    p = torch.cuda.get_device_properties(0)
    info.update(name=p.name, capability=f"sm_{p.major}{p.minor}", memory_gib=p.total_memory / 2**30)
print("GPU " + json.dumps(info))
"""


def _record_gpu(run: Run, probe: tuple[int, str], lines: AppendLog) -> None:
    rc, out = probe
    m = re.search(r"^GPU (.*)$", out, re.MULTILINE)
    info = json.loads(m.group(1)) if rc == 0 and m else {"count": 0, "error": out.strip()[-500:]}
    run.facts["gpu"] = info
    lines.append(f"gpu: {info}")
    if not info.get("count"):
        run.say("warning: torch sees no CUDA device; the cuda steps will fail")
        return
    cap = info.get("capability", "")
    newest = max(run.args.archs, key=lambda a: int(a[3:].rstrip("a")))
    if cap not in run.args.archs and int(cap[3:]) < int(newest[3:].rstrip("a")):
        run.say(f"warning: GPU is {cap}, --archs {','.join(run.args.archs)} has no code for it")
    run.say(f"gpu: {info.get('name')} ({cap}, {info.get('memory_gib', 0):.0f} GiB)")


def _timed(run: Run, cmd: list[str]) -> tuple[int, str, float]:
    # Timed inside the pool: queueing for a free worker is not compile time.
    t0 = time.monotonic()
    rc, out = run.capture(cmd)
    return rc, out, time.monotonic() - t0


def step_build(run: Run, step: Step, work: Path, log_path: Path) -> dict:
    """Compiles everything (the loader too) in one pool; returns the loader job's future info."""
    args = run.args
    # Written as it goes, so a run killed mid-build still leaves its log.
    lines = AppendLog(log_path)
    cuda = not args.cpu_only
    sources = read_sources(ROOT / SOURCES_FILE)
    tc = detect_toolchain(args.cpu_only, work, lines)
    run.facts.update(
        torch=tc.torch_version,
        torch_dir=str(tc.torch_dir),
        cxx11_abi=tc.abi,
        glibc=".".join(map(str, tc.glibc)) if tc.glibc else None,
        python=sys.version.split()[0],
        nvcc=tc.nvcc_version,
        cuda_root=str(tc.cuda_root) if tc.cuda_root else None,
        rsqrt_overlay=tc.overlay is not None,
        cudart=str(tc.cudart) if tc.cudart else None,
        archs=args.archs if cuda else [],
    )
    lines.append("\n".join(f"{k}: {v}" for k, v in run.facts.items()))
    obj_dir = work / "obj"
    obj_dir.mkdir(parents=True, exist_ok=True)

    jobs: list[tuple[str, list[str]]] = []  # (label, command): nvcc first, the slowest
    objects: list[Path] = []
    if cuda:
        cu_flags = [
            "-std=c++20",
            "-x",
            "cu",
            "-ccbin",
            shutil.which(tc.cxx) or tc.cxx,
            "-Xcompiler",
            "-fPIC",
            "-O2",
            # Only skips nvcc's host-compiler version check: on a borrowed
            # machine a g++ newer than nvcc knows would otherwise cost the run.
            "-allow-unsupported-compiler",
            *_gencode(args.archs),
        ]
        if tc.overlay:
            cu_flags.append(f"-I{tc.overlay}")
        cu_flags += [
            f"-D_GLIBCXX_USE_CXX11_ABI={tc.abi}",
            f"-I{ROOT}",
            "-isystem",
            str(tc.torch_dir / "include"),
            "-isystem",
            str(tc.torch_dir / "include/torch/csrc/api/include"),
        ]
        if tc.nvidia_include:
            cu_flags += ["-isystem", str(tc.nvidia_include)]
        cu_flags += sources.nvcc_copt
        for src in sources.cu:
            obj = obj_dir / (src.replace("/", "__") + ".o")
            objects.append(obj)
            jobs.append((src, [tc.nvcc, *cu_flags, "-c", str(ROOT / src), "-o", str(obj)]))
    for src in sources.cpp:
        obj = obj_dir / (src.replace("/", "__") + ".o")
        objects.append(obj)
        jobs.append(
            (
                src,
                [tc.cxx, *tc.cxx_flags(), *sources.cpu_copt, "-c", str(ROOT / src), "-o", str(obj)],
            )
        )
    # Queued last: the library is needed first, and the loader only after
    # the tests and the export, so it finishes in their shadow.
    loader_bin = work / "loader"
    loader_label = "deploy/loader/*.cpp (loader binary)"
    if "loader" not in args.skip and "export" not in args.skip:
        jobs.append((loader_label, loader_command(tc, loader_bin, cuda)))

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    # Asked in a child so this process never holds a CUDA context (and its
    # memory) while the tests and the bench run.
    gpu_probe = pool.submit(run.capture, [sys.executable, "-c", _GPU_PROBE]) if cuda else None
    futures = {label: pool.submit(_timed, run, cmd) for label, cmd in jobs}
    commands = dict(jobs)
    labels = {f: label for label, f in futures.items() if label != loader_label}
    results: dict[str, tuple[int, str, float]] = {}
    for f in concurrent.futures.as_completed(labels):
        label = labels[f]
        rc, out, seconds = results[label] = f.result()
        lines.append(f"\n$ {shlex.join(commands[label])}")
        if out.strip():
            lines.append(out.rstrip())
        lines.append(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] {label} ({seconds:.1f} s)")
    if gpu_probe is not None:
        _record_gpu(run, gpu_probe.result(), lines)
    failed = [label for label, (rc, _, _) in results.items() if rc != 0]
    lib = work / "libmy_ops.so"
    if not failed:
        torch_lib = tc.torch_dir / "lib"
        link = [
            tc.cxx,
            "-shared",
            "-o",
            str(lib),
            *map(str, objects),
            *sources.linkopt,
            f"-L{torch_lib}",
            f"-Wl,-rpath,{torch_lib}",
            "-ltorch",
            "-ltorch_cpu",
            "-lc10",
        ]
        if cuda:
            assert tc.cudart is not None
            link += [
                "-ltorch_cuda",
                "-lc10_cuda",
                f"-L{tc.cudart.parent}",
                f"-Wl,-rpath,{tc.cudart.parent}",
                f"-l:{tc.cudart.name}",
            ]
        rc, out = run.capture(link)
        lines.append(f"\n$ {shlex.join(link)}")
        if out.strip():
            lines.append(out.rstrip())
        lines.append(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] link libmy_ops.so")
        if rc != 0:
            failed.append("link")
    step.facts["compile_s"] = {label: round(s, 1) for label, (_, _, s) in results.items()}
    step.facts["sources"] = {"cpp": len(sources.cpp), "cu": len(sources.cu) if cuda else 0}
    if failed:
        step.status = "fail"
        step.detail = "failed: " + ",".join(failed)
        first = failed[0]
        text = results[first][1] if first in results else lines.text()
        run.say(f"build failed ({', '.join(failed)}):\n{tail(text)}")
    else:
        step.status = "ok"
        step.detail = f"{len(results)} objects"
        step.facts["library"] = str(lib)
    return {
        "future": futures.get(loader_label),
        "cmd": commands.get(loader_label),
        "binary": loader_bin,
        "pool": pool,
        "lib": lib if step.status == "ok" else None,
    }
