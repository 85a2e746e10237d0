"""BuildGrid's `bgd`, with Execute answering for blobs its store lacks as the Remote Execution
API says: FAILED_PRECONDITION with a google.rpc.PreconditionFailure that names each missing blob
("blobs/HASH/SIZE", type MISSING). Bazel retries such an answer and uploads the action's inputs
again (its ExecuteRetrier, up to --remote_retries times), so a build survives a store that evicts.

    python bgd_server.py --store-keeps BYTES -- server start bgd.yml
    python bgd_server.py --probe HOST:PORT      (`farm probe`)
    python bgd_server.py --in-use unix:CASD_SOCKET ACTION_DIGEST...      (`farm evict`)

BuildGrid 0.4.4 has no setting for this: it answers a missing Action or Command with a bare
FAILED_PRECONDITION, which Bazel does not retry, and never looks at the input tree, so a missing
input fails the job on the worker instead (INTERNAL, "Tree is not completely available from
LocalCAS"). This launcher checks the Action, its Command and every blob of its input tree before
the job is queued; a job that fails on its worker anyway (its blobs evicted while it was queued)
is answered the same way when its blobs are missing; then it runs BuildGrid's own command
line. An action whose inputs alone are larger than what the store keeps when it evicts
(--store-keeps, casd's --quota-low) would be evicted while it is uploaded, again and again: it
is refused without details, so that Bazel stops at once with that message instead of uploading
it again.

It runs with the farm's virtual environment's Python (tools/remote_exec/farm starts it), and
prints one line to standard error for each answer it gives, which the farm's bgd.log keeps.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import (
    remote_execution_pb2,
    remote_execution_pb2_grpc,
)
from buildgrid._protos.build.bazel.remote.execution.v2.remote_execution_pb2 import (
    Action,
    Command,
    Digest,
)
from buildgrid._protos.google.rpc import code_pb2, error_details_pb2, status_pb2
from buildgrid.server.app import cli
from buildgrid.server.context import instance_context
from buildgrid.server.exceptions import (
    FailedPreconditionError,
    NotFoundError,
    RetriableError,
    _Status,
)
from buildgrid.server.execution.instance import ExecutionInstance
from buildgrid.server.scheduler import Scheduler
from buildgrid.server.settings import HASH
from buildgrid.server.sql.models import string_to_digest


def missing_blobs(storage, action_digest: Digest) -> tuple[list[Digest], int]:
    """The blobs of an action that storage lacks (the Action, its Command, the input tree's
    directories and files), and what its input files take in the store, in bytes (a file
    that is in the tree twice is one blob). The Command and the tree can only be read once
    the Action is there: a missing Action is reported alone.

    Never the empty blob (an empty file, an empty directory): the Remote Execution API has a
    server treat it as always present, and Bazel never uploads it. casd stores it like any blob
    once a worker's output is empty, so an eviction can delete it; named missing, Bazel
    "uploaded" it (skipping it) until its retries ran out, on a wheel's bytecode action whose
    inputs have empty __init__.py files."""
    action = storage.get_message(action_digest, Action)
    if action is None:
        return [action_digest], 0
    if storage.get_message(action.command_digest, Command) is None:
        return [action.command_digest], 0
    try:
        directories = list(storage.get_tree(action.input_root_digest))
    except NotFoundError:
        return [action.input_root_digest], 0
    # get_tree skips the subdirectories it cannot read; asking for every child finds them.
    children = {c.digest.hash: c.digest for d in directories for c in d.directories}
    files = {f.digest.hash: f.digest for d in directories for f in d.files}
    wanted = [d for d in [*children.values(), *files.values()] if d.size_bytes > 0]
    missing = storage.missing_blobs(wanted) if wanted else []
    return list(missing), sum(d.size_bytes for d in files.values())


def log(message: str) -> None:
    print(f"bgd_server: {message}", file=sys.stderr, flush=True)


# At most this many missing blobs are named in one answer. The answer travels in a gRPC
# trailer (grpc-status-details-bin, base64), and a client drops the connection on a trailer
# over its header limit: Bazel's did at 10 KiB ("Header size exceeded max allowed size"),
# failing the build with "INTERNAL: http2 exception", for a compile that lacked hundreds of
# LibTorch headers after an eviction. About 130 bytes a blob once encoded; Bazel uploads every
# input the store lacks on its retry, not only those named.
MAX_NAMED_BLOBS = 40


def missing_status(action_digest: Digest, missing: list[Digest]) -> status_pb2.Status:
    """FAILED_PRECONDITION with a PreconditionFailure naming each missing blob (type MISSING,
    subject blobs/HASH/SIZE), as the Remote Execution API has a server answer for them; the
    first MAX_NAMED_BLOBS of them, when more are missing."""
    named = ", ".join(f"{d.hash[:12]}/{d.size_bytes}" for d in missing[:3])
    log(
        f"missing blobs: {len(missing)} of action {action_digest.hash} ({named}"
        f"{', ...' if len(missing) > 3 else ''}), answered FAILED_PRECONDITION (MISSING)"
    )
    failure = error_details_pb2.PreconditionFailure()
    for digest in missing[:MAX_NAMED_BLOBS]:
        failure.violations.add(type="MISSING", subject=f"blobs/{digest.hash}/{digest.size_bytes}")
    named = f" (the first {MAX_NAMED_BLOBS} named)" if len(missing) > MAX_NAMED_BLOBS else ""
    status = status_pb2.Status(
        code=code_pb2.FAILED_PRECONDITION,
        message=(
            f"{len(missing)} blob(s) of action {action_digest.hash}/{action_digest.size_bytes} "
            f"are not in the farm's store{named}; upload them again"
        ),
    )
    status.details.add().Pack(failure)
    return status


class MissingBlobsError(RetriableError):
    """Carries missing_status() to the client: BuildGrid's error handler answers a
    RetriableError with the status it carries (error_status), details included."""

    def __init__(self, status: status_pb2.Status):
        super().__init__(status.message, retry_period=timedelta(0))
        self.error_status = _Status(
            code=grpc.StatusCode.FAILED_PRECONDITION,
            details=status.message,
            trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
        )


def install(store_keeps: int) -> None:
    """Wraps Execute, which checks an action's blobs before it is queued, and the completion
    of a job, which names the blobs that an action failed for want of on its worker (blobs
    evicted while it was queued: the worker reports only that staging failed)."""
    execute = ExecutionInstance.execute
    complete_job = Scheduler._complete_job

    def execute_with_inputs(self, *, action_digest: Digest, **kwargs):
        missing, input_bytes = missing_blobs(self.scheduler.storage, action_digest)
        if input_bytes > store_keeps:
            message = (
                f"the inputs of action {action_digest.hash}/{action_digest.size_bytes} "
                f"({input_bytes / 2**30:.1f} GiB) do not fit the farm's store, which keeps "
                f"{store_keeps / 2**30:.1f} GiB when it evicts: start the farm with a larger "
                "--cas-quota"
            )
            log(f"refused: {message}")
            raise FailedPreconditionError(message)
        if missing:
            raise MissingBlobsError(missing_status(action_digest, missing))
        return execute(self, action_digest=action_digest, **kwargs)

    def complete_job_naming_missing(self, session, job, status, *args, **kwargs):
        if status.code != code_pb2.OK:
            action_digest = string_to_digest(job.action_digest)
            with instance_context(job.instance_name):
                missing, _ = missing_blobs(self.storage, action_digest)
            if missing:
                status = missing_status(action_digest, missing)
        return complete_job(self, session, job, status, *args, **kwargs)

    ExecutionInstance.execute = execute_with_inputs
    Scheduler._complete_job = complete_job_naming_missing


def probe(endpoint: str) -> int:
    """Asks the server at endpoint to execute two actions. The first's input tree lacks one
    file and holds an empty file and an empty directory that no client uploads: the answer must
    be FAILED_PRECONDITION naming the missing file's blob as MISSING, and only it. The second
    lacks 500 files: the answer must name MAX_NAMED_BLOBS of them, in a trailer the client
    takes (all 500 made one over a client's header limit)."""
    reapi = remote_execution_pb2

    def digest(blob: bytes) -> Digest:
        return Digest(hash=HASH(blob).hexdigest(), size_bytes=len(blob))

    channel = grpc.insecure_channel(endpoint)
    cas = remote_execution_pb2_grpc.ContentAddressableStorageStub(channel)
    execution = remote_execution_pb2_grpc.ExecutionStub(channel)

    def answer(files: dict[str, bytes]) -> tuple[str, list[tuple[str, str]]]:
        """Uploads an action whose input tree holds `files` (their blobs left out) and an empty
        directory; returns the status the server answered Execute with and its violations."""
        command = Command(arguments=["/bin/true"]).SerializeToString()
        root = reapi.Directory(
            directories=[reapi.DirectoryNode(name="empty_dir", digest=digest(b""))],
            files=[reapi.FileNode(name=n, digest=digest(b)) for n, b in sorted(files.items())],
        ).SerializeToString()
        action = Action(
            command_digest=digest(command), input_root_digest=digest(root), do_not_cache=True
        ).SerializeToString()
        uploads = reapi.BatchUpdateBlobsRequest(
            requests=[
                reapi.BatchUpdateBlobsRequest.Request(digest=digest(blob), data=blob)
                for blob in (command, root, action)
            ]
        )
        if any(r.status.code != code_pb2.OK for r in cas.BatchUpdateBlobs(uploads).responses):
            return "the store refused the probe's blobs", []
        try:
            next(iter(execution.Execute(reapi.ExecuteRequest(action_digest=digest(action)))))
            return "an operation (the action was queued)", []
        except grpc.RpcError as e:
            violations = []
            for key, value in e.trailing_metadata() or ():
                if key == "grpc-status-details-bin":
                    for detail in status_pb2.Status.FromString(value).details:
                        failure = error_details_pb2.PreconditionFailure()
                        if detail.Unpack(failure):
                            violations += [(v.type, v.subject) for v in failure.violations]
            return e.code().name, violations

    absent = b"a blob no client uploaded: my_ops farm probe"
    got = answer({"absent": absent, "empty": b""})
    if got != ("FAILED_PRECONDITION", [("MISSING", f"blobs/{digest(absent).hash}/{len(absent)}")]):
        print(
            f"probe: {endpoint} answered an action with a missing input and an empty one "
            f"with {got[0]} and violations {got[1]}",
            file=sys.stderr,
        )
        return 1
    many = {f"absent_{i}": b"my_ops farm probe, blob %d" % i for i in range(500)}
    subjects = {f"blobs/{digest(b).hash}/{len(b)}" for b in many.values()}
    code, violations = answer(many)
    if (
        code != "FAILED_PRECONDITION"
        or len(violations) != MAX_NAMED_BLOBS
        or not all(t == "MISSING" and subject in subjects for t, subject in violations)
    ):
        print(
            f"probe: {endpoint} answered an action with 500 missing inputs with {code} and "
            f"{len(violations)} violation(s), not {MAX_NAMED_BLOBS} of them",
            file=sys.stderr,
        )
        return 1
    print(
        f"probe: {endpoint} names missing input blobs as the Remote Execution API says "
        f"(at most {MAX_NAMED_BLOBS} an answer), never the empty blob"
    )
    return 0


def blobs_in_use(store: str, action_digests: list[str]) -> int:
    """Prints the hashes of every blob the actions (HASH/SIZE each) need from the store at
    `store` (a gRPC address: unix:PATH for casd): their Action, Command and input tree. `farm
    evict` keeps these for the jobs on a worker, and the empty blob whatever they use (an
    empty input is never uploaded, so a worker must find it in the store)."""
    channel = grpc.insecure_channel(store)
    cas = remote_execution_pb2_grpc.ContentAddressableStorageStub(channel)
    print(HASH(b"").hexdigest())
    for text in action_digests:
        hash_, size = text.split("/")
        action_digest = Digest(hash=hash_, size_bytes=int(size))
        read = cas.BatchReadBlobs(
            remote_execution_pb2.BatchReadBlobsRequest(digests=[action_digest])
        )
        action = Action.FromString(read.responses[0].data)
        print(action_digest.hash, action.command_digest.hash, action.input_root_digest.hash)
        tree = remote_execution_pb2.GetTreeRequest(root_digest=action.input_root_digest)
        for page in cas.GetTree(tree):
            for directory in page.directories:
                for node in [*directory.files, *directory.directories]:
                    print(node.digest.hash)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--probe":
        return probe(argv[1])
    if len(argv) >= 2 and argv[0] == "--in-use":
        return blobs_in_use(argv[1], argv[2:])
    if len(argv) < 3 or argv[0] != "--store-keeps" or not argv[1].isdigit() or argv[2] != "--":
        print(
            "usage: bgd_server.py --store-keeps BYTES -- BGD-ARGS... | --probe HOST:PORT"
            " | --in-use STORE ACTION_DIGEST...",
            file=sys.stderr,
        )
        return 2
    install(int(argv[1]))
    sys.argv = ["bgd", *argv[3:]]
    return cli()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
