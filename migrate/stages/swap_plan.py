"""What the swap of a batch of partitions will do (``plan_batch``), and a helper process that plans it while the
swapping process renames the batch before.

A plan only reads files (stats and edge reads) and the verified results it is given: no write and no state, so it
can run anywhere on the host. The helper is a child started with ``python -m migrate.stages.swap_plan``, not through
multiprocessing: the swap runs on a Dask worker, a daemonic process, which multiprocessing forbids to have children.
The protocol is pickles over the child's stdin and stdout, one request at a time: the parent writes ``(plan_id,
count)`` then each partition only when the child waits for a request (the child plans each as it reads it), and reads
``("ok", planned)`` or ``("error", exception)`` before it writes again, so neither side ever blocks on a full pipe
while the other does. The state, every rename and every
decision stay with the parent. The child's pickles come from this parent alone.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from typing import Any, BinaryIO

from migrate.errors import LocatedError, MigrateError, ModelError, SourceChangedError
from migrate.model.run_state import Problem
from migrate.model.stage_reports import PartitionProblem
from migrate.run.swap_files import SegmentFiles, SwapSource
from migrate.run.swap_keys import SwapFileKey, swap_keys_text
from migrate.run.workspace import WORK_DIR_NAME
from migrate.segment.identity import changed_since_stat, edges_digest

# what the swap of one segment will do, planned: (base, swap files, their JSON as stored, edges of the output .log)
PlannedSegment = tuple[int, tuple[SwapFileKey, ...], str, str]
# a partition's: its name, its work dir's listing, its segments'
PlannedPartition = tuple[str, frozenset[str], list[PlannedSegment]]
# a batch as read from the state: per partition its name, its dir and its verified results as stored
Texts = list[tuple[str, str, list[tuple[int, str | None]]]]


def plan_batch(plan_id: str, partitions: Texts) -> tuple[list[PlannedPartition], list[PartitionProblem]]:
    """What each partition's swap will do, checked against its files: stats and edge reads, no write and no state,
    so that it can run in a helper process a batch ahead of the renames. ``partitions``: (name, partition dir, its
    verified results as stored). A partition whose live file changed after conversion comes back as a problem, left
    as it is; any other error is raised."""
    batch: list[PlannedPartition] = []
    failed: list[PartitionProblem] = []
    for name, part_dir, rows in partitions:
        try:
            segments: list[PlannedSegment] = []
            # one listing of the partition dir and of its work dir for the batch, instead of asking for each file
            # that must not exist (a segment's new .index and .timeindex; a backup not made yet)
            live_names = _listing(part_dir)
            work_names = _listing(os.path.join(part_dir, f"{WORK_DIR_NAME}-{plan_id}"))
            for base, result_text in rows:
                if result_text is not None:
                    files = SegmentFiles(part_dir, plan_id, base)
                    src = SwapSource.of_json(result_text, f"{name}/{base}: result")
                    swap, log_st = files.plan_swap(src, live_names)  # size, mtime, inode of every file
                    # then what a same-size rewrite shows
                    change = changed_since_stat(files.live(".log"), log_st, src)
                    if change is not None:
                        raise SourceChangedError(change, path=files.live(".log"))
                    if src.log_output is None:
                        raise ModelError(f"{name}/{base}: the verified result has no output .log")
                    segments.append((base, swap, swap_keys_text(swap), edges_digest(src.log_output)))
            batch.append((name, work_names, segments))
        except LocatedError as exc:  # a live file changed after conversion: leave the partition as it is
            failed.append(PartitionProblem(name, Problem.of(exc)))
    return batch, failed


def _listing(path: str) -> frozenset[str]:
    try:
        return frozenset(os.listdir(path))
    except FileNotFoundError:
        return frozenset()


class PlanHelper:
    """The parent's end: ``submit`` a batch, then ``result`` before the next ``submit``."""

    def __init__(self) -> None:
        env = dict(os.environ)
        # the child imports this very package, wherever it was imported from
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "migrate.stages.swap_plan"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self._writer: threading.Thread | None = None
        self._write_error: OSError | None = None

    def submit(self, plan_id: str, partitions: Texts) -> None:
        """A partition at a time (the child plans each as it reads it, so it holds one partition's texts, not the
        batch's: its memory counts with the run's), written by a thread: the child reads only as fast as it plans,
        and this process swaps meanwhile."""
        assert self._writer is None, "one request at a time: read its result first"
        self._writer = threading.Thread(target=self._write, args=(plan_id, partitions), name="swap-plan-request")
        self._writer.start()

    def _write(self, plan_id: str, partitions: Texts) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            pickle.dump((plan_id, len(partitions)), stdin, protocol=pickle.HIGHEST_PROTOCOL)
            for partition in partitions:
                pickle.dump(partition, stdin, protocol=pickle.HIGHEST_PROTOCOL)
            stdin.flush()
        except OSError as exc:  # the child is gone: ``result`` says so
            self._write_error = exc

    def result(self) -> Any:
        """The planned batch; the error ``plan_batch`` raised there, raised here; EOFError when the child is gone."""
        assert self._writer is not None
        self._writer.join()
        self._writer = None
        if self._write_error is not None:
            raise EOFError(f"the swap's plan helper is gone: {self._write_error}")
        stdout = self._proc.stdout
        assert stdout is not None
        kind, value = pickle.load(stdout)
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """End the child: both pipes closed (a reply it is still writing fails, its next read ends), it exits; killed
        if it does not within a few seconds."""
        if self._writer is not None:  # a request still being written ends when the child does: kill it first
            self._proc.kill()
            self._writer.join()
        for pipe in (self._proc.stdout, self._proc.stdin):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The child's loop: plan each batch asked for until the parent closes the pipe."""
    while True:
        try:
            plan_id, count = pickle.load(requests)
        except EOFError:
            return
        planned: tuple[list[PlannedPartition], list[PartitionProblem]] = ([], [])
        error: Exception | None = None
        for _ in range(count):  # every partition read, also after an error: the next request starts after them
            partition = pickle.load(requests)
            if error is None:
                try:
                    batch, failed = plan_batch(plan_id, [partition])
                except Exception as exc:  # the parent raises it as if it had planned the batch itself
                    error = exc
                else:
                    planned[0].extend(batch)
                    planned[1].extend(failed)
        reply: tuple[str, Any] = ("ok", planned) if error is None else ("error", error)
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
            if reply[0] == "error":
                pickle.loads(data)  # an exception whose constructor takes more than its message would not load there
        except Exception as exc:  # then its type and message go
            data = pickle.dumps(("error", MigrateError(f"{type(reply[1]).__name__}: {reply[1]} ({exc})")))
        try:
            replies.write(data)
            replies.flush()
        except BrokenPipeError:  # the parent stopped listening: it swaps no more
            return


if __name__ == "__main__":
    # the replies get stdout's descriptor to themselves: whatever else writes to stdout goes to stderr
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)
