"""swap: under Kafka's .lock and the fence, every ready partition of a log dir goes live, a batch at a time.

Per batch of partitions: re-check every live file against what conversion saw (a changed file fails its partition,
untouched); commit the swap plan (each file's original and output identity) in one transaction; back up and rename;
one syncfs; commit the batch as migrated. A partition whose swap began (``swapping``, after a crash) is finished
first, whatever else happens. A file that refuses a link or a rename (an immutable file: EPERM) has its partition's
swap undone and failed, and the others go on; any other I/O error stops the stage with the fence up, at a state that
``execute`` and ``rollback`` both finish. The fence comes down only when no partition is mixed.
"""

from __future__ import annotations

import contextlib
import errno
import pickle
from collections import deque
from collections.abc import Iterator

from migrate.errors import LocatedError, MigrateError, StateWriteError
from migrate.model.plan_tree import PartitionPlan, Plan
from migrate.model.run_state import EventKind, LogDirPhase, PartitionState, Problem, SegmentState
from migrate.model.stage_reports import PartitionProblem, SwapReport
from migrate.run import faults, fence
from migrate.run.state import StateStore
from migrate.run.swap_files import SegmentFiles, partition_dirs
from migrate.run.swap_keys import SwapFileKey
from migrate.run.swap_record import record_text_of, write_records
from migrate.run.workspace import sync_filesystem
from migrate.stages.common import kafka_lock, locate
from migrate.stages.reconcile import files_mixed, open_reconciled
from migrate.stages.swap_plan import PlanHelper, PlannedPartition, Texts, plan_batch

# a batch's partitions share one syncfs before their first rename; its segments' texts are held until then (~3.5 KB
# a segment), so a batch is bounded by both: 256 partitions of 100 segments held 90 MB
SWAP_BATCH_PARTITIONS = 256
SWAP_BATCH_SEGMENTS = 2048
_ISOLATED_ERRNOS = (errno.EPERM, errno.EACCES)  # one file's attribute or permission: its partition only


def swap_log_dir(plan: Plan, key: str, swap_ready: bool = True) -> SwapReport:
    """``swap_ready=False`` (the run stopped on an I/O error in this log dir): only finish partitions a crash left
    mid-swap and lower the fence if nothing is mixed; ready partitions wait for the next execute."""
    entry, log_dir = locate(plan, key)
    opened, _ = open_reconciled(plan, key, entry, log_dir, write=True)
    if opened is None:
        raise MigrateError(
            f"{log_dir}: no run of plan {plan.plan_id} has begun here; run `execute` (it prepares first)"
        )
    with opened as store:
        if store.phase in (LogDirPhase.FINALIZED, LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
            return SwapReport(key, (), (), (), fence.is_up(log_dir))
        migrated: list[str] = []
        failed: list[PartitionProblem] = []
        stopped: Problem | None = None
        with kafka_lock(log_dir, store):
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            try:
                done, stuck = _finish_swapping(plan, key, store)
                migrated += done
                failed += stuck
                ready = store.partitions_in(PartitionState.READY) if swap_ready else []
                # closed on the way out, whatever stops the loop: no helper is left reading files then
                ahead = _planned_ahead(plan, key, store, list(_batches(plan, key, ready)))
                with contextlib.closing(ahead) as planned_batches:
                    for planned in planned_batches:
                        done, bad = _swap_batch(plan, key, store, planned)
                        migrated += done
                        failed += bad
            except (OSError, StateWriteError) as exc:
                stopped = Problem.of(exc) if isinstance(exc, OSError) else Problem("io-error", str(exc))
            mixed = store.partitions_in(PartitionState.SWAPPING, PartitionState.ROLLING_BACK)
            try:
                # the fence is up exactly while a partition is mixed, whatever stopped the stage; the files are
                # asked too, not only the state (but not of the partitions this call has just swapped whole)
                mixed = sorted({*mixed, *files_mixed(plan, key, store, swapped_now=migrated)})
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


def _batches(plan: Plan, key: str, names: list[str]) -> Iterator[list[str]]:
    """``names`` in order, in batches of at most ``SWAP_BATCH_PARTITIONS`` partitions and, unless one partition has
    more, ``SWAP_BATCH_SEGMENTS`` planned segments."""
    batch: list[str] = []
    segments = 0
    for name in names:
        count = len(plan.partition(key, name).segments)
        if batch and (len(batch) == SWAP_BATCH_PARTITIONS or segments + count > SWAP_BATCH_SEGMENTS):
            yield batch
            batch, segments = [], 0
        batch.append(name)
        segments += count
    if batch:
        yield batch


def _files(plan: Plan, part: PartitionPlan, base: int) -> SegmentFiles:
    return SegmentFiles(part.dir, plan.plan_id, base)


def _finish_swapping(plan: Plan, key: str, store: StateStore) -> tuple[list[str], list[PartitionProblem]]:
    """Partitions a crash left mid-swap: every rename they planned is done (their swap records hold each file's
    identity), but only where every file of the partition is still the original or the verified output: one file
    changed meanwhile stops the whole partition before its first rename, mixed as it is, for rollback to restore."""
    names = store.partitions_in(PartitionState.SWAPPING)
    done: list[str] = []
    stuck: list[PartitionProblem] = []
    for name in names:
        part = plan.partition(key, name)
        rows = [(row.base, row.swap) for row in store.segments_of(name) if row.swap]
        problems = [p for base, files in rows for p in _files(plan, part, base).before_rename(files)]
        if problems:
            stuck.append(
                PartitionProblem(
                    name,
                    Problem(
                        "live-changed",
                        f"{problems[0]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}: the swap "
                        "of this partition was not finished, and it may be mixed, so the fence stays up. "
                        "`rollback` puts its originals back (`rollback --force` if a broker wrote to it)",
                        part.dir,
                    ),
                )
            )
            continue
        for base, files in rows:
            _files(plan, part, base).swap_in(files)
        done.append(name)
    if done:
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)
    return done, stuck


# as the batch swaps them: per segment also the result's JSON as stored and the segment's files
_Planned = tuple[str, frozenset[str], list[tuple[int, tuple[SwapFileKey, ...], str, str, str, SegmentFiles]]]


# a swap of at least this many segments plans its batches in a helper process, ahead of the renames: the plan is half
# of a tiny segment's swap, and the second core is otherwise idle (below, the helper's start costs more)
SWAP_HELPER_MIN_SEGMENTS = 16384
SWAP_PLAN_AHEAD = 2  # batches the helper is asked for ahead of the one being renamed


def _planned_ahead(
    plan: Plan, key: str, store: StateStore, batches: list[list[str]]
) -> Iterator[tuple[list[_Planned], list[PartitionProblem]]]:
    """Each batch planned (``plan_batch``), in order. A large swap plans its first batch here while a helper process
    (``swap_plan``) starts and plans the next ones, then every later batch in the helper, ``SWAP_PLAN_AHEAD`` ahead
    of the one the caller renames: the state is read here (its connection is this process's), the helper only reads
    files. A helper that cannot start or dies leaves the rest to this process."""

    def read(names: list[str]) -> Texts:
        return [(name, plan.partition(key, name).dir, store.verified_texts_of(name)) for name in names]

    def joined(
        texts: Texts, planned: tuple[list[PlannedPartition], list[PartitionProblem]]
    ) -> tuple[list[_Planned], list[PartitionProblem]]:
        results = {name: dict(rows) for name, _, rows in texts}
        dirs = {name: part_dir for name, part_dir, _ in texts}
        batch = [
            (
                name,
                work_names,
                [
                    (base, swap, text, results[name][base], edges, SegmentFiles(dirs[name], plan.plan_id, base))
                    for base, swap, text, edges in segments
                ],
            )
            for name, work_names, segments in planned[0]
        ]
        return batch, planned[1]

    segments = sum(len(plan.partition(key, name).segments) for names in batches for name in names)
    if len(batches) < 2 or segments < SWAP_HELPER_MIN_SEGMENTS:
        for names in batches:
            texts = read(names)
            yield joined(texts, plan_batch(plan.plan_id, texts))
        return
    try:
        helper: PlanHelper | None = PlanHelper()
    except OSError:  # no process can start here: this one plans every batch
        helper = None
    asked: deque[Texts] = deque()  # batches after the current one, read and submitted, oldest first
    try:
        for i, names in enumerate(batches):
            if asked:
                texts = asked.popleft()
                planned = None
                if helper is not None:
                    try:
                        planned = helper.result()
                    except (EOFError, OSError, pickle.UnpicklingError):
                        # the helper died, or met an I/O error: this process plans the rest (and meets that error
                        # again, if the disk gives it)
                        helper = _closed(helper)
            else:
                texts, planned = read(names), None
            # the next batches, planned there while this one is renamed: a few ahead, so that one batch slower to
            # plan than to rename does not hold the swap
            while helper is not None and i + len(asked) + 1 < min(len(batches), i + 1 + SWAP_PLAN_AHEAD):
                ahead = read(batches[i + len(asked) + 1])
                asked.append(ahead)
                helper.submit(plan.plan_id, ahead)  # queued: a helper gone by then says so at its ``result``
            yield joined(texts, planned if planned is not None else plan_batch(plan.plan_id, texts))
    finally:
        _closed(helper)


def _closed(helper: PlanHelper | None) -> None:
    if helper is not None:
        helper.close()
    return None


def _swap_batch(
    plan: Plan, key: str, store: StateStore, planned: tuple[list[_Planned], list[PartitionProblem]]
) -> tuple[list[str], list[PartitionProblem]]:
    """A planned batch's swap: its swap plan committed, the files' own records durable, then every rename."""
    batch, failed = planned
    for problem in failed:
        store.fail_partition(problem.partition, problem.problem)
    failed = list(failed)
    if not batch:
        return [], failed
    store.begin_swap([(name, [(s[0], s[2]) for s in segments]) for name, _, segments in batch])
    # the files' own record of the swap, durable before the first rename: whatever becomes of the database, the
    # files then say which partition is original, mixed or converted (migrate.run.swap_record)
    write_records(
        [
            (
                plan.partition(key, name).dir,
                plan.plan_id,
                record_text_of(
                    plan.plan_id, name, ((base, text, result, edges) for base, _, text, result, edges, _ in segments)
                ),
            )
            for name, _, segments in batch
        ]
    )
    sync_filesystem(plan.log_dir(key).log_dir)
    done = []
    for name, work_names, segments in batch:
        part = plan.partition(key, name)
        try:
            with partition_dirs(part.dir, plan.plan_id) as dirs:
                for _, files, *_, at in segments:
                    at.swap_in_keys(files, work_names, dirs)
            done.append(name)
        except (OSError, LocatedError) as exc:
            problem = Problem.of(exc)
            if isinstance(exc, OSError) and exc.errno not in _ISOLATED_ERRNOS:
                # a disk-wide failure: undo this partition if we can, then stop with the state recorded
                _undo(plan, part, [(s[0], s[1]) for s in segments], store, problem)
                if done:
                    sync_filesystem(plan.log_dir(key).log_dir)
                    store.set_partitions(
                        done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED
                    )
                raise
            if _undo(plan, part, [(s[0], s[1]) for s in segments], store, problem):
                failed.append(PartitionProblem(name, problem))
    faults.point("before:syncfs-swap")
    sync_filesystem(plan.log_dir(key).log_dir)
    if done:
        store.set_partitions(done, PartitionState.MIGRATED, EventKind.PARTITION_MIGRATED, SegmentState.SWAPPED)
    return done, failed


def _undo(
    plan: Plan,
    part: PartitionPlan,
    segments: list[tuple[int, tuple[SwapFileKey, ...]]],
    store: StateStore,
    problem: Problem,
) -> bool:
    """Put a partition whose swap failed half way back to its originals; True if it is wholly original again."""
    try:
        for base, files in reversed(segments):
            _files(plan, part, base).restore_keys(files)
        sync_filesystem(part.dir)
    except (OSError, LocatedError):
        return False  # stays swapping: the fence stays up and the next execute or rollback finishes it
    store.fail_partition(part.name, problem)
    return True
