"""What the swap of a batch of partitions will do (``plan_batch``), and a helper process that plans it while the
swapping process renames the batch before.

A plan only reads files (stats and edge reads) and the verified results it is given: no write and no state, so it
can run anywhere on the host. The helper is a child started with ``python -m migrate.stages.swap_plan``, not through
multiprocessing: the swap runs on a Dask worker, a daemonic process, which multiprocessing forbids to have children.
The protocol is pickles over the child's stdin and stdout, one request at a time: the parent writes ``(plan_id,
count)`` then each partition only when the child waits for a request (the child plans each as it reads it), and reads
``("ok", planned)`` or ``("error", exception)`` before it writes again, so neither side ever blocks on a full pipe
while the other does. The parent may ask for several batches ahead: its pump thread queues them and keeps to that
order. The state, every rename and every decision stay with the parent. The child's pickles come from this parent
alone.
"""

from __future__ import annotations

import os
import pickle
import queue
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
    """The parent's end: ``submit`` batches, as many ahead as the caller likes, then ``result`` of each in the order
    submitted. A thread of this process (the pump) writes one request at a time and reads its reply before it writes
    the next (the protocol above), so the child plans the next batch as soon as it has answered the one before,
    whether or not the swap has taken that answer yet."""

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
        self._requests: queue.SimpleQueue[tuple[str, Texts] | None] = queue.SimpleQueue()
        self._replies: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._pending = 0  # submitted, result not taken yet
        self._pump = threading.Thread(target=self._run, name="swap-plan-pump", daemon=True)
        self._pump.start()

    def submit(self, plan_id: str, partitions: Texts) -> None:
        """A batch to plan after those submitted before. Written a partition at a time (the child plans each as it
        reads it, so it holds one partition's texts, not the batch's: its memory counts with the run's)."""
        self._pending += 1
        self._requests.put((plan_id, partitions))

    def _run(self) -> None:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        while (request := self._requests.get()) is not None:
            plan_id, partitions = request
            try:
                pickle.dump((plan_id, len(partitions)), stdin, protocol=pickle.HIGHEST_PROTOCOL)
                for partition in partitions:
                    pickle.dump(partition, stdin, protocol=pickle.HIGHEST_PROTOCOL)
                stdin.flush()
                reply = pickle.load(stdout)
            except Exception as exc:
                # the child is gone, or its stream is unreadable: ``result`` says so (an error this thread let
                # escape would leave the swap waiting for a reply forever)
                self._replies.put(("gone", exc))
                return
            self._replies.put(reply)

    @property
    def pending(self) -> int:
        return self._pending

    def result(self) -> Any:
        """The first batch submitted whose result was not taken, planned; the error ``plan_batch`` raised there,
        raised here; EOFError when the child is gone (for this batch and every later one)."""
        assert self._pending > 0, "nothing submitted"
        kind, value = self._replies.get()
        if kind == "gone":
            self._replies.put((kind, value))  # every later result is gone too
            raise EOFError(f"the swap's plan helper is gone: {value}")
        self._pending -= 1
        if kind == "error":
            raise value
        return value

    def close(self) -> None:
        """End the child: a request it is still planning is cut short (killed: nobody will take its result), the
        pump ends, both pipes closed, it exits; killed if it does not within a few seconds."""
        if self._pending:
            self._proc.kill()
        self._requests.put(None)
        self._pump.join()
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
