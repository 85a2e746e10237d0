"""One gpu_check run: its steps' results, their subprocesses, the summary and the verdict."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Not resolved: under Bazel the runfiles tree (the declared data) is the source tree.
ROOT = Path(os.path.abspath(__file__)).parents[2]
STEPS = ("build", "tests", "export", "loader", "bench")
LOG_FILES = {
    "build": "build.log",
    "tests": "tests.log",
    "export": "export.log",
    "loader": "loader.log",
    "bench": "bench.txt",
}
# Each log keeps this much of its start and of its end; the middle is dropped.
LOG_HEAD = 40_000
LOG_TAIL = 160_000
FAIL_TAIL_LINES = 40
KILL_GRACE_S = 30


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok, fail, skipped, not run
    seconds: float = 0.0
    detail: str = ""
    facts: dict = field(default_factory=dict)


class Killed(Exception):
    """SIGTERM/SIGINT: stop, but still write the summary."""


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget
        self.hard_deadline = self.deadline + KILL_GRACE_S
        self.steps = {name: Step(name) for name in STEPS}
        self.out = args.out_dir
        self.children: set[subprocess.Popen] = set()
        self.facts: dict = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    # -- subprocesses -------------------------------------------------------

    def run(
        self, cmd: list[str], log: Path, env: dict[str, str], cwd: Path = ROOT
    ) -> tuple[int, str]:
        """Runs cmd with its output appended to log; returns (exit status, its output)."""
        timeout = self.hard_deadline - time.monotonic()
        with open(log, "ab") as f:
            f.write(f"$ {shlex.join(cmd)}\n".encode())
            f.flush()
            start = f.tell()
            if timeout <= 0:
                f.write(b"gpu_check: not started, time budget used up\n")
                return 124, "not started, time budget used up"
            proc = subprocess.Popen(
                cmd,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
            self.children.add(proc)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill(proc)
                rc = 124
                f.write(f"\ngpu_check: killed after {timeout:.0f} s (time budget)\n".encode())
            finally:
                self.children.discard(proc)
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        return rc, text

    def capture(self, cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
        """Runs a short command (build jobs, probes) and returns (status, output)."""
        timeout = max(1.0, self.hard_deadline - time.monotonic())
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        self.children.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            self.kill(proc)
            out, _ = proc.communicate()
            out += f"\ngpu_check: killed after {timeout:.0f} s (time budget)\n".encode()
            rc = 124
        finally:
            self.children.discard(proc)
        return rc, out.decode(errors="replace")

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        # Each child leads its own process group, so compilers and test
        # workers it started go with it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()

    def kill_children(self) -> None:
        for proc in list(self.children):
            self.kill(proc)

    # -- summary ------------------------------------------------------------

    def verdict(self, final: bool) -> tuple[bool, str]:
        s = self.steps
        failed = [st.name for st in s.values() if st.status == "fail"]
        not_run = [st.name for st in s.values() if st.status == "not run"]
        ok = final and not failed and not not_run
        parts = [f"build={s['build'].status}"]
        t = s["tests"]
        if "passed" in t.facts:
            tests = f"{t.facts['passed']} passed/{t.facts['failed'] + t.facts['errors']} failed"
            if t.facts["skipped"]:
                tests += f"/{t.facts['skipped']} skipped"
            if t.facts.get("partial"):
                tests += f" ({', '.join(t.facts['partial'])})"
            if t.status == "fail" and t.detail:
                tests += f" ({t.detail})"
            parts.append(f"tests={tests}")
        else:
            parts.append(f"tests={t.detail or t.status}")
        e = s["export"]
        parts.append(f"export={e.facts.get('export', e.status)}")
        parts.append(f"aoti_parity={e.facts.get('parity', e.status)}")
        lo = s["loader"]
        parts.append(f"loader_parity={lo.facts.get('parity', lo.status)}")
        b = s["bench"]
        parts.append(f"bench={b.detail or b.status}")
        head = "PASS" if ok else ("FAIL" if final else "RUNNING")
        line = f"gpu_check: {head} {' '.join(parts)} in {self.elapsed():.0f} s"
        if failed or (final and not_run):
            line += " [failed: " + ",".join(failed + [f"{n}(not run)" for n in not_run]) + "]"
        return ok, line

    def write_summary(self, final: bool) -> str:
        ok, line = self.verdict(final)
        total = self.elapsed()
        summary = {
            "verdict": "PASS" if ok else ("FAIL" if final else "RUNNING"),
            "line": line,
            "mode": "cpu-only" if self.args.cpu_only else "cuda",
            "seconds": round(total, 1),
            "budget_s": self.args.budget,
            "steps": {
                name: dict(
                    asdict(st),
                    seconds=round(st.seconds, 1),
                    fraction_of_total=round(st.seconds / total, 3) if total else 0.0,
                    log=LOG_FILES[name],
                )
                for name, st in self.steps.items()
            },
            "environment": self.facts,
        }
        tmp = self.out / ".summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        os.replace(tmp, self.out / "summary.json")
        (self.out / "verdict.txt").write_text(line + "\n")
        return line


def truncate_into(src: Path, dst: Path) -> None:
    if not src.exists():
        return
    size = src.stat().st_size
    with open(src, "rb") as f:
        if size <= LOG_HEAD + LOG_TAIL:
            data = f.read()
        else:
            head = f.read(LOG_HEAD)
            f.seek(size - LOG_TAIL)
            tail = f.read()
            dropped = size - LOG_HEAD - LOG_TAIL
            data = head + f"\n\n[... {dropped} bytes left out ...]\n\n".encode() + tail
    dst.write_bytes(data)


def tail(text: str, lines: int = FAIL_TAIL_LINES) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join("    " + line[:300] for line in kept)


def child_env(work: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The parent's sys.path carries torch (under Bazel: the locked wheel), and
    # the checkout's python/ must win over any other my_ops.
    paths = [str(ROOT / "python")] + [p for p in sys.path if p and Path(p).is_dir()]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    tmp = work / "tmp"
    env["TMPDIR"] = str(tmp)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")
    env["TRITON_CACHE_DIR"] = str(tmp / "triton")
    if not env.get("HOME"):
        # Bazel test sandboxes may leave HOME unset; caches must land somewhere writable.
        env["HOME"] = str(work / "home")
        (work / "home").mkdir(exist_ok=True)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


class AppendLog:
    """A list-like sink whose lines go straight to a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, line: str) -> None:
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def text(self) -> str:
        return self.path.read_text() if self.path.exists() else ""
