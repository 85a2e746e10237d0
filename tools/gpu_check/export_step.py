"""The export and loader steps: the exporter's package (python -m deploy.exporter), checked by
the exporter itself (aoti_load_package against eager) and run by the C++ loader compiled in
the build pool."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

from build_step import nvidia_lib_dirs
from check_run import ROOT, Run, Step

# The exporter's verify stage (a cross-compiled package's is "skipped"): it exits 0,
# publishing the package, only once it passed.
VERIFY_STAGE = re.compile(r"^verify\s+\.\.\. (?!skipped)", re.MULTILINE)
# Two runs in one process at each batch size: a CUDA package loads its kernels on first
# use, and a second shape takes other kernel paths.
LOADER_BATCHES = (1, 3)
EXPORT = "export"  # the package's folder in the work folder
# The default model treats batch rows alike, so batch N's data is N copies of batch 1's.
_REPEAT = """import os, sys, torch
n, out = int(sys.argv[1]), sys.argv[2]
for path in sys.argv[3:]:
    x = torch.load(path)
    torch.save(tuple(torch.cat([t] * n) for t in (x if isinstance(x, (tuple, list)) else (x,))),
               f"{out}/{os.path.basename(path)}")
"""
LOADER_HINTS = {
    "sodium.h": "needs libsodium: apt-get install libsodium-dev, or MY_OPS_LIBSODIUM",
    "nlohmann/json.hpp": "needs nlohmann/json: apt-get install nlohmann-json3-dev, or "
    "MY_OPS_NLOHMANN_JSON",
}


def plan_export(run: Run) -> list[str]:
    device = "cpu" if run.args.cpu_only else "cuda"
    # --no-cache: a package cached on that machine by an earlier export would
    # skip the very compile this step is here to check.
    out = str(run.work / EXPORT)
    return [sys.executable, "-m", "deploy.exporter", "--device", device, "--out", out, "--no-cache"]


def step_export(run: Run, step: Step) -> None:
    device = "cpu" if run.args.cpu_only else "cuda"
    job = run.run(plan_export(run), run.log(step), export_env(run))
    verified = job.rc == 0 and bool(VERIFY_STAGE.search(job.output))
    step.facts.update(device=device, export="ok" if job.rc == 0 else "fail")
    step.facts.update(parity="ok" if verified else "fail" if job.rc == 0 else "not run")
    step.facts["times"] = (re.findall(r"exported in .*", job.output) or [None])[0]
    if job.rc != 0:
        return run.fail(step, f"export exit {job.rc}", job)
    if not verified:
        return run.fail(step, "export ran no verify stage", job)
    # Every op of the package is called through its C shim for this device, which the
    # exporter's verify (and the loader step) then ran on it.
    manifest = json.loads((run.work / EXPORT / "manifest.json").read_text())
    shims = {op["name"]: op.get("c_shim") for op in manifest["ops"]}
    step.facts["c_shims"] = sorted(filter(None, shims.values()))
    wrong = [op for op, shim in shims.items() if shim != f"aoti_torch_{device}_{op.split('::')[1]}"]
    if wrong:
        return run.fail(step, f"ops not called through their {device} C shim: {wrong}", job)
    step.status, run.export_dir = "ok", run.work / EXPORT


def export_env(run: Run) -> dict[str, str]:
    """child_env with the checkout's root first: python -m deploy.exporter imports the package
    from there (the cwd is not on sys.path when PYTHONSAFEPATH is set, as under Bazel)."""
    env = run.child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    return env


def loader_env(run: Run) -> dict[str, str]:
    env = run.child_env()
    dirs = [*map(str, nvidia_lib_dirs()), env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(d for d in dirs if d)
    return env


class LoaderRun(NamedTuple):
    batch: int
    data: Path  # the input and expected output's folder
    repeat: list[str] | None  # writes them (None for batch 1: the package's own)
    cmd: list[str]  # the loader's


def plan_loader(run: Run) -> list[LoaderRun]:
    package, plan = run.export_dir, []
    for batch in LOADER_BATCHES:
        data, repeat = package, None
        if batch != 1:
            data = run.work / f"batch{batch}"
            files = [str(package / n) for n in ("sample_input.pt", "expected_output.pt")]
            repeat = [sys.executable, "-c", _REPEAT, str(batch), str(data), *files]
        # The loader reads no environment for libraries: the op library is named.
        cmd = [run.work / "loader", "--ops", run.lib, "--package", package / "model.pt2"]
        cmd += ["--input", data / "sample_input.pt", "--output", run.work / "out.pt"]
        cmd += ["--expect", data / "expected_output.pt", "--runs", 2, "--atol=1e-4", "--rtol=1e-4"]
        plan.append(LoaderRun(batch, data, repeat, list(map(str, cmd))))
    return plan


def step_loader(run: Run, step: Step) -> None:
    job = run.loader.result()  # waits only if it is still compiling
    with open(run.log(step), "a") as f:
        f.write(f"{job.output}[exit {job.rc}] loader build\n")
    # Compiled during the build and tests steps: not part of this step's time.
    step.facts.update(build="ok" if job.rc == 0 else "fail", build_s_in_pool=round(job.seconds, 1))
    if job.rc != 0:
        step.facts["parity"] = "build_failed"
        hints = "".join(f" ({hint})" for key, hint in LOADER_HINTS.items() if key in job.output)
        return run.fail(step, "loader build failed" + hints, job)
    env = loader_env(run)
    for batch, data, repeat, cmd in plan_loader(run):
        if repeat is not None:
            data.mkdir()
            job = run.run(repeat, env=env)
            if job.rc != 0:
                return run.fail(step, f"cannot make the batch-{batch} files", job)
        job = run.run(cmd, run.log(step), env)
        step.facts[f"loader_exit_b{batch}"] = job.rc
        step.facts["parity"] = "ok" if job.rc == 0 and "outputs match" in job.output else "fail"
        if step.facts["parity"] != "ok":
            return run.fail(step, f"loader exit {job.rc} at batch {batch}", job)
    step.status = "ok"
