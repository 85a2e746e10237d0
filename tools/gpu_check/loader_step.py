"""The loader step: the C++ loader built in the build pool runs the exported package."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from check_run import Run, Step, child_env, tail
from parity import PARITY_ATOL, PARITY_RTOL, parity_script, run_parity
from toolchain import nvidia_lib_dirs

# Batch sizes the loader step runs the exported package at, twice each in one process.
LOADER_BATCHES = (1, 3)


def step_loader(
    run: Run, step: Step, work: Path, lib: Path, export_dir: Path, build: dict, log_path: Path
) -> None:
    future = build["future"]
    if future is None:
        step.status = "fail"
        step.detail = "loader was not built"
        return
    # Compiled in the build pool; waiting here only if it is still running.
    rc, out, build_s = future.result()
    with open(log_path, "a") as f:
        f.write(f"$ {shlex.join(build['cmd'])}\n{out}")
        f.write(f"[{'ok' if rc == 0 else f'FAILED ({rc})'}] loader build ({build_s:.1f} s)\n")
    step.facts["build"] = "ok" if rc == 0 else "fail"
    # Compiled during the build and tests steps; not part of this step's time.
    step.facts["build_s_in_pool"] = round(build_s, 1)
    if rc != 0:
        step.status = "fail"
        step.facts["parity"] = "build_failed"
        step.detail = "loader build failed"
        if "sodium.h" in out:
            step.detail += " (needs libsodium: apt-get install libsodium-dev, or MY_OPS_LIBSODIUM)"
        if "nlohmann/json.hpp" in out:
            step.detail += " (needs nlohmann/json: apt-get install nlohmann-json3-dev"
            step.detail += ", or MY_OPS_NLOHMANN_JSON)"
        run.say(f"loader build failed (exit {rc}):\n{tail(out)}")
        return
    env = child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    dirs = [str(d) for d in nvidia_lib_dirs()]
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    if dirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
    # Two runs in one process at each of two batch sizes: a CUDA package loads
    # its kernels on first use, and a second shape takes other kernel paths.
    for batch in LOADER_BATCHES:
        inputs = export_dir / "sample_input.pt"
        expected = export_dir / "expected_output.pt"
        if batch != 1:
            for source, dest in ((inputs, work / f"input_b{batch}.pt"),
                                 (expected, work / f"expected_b{batch}.pt")):  # fmt: skip
                cmd = [sys.executable, str(parity_script(work)), "repeat", str(batch),
                       str(source), str(dest)]  # fmt: skip
                rc, out = run.run(cmd, log_path, env)
                if rc != 0:
                    step.status = "fail"
                    step.detail = f"cannot make the batch-{batch} input"
                    run.say(f"{step.detail} (exit {rc}):\n{tail(out)}")
                    return
            inputs, expected = work / f"input_b{batch}.pt", work / f"expected_b{batch}.pt"
        result = work / f"loader_out_b{batch}.pt"
        # The loader reads no env for libraries; pass the op library explicitly.
        cmd = [
            str(build["binary"]),
            "--ops", str(lib),
            "--package", str(export_dir / "model.pt2"),
            "--input", str(inputs),
            "--output", str(result),
            "--expect", str(expected),
            "--atol", str(PARITY_ATOL),
            "--rtol", str(PARITY_RTOL),
            "--runs", "2",
        ]  # fmt: skip
        rc, out = run.run(cmd, log_path, env)
        step.facts[f"loader_exit_b{batch}"] = rc
        if rc != 0:
            step.status = "fail"
            step.facts["parity"] = "fail"
            step.detail = f"loader exit {rc} at batch {batch}"
            run.say(f"loader failed at batch {batch} (exit {rc}, see loader --help):\n{tail(out)}")
            return
        cmd = [sys.executable, str(parity_script(work)), "files", str(result), str(expected)]
        run_parity(run, step, cmd, log_path, env, f"loader output differs at batch {batch}")
        if step.status != "ok":
            return
