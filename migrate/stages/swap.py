"""swap: under Kafka's .lock and the fence, every ready partition of a log dir goes live, a batch at a time.

Per batch of partitions: re-check every live file against what conversion saw (a changed file fails its partition,
untouched); commit the swap plan (each file's original and output identity) in one transaction; back up and rename;
one syncfs; commit the batch as migrated. A partition whose swap began (``swapping``, after a crash) is finished
first, whatever else happens. A file that refuses a link or a rename (an immutable file: EPERM) has its partition's
swap undone and failed, and the others go on; any other I/O error stops the stage with the fence up, at a state that
``execute`` and ``rollback`` both finish. The fence comes down only when no partition is mixed.
"""

from __future__ import annotations

import errno
from pathlib import Path

from migrate.errors import LocatedError, StateWriteError
from migrate.model import (
    EventKind,
    LogDirPhase,
    PartitionPlan,
    PartitionProblem,
    PartitionState,
    Plan,
    Problem,
    SegmentState,
    SwapReport,
)
from migrate.run import faults, fence
from migrate.run.state import StateStore, SwapFile
from migrate.run.swap_files import SegmentFiles
from migrate.run.workspace import sync_filesystem
from migrate.stages.common import kafka_lock, locate

SWAP_BATCH_PARTITIONS = 256
_ISOLATED_ERRNOS = (errno.EPERM, errno.EACCES)  # one file's attribute or permission: its partition only


def swap_log_dir(plan: Plan, key: str, swap_ready: bool = True) -> SwapReport:
    """``swap_ready=False`` (the run stopped on an I/O error in this log dir): only finish partitions a crash left
    mid-swap and lower the fence if nothing is mixed; ready partitions wait for the next execute."""
    _, log_dir = locate(plan, key)
    with StateStore.open(log_dir, plan.plan_id) as store:
        if store.phase in (LogDirPhase.FINALIZED, LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
            return SwapReport(key, (), (), (), fence.is_up(log_dir))
        migrated: list[str] = []
        failed: list[PartitionProblem] = []
        stopped: Problem | None = None
        with kafka_lock(log_dir, store):
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            try:
                migrated += _finish_swapping(plan, key, store)
                ready = store.partitions_in(PartitionState.READY) if swap_ready else []
                for i in range(0, len(ready), SWAP_BATCH_PARTITIONS):
                    done, bad = _swap_batch(plan, key, store, ready[i : i + SWAP_BATCH_PARTITIONS])
                    migrated += done
                    failed += bad
            except (OSError, StateWriteError) as exc:
                stopped = Problem.of(exc) if isinstance(exc, OSError) else Problem("io-error", str(exc))
            mixed = store.partitions_in(PartitionState.SWAPPING, PartitionState.ROLLING_BACK)
            try:
                # the fence is up exactly while a partition is mixed, whatever stopped the stage
                if not mixed and fence.lower_fence(log_dir):
                    store.record_event(EventKind.FENCE_DOWN)
                if stopped is None and not store.partitions_in(
                    *(s for s in PartitionState if s != PartitionState.MIGRATED)
                ):
                    store.set_phase(LogDirPhase.MIGRATED)
                store.record_event(EventKind.RUN_ENDED, verb="execute", migrated=len(migrated), failed=len(failed))
            except (OSError, StateWriteError) as exc:  # a full disk may refuse the record; the fence is the truth
                stopped = stopped or (Problem.of(exc) if isinstance(exc, OSError) else Problem("io-error", str(exc)))
        return SwapReport(key, tuple(migrated), tuple(failed), tuple(mixed), fence.is_up(log_dir), stopped)


def _files(plan: Plan, part: PartitionPlan, base: int) -> SegmentFiles:
    return SegmentFiles(Path(part.dir), plan.plan_id, base)


def _finish_swapping(plan: Plan, key: str, store: StateStore) -> list[str]:
    """Partitions a crash left mid-swap: every rename they planned is done (the state has each file's identity)."""
    names = store.partitions_in(PartitionState.SWAPPING)
    for name in names:
        part = plan.partition(key, name)
        for row in store.segments_of(name):
            if row.swap:
                _files(plan, part, row.base).swap_in(row.swap)
    if names:
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(names, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)
    return names


def _swap_batch(plan: Plan, key: str, store: StateStore, names: list[str]) -> tuple[list[str], list[PartitionProblem]]:
    failed: list[PartitionProblem] = []
    batch: list[tuple[str, list[tuple[int, tuple[SwapFile, ...]]]]] = []
    for name in names:
        part = plan.partition(key, name)
        try:
            segments = []
            for row in store.segments_of(name):
                if row.state == SegmentState.VERIFIED and row.result is not None:
                    segments.append((row.base, _files(plan, part, row.base).plan_swap(row.result)))
            batch.append((name, segments))
        except LocatedError as exc:  # a live file changed after conversion: leave the partition as it is
            problem = Problem.of(exc)
            store.fail_partition(name, problem)
            failed.append(PartitionProblem(name, problem))
    if not batch:
        return [], failed
    store.begin_swap(batch)
    done = []
    for name, segments in batch:
        part = plan.partition(key, name)
        try:
            for base, files in segments:
                _files(plan, part, base).swap_in(files)
            done.append(name)
        except (OSError, LocatedError) as exc:
            problem = Problem.of(exc)
            if isinstance(exc, OSError) and exc.errno not in _ISOLATED_ERRNOS:
                # a disk-wide failure: undo this partition if we can, then stop with the state recorded
                _undo(plan, part, segments, store, problem)
                if done:
                    sync_filesystem(plan.log_dir(key).log_dir)
                    store.set_partitions(
                        done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED
                    )
                raise
            if _undo(plan, part, segments, store, problem):
                failed.append(PartitionProblem(name, problem))
    faults.point("before:syncfs-swap")
    sync_filesystem(plan.log_dir(key).log_dir)
    if done:
        store.set_partitions(done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)
    return done, failed


def _undo(
    plan: Plan,
    part: PartitionPlan,
    segments: list[tuple[int, tuple[SwapFile, ...]]],
    store: StateStore,
    problem: Problem,
) -> bool:
    """Put a partition whose swap failed half way back to its originals; True if it is wholly original again."""
    try:
        for base, files in reversed(segments):
            _files(plan, part, base).restore(files)
        sync_filesystem(part.dir)
    except (OSError, LocatedError):
        return False  # stays swapping: the fence stays up and the next execute or rollback finishes it
    store.fail_partition(part.name, problem)
    return True
