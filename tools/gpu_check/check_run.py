"""One gpu_check run: what the steps hand on, their subprocesses, the summary and the verdict."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Not resolved: under Bazel the runfiles tree (the declared data) is the source tree.
ROOT = Path(os.path.abspath(__file__)).parents[2]
LOG_FILES = {"build": "build.log", "tests": "tests.log", "export": "export.log"}
LOG_FILES |= {"loader": "loader.log", "bench": "bench.txt"}
# A log keeps this much of its start and of its end: the cause and the outcome.
LOG_HEAD, LOG_TAIL = 40_000, 160_000
KILL_GRACE_S = 30
# What a logged (or --dry-run) command line shows of its environment.
SHOWN_ENV = ("CUDA_HOME", "MY_OPS_LIBRARY", "MY_OPS_TEST_DEVICES")


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok, fail
    seconds: float = 0.0
    detail: str = ""
    facts: dict = field(default_factory=dict)


@dataclass
class Job:
    """A finished command; its output starts with a "$ command" line."""

    rc: int
    output: str
    seconds: float


class Killed(Exception):
    """SIGTERM/SIGINT: stop, but still write the summary."""


@dataclass
class Run:
    args: argparse.Namespace
    work: Path
    t0: float = field(default_factory=time.monotonic)
    steps: dict[str, Step] = field(default_factory=lambda: {n: Step(n) for n in LOG_FILES})
    facts: dict = field(default_factory=dict)
    children: set[subprocess.Popen] = field(default_factory=set)
    pool: ThreadPoolExecutor | None = None
    lib: Path | None = None  # libmy_ops.so, once linked
    loader: Future[Job] | None = None  # the loader's compile, left running in the pool
    export_dir: Path | None = None  # the exported package, once its parity passed
    cuda_home: Path | None = None  # the CUDA toolkit the build picked, for every command

    @property
    def deadline(self) -> float:
        return self.t0 + self.args.budget

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def log(self, step: Step) -> Path:
        return self.work / LOG_FILES[step.name]

    def fail(self, step: Step, detail: str, job: Job | None = None) -> None:
        """Fails step, showing the tail of job's output."""
        killed = job is not None and job.rc == 124
        step.status, step.detail = "fail", "killed (time budget)" if killed else detail
        lines = job.output.rstrip().splitlines()[-40:] if job else []
        self.say("\n    ".join([f"{step.name}: {detail}", *(s[:300] for s in lines)]))

    def run(self, cmd: list, log: Path | None = None, env: dict | None = None) -> Job:
        """Runs cmd, its output (after a "$ cmd" line) appended to log; rc 124: out of time."""
        timeout, t0, rc = self.deadline + KILL_GRACE_S - time.monotonic(), time.monotonic(), 124
        with open(log, "a+b") if log else tempfile.TemporaryFile() as f:
            start = f.tell()
            f.write(f"$ {self.show(cmd, env)}\n".encode())
            f.flush()
            if timeout <= 0:
                f.write(b"gpu_check: not started, time budget used up\n")
            else:
                # In its own process group, so that compilers and test workers go with it.
                proc = subprocess.Popen(
                    cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=ROOT, env=env or self.base_env(), start_new_session=True,
                )  # fmt: skip
                self.children.add(proc)
                try:
                    rc = proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    f.write(f"\ngpu_check: killed after {timeout:.0f} s (time budget)\n".encode())
                finally:
                    self.kill(proc)
            f.seek(start)
            return Job(rc, f.read().decode(errors="replace"), time.monotonic() - t0)

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        self.children.discard(proc)

    def base_env(self) -> dict[str, str]:
        """Every command's: once the build picked a toolkit, $CUDA_HOME is it and its bin/
        leads PATH, so that torch's cpp_extension and Inductor use the nvcc the build did."""
        env = dict(os.environ)
        if self.cuda_home is not None:
            env["CUDA_HOME"] = str(self.cuda_home)
            env["PATH"] = os.pathsep.join([str(self.cuda_home / "bin"), env.get("PATH", "")])
        return env

    def show(self, cmd: list, env: dict | None = None) -> str:
        """cmd as a shell line, after the variables of env that say what it runs against."""
        env = env or self.base_env()
        shown = [f"{k}={env[k]}" for k in SHOWN_ENV if k in env]
        return shlex.join([*shown, *map(str, cmd)])

    def child_env(self) -> dict[str, str]:
        """For Python children: this torch, the checkout's my_ops and library, caches in work."""
        tmp = self.work / "tmp"
        env = self.base_env() | {"MY_OPS_LIBRARY": str(self.lib), "PYTHONDONTWRITEBYTECODE": "1"}
        env.update(PYTHONUNBUFFERED="1", TMPDIR=str(tmp), TRITON_CACHE_DIR=str(tmp / "triton"))
        env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
        # Bazel's test sandbox may leave HOME unset; caches must land somewhere writable.
        env.setdefault("HOME", str(tmp))
        # sys.path carries torch (under Bazel: the locked wheel); python/ wins over any my_ops.
        paths = [str(ROOT / "python")] + [p for p in sys.path if p and Path(p).is_dir()]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        return env

    def write_summary(self, final: bool) -> str:
        """summary.json and verdict.txt, rewritten after each step so a killed run leaves them."""
        s, total = self.steps, self.elapsed()
        failed = [n for n, st in s.items() if st.status == "fail"]
        not_run = [n for n, st in s.items() if st.status == "not run"]
        verdict = "PASS" if final and not (failed or not_run) else ("FAIL" if final else "RUNNING")
        e, lo = s["export"], s["loader"]
        parts = {
            "build": s["build"].status,
            "tests": s["tests"].detail or s["tests"].status,
            "export": e.facts.get("export", e.status),
            "aoti_parity": e.facts.get("parity", e.status),
            "loader_parity": lo.facts.get("parity", lo.status),
            "bench": s["bench"].detail or s["bench"].status,
        }
        line = f"gpu_check: {verdict} " + " ".join(f"{k}={v}" for k, v in parts.items())
        line += f" in {total:.0f} s"
        if failed or (final and not_run):
            line += " [failed: " + ",".join(failed + [f"{n}(not run)" for n in not_run]) + "]"
        summary = {
            "verdict": verdict,
            "line": line,
            "mode": "cpu-only" if self.args.cpu_only else "cuda",
            "seconds": round(total, 1),
            "budget_s": self.args.budget,
            "steps": {
                n: asdict(st)
                | {"seconds": round(st.seconds, 1), "log": LOG_FILES[n]}
                | {"fraction_of_total": round(st.seconds / total, 3) if total else 0.0}
                for n, st in s.items()
            },
            "environment": self.facts,
        }
        out = self.args.out_dir
        (out / ".summary.json.tmp").write_text(json.dumps(summary, indent=2, default=str) + "\n")
        os.replace(out / ".summary.json.tmp", out / "summary.json")
        (out / "verdict.txt").write_text(line + "\n")
        return line


def truncate_into(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    size = src.stat().st_size
    with open(src, "rb") as f:
        data = f.read(LOG_HEAD)
        if size > LOG_HEAD + LOG_TAIL:
            data += f"\n\n[... {size - LOG_HEAD - LOG_TAIL} bytes left out ...]\n\n".encode()
            f.seek(size - LOG_TAIL)
        dst.write_bytes(data + f.read())
