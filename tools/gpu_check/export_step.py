"""The export step: deploy/export.py, then the package's output under aoti_load_package."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from check_run import Run, Step, child_env, tail
from parity import parity_script, run_parity


def step_export(run: Run, step: Step, work: Path, lib: Path, log_path: Path) -> Path | None:
    device = "cpu" if run.args.cpu_only else "cuda"
    export_dir = work / "export"
    env = child_env(work, {"MY_OPS_LIBRARY": str(lib)})
    cmd = [sys.executable, "deploy/export.py", "--device", device, "--out", str(export_dir)]
    rc, out = run.run(cmd, log_path, env)
    step.facts["device"] = device
    if rc != 0:
        step.status = "fail"
        step.facts["export"] = "fail"
        step.facts["parity"] = "not run"
        step.detail = "killed (time budget)" if rc == 124 else f"export.py exit {rc}"
        run.say(f"export failed (exit {rc}):\n{tail(out)}")
        return None
    step.facts["export"] = "ok"
    times = re.search(r"exported in .*", out)
    if times:
        step.facts["export_times"] = times.group(0)
    files = [export_dir / n for n in ("model.pt2", "sample_input.pt", "expected_output.pt")]
    missing = [f.name for f in files if not f.exists()]
    if missing:
        step.status = "fail"
        step.facts["parity"] = "not run"
        step.detail = "missing " + ",".join(missing)
        return None
    step.facts["package_bytes"] = files[0].stat().st_size
    cmd = [sys.executable, str(parity_script(work)), "aoti", *map(str, files), device]
    run_parity(run, step, cmd, log_path, env, "aoti_load_package parity failed")
    return export_dir
