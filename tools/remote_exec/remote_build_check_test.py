"""The remote build check's reading of the farm's job table (runs no farm): a job Bazel
cancelled when it started the build again counts for no action and needs no worker, nor does
one the server answered from its action cache (Bazel counts it as a remote cache hit), but
every other job that completed must have run on one, and there must be one for each remote
action."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).absolute().parent


def load_check():
    sys.path.insert(0, str(HERE))
    loader = importlib.machinery.SourceFileLoader(
        "remote_build_check", str(HERE / "remote_build_check")
    )
    spec = importlib.util.spec_from_loader("remote_build_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


check = load_check()


def job(name: str, stage: int, worker: str, cancelled: bool = False, cached: bool = False):
    return check.Job(name, stage, worker, cancelled, cached)


def test_jobs_cancelled_by_a_restarted_build_are_not_counted():
    # Bazel cancels the executions in flight when a lost output makes it start the build again;
    # the server completes a cancelled job that was still queued with no worker.
    jobs = [job("a", 4, "worker-2"), job("b", 4, "-", cancelled=True), job("c", 4, "worker-3")]
    ran = check.completed_jobs(jobs, remote_actions=2, cache_hits=0)
    assert ran.per_worker == {"worker-2": 1, "worker-3": 1}
    assert ran.cancelled == 1


def test_jobs_answered_from_the_action_cache_need_no_worker():
    # An identical action that completed while this one waited for its Execute: the server
    # finds its result in the action cache and completes the new job at once, on no worker.
    jobs = [job("a", 4, "worker-2"), job("b", 4, "-", cached=True), job("c", 4, "worker-3")]
    ran = check.completed_jobs(jobs, remote_actions=2, cache_hits=3)
    assert ran.per_worker == {"worker-2": 1, "worker-3": 1}
    assert (ran.cancelled, ran.cached) == (0, 1)


def test_more_cached_jobs_than_bazel_counted_cache_hits_fails_the_check():
    jobs = [job("a", 4, "worker-2"), job("b", 4, "-", cached=True), job("c", 4, "-", cached=True)]
    with pytest.raises(
        check.CheckError,
        match="2 job.s. answered from the farm's action cache, but Bazel counted 1",
    ):
        check.completed_jobs(jobs, remote_actions=1, cache_hits=1)


def test_a_completed_job_without_a_worker_fails_the_check():
    jobs = [job("a", 4, "worker-2"), job("b", 4, "-"), job("c", 4, "worker-3")]
    with pytest.raises(check.CheckError, match=r"1 job\(s\) completed without a worker: b"):
        check.completed_jobs(jobs, remote_actions=2, cache_hits=0)


def test_fewer_jobs_than_remote_actions_fails_the_check():
    jobs = [job("a", 4, "worker-2"), job("b", 4, "-", cancelled=True), job("c", 3, "worker-3")]
    with pytest.raises(check.CheckError, match="2 remote actions, but the farm completed 1 job"):
        check.completed_jobs(jobs, remote_actions=2, cache_hits=0)


def test_the_job_table_is_read_with_its_ending_column():
    text = "a 4 worker-2 -\nb 4 - cancelled\nc 4 - cached\n"
    assert check.parse_jobs(text) == [
        job("a", 4, "worker-2"),
        job("b", 4, "-", cancelled=True),
        job("c", 4, "-", cached=True),
    ]
