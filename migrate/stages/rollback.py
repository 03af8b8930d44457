"""rollback: put every original file back (bytes, mtimes, the same inodes) and remove everything the migration added.

Every live file of every partition of the log dir is checked before anything is renamed: a file changed after the
swap (a broker ran) refuses the whole rollback unless ``force``, so a refusal never leaves some partitions rolled
back and others not. A partition mid-swap or mid-rollback after a crash is recognised file by file (original, ours,
or changed), so a rollback interrupted between a rename and its record resumes without blaming a broker.
"""

from __future__ import annotations

import concurrent.futures
import shutil
from pathlib import Path

from migrate.errors import MigrateError
from migrate.model import EventKind, LogDirPhase, PartitionState, Plan, RollbackReport, SegmentState
from migrate.run import fence
from migrate.run.state import StateStore, remove_state_files
from migrate.run.swap_files import SegmentFiles
from migrate.run.workspace import sync_filesystem, work_dir
from migrate.stages.common import kafka_lock, locate, restore_dir_mtimes

LIVE = (PartitionState.SWAPPING, PartitionState.MIGRATED, PartitionState.ROLLING_BACK)


def live_changes(plan: Plan, key: str, store: StateStore) -> list[str]:
    changed = []
    for name in store.partitions_in(*LIVE):
        part = plan.partition(key, name)
        for row in store.segments_of(name):
            if row.swap:
                changed += SegmentFiles(Path(part.dir), plan.plan_id, row.base).change(row.swap)
    return changed


def rollback_check_log_dir(plan: Plan, key: str) -> list[str]:
    """Live files of this log dir changed after their swap (read-only: run on every log dir before any rollback)."""
    _, log_dir = locate(plan, key)
    if not StateStore.exists(log_dir, plan.plan_id):
        return []
    with StateStore.open(log_dir, plan.plan_id) as store:
        return live_changes(plan, key, store)


ROLLBACK_BATCH_PARTITIONS = 256


def restore_partitions(plan: Plan, key: str, store: StateStore, names: list[str], force: bool) -> None:
    """Put back the originals of ``names``, a batch at a time: mark the batch rolling back, restore its files,
    make that durable with one syncfs, then record it rolled back."""
    for i in range(0, len(names), ROLLBACK_BATCH_PARTITIONS):
        batch = names[i : i + ROLLBACK_BATCH_PARTITIONS]
        store.set_partitions(batch, PartitionState.ROLLING_BACK, EventKind.ROLLBACK_BEGUN)
        for name in batch:
            part = plan.partition(key, name)
            for row in reversed(store.segments_of(name)):
                if row.swap:
                    SegmentFiles(Path(part.dir), plan.plan_id, row.base).restore(row.swap, force)
            remove_work_dir(part.dir, plan.plan_id)
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(
            batch, PartitionState.ROLLED_BACK, EventKind.PARTITION_ROLLED_BACK, SegmentState.ROLLED_BACK
        )


def rollback_log_dir(plan: Plan, key: str, force: bool = False) -> RollbackReport:
    entry, log_dir = locate(plan, key)
    if not StateStore.exists(log_dir, plan.plan_id):
        if fence.is_up(log_dir):
            raise MigrateError(
                f"{log_dir}: the fence is up but there is no state of plan {plan.plan_id} here: it belongs to another "
                "plan. Run rollback with the plan file named in the fence's README.txt."
            )
        return RollbackReport(key, LogDirPhase.NEW, ())
    with StateStore.open(log_dir, plan.plan_id) as store:
        initialized = store.initialized
    if not initialized:  # a crash before the first commit: nothing was recorded, so nothing was changed
        remove_state_files(log_dir, plan.plan_id)
        return RollbackReport(key, LogDirPhase.ROLLED_BACK, ())
    with StateStore.open(log_dir, plan.plan_id) as store:
        if store.phase == LogDirPhase.FINALIZED:
            raise MigrateError(
                f"{log_dir}: the migration was finalized and its originals deleted; there is nothing to roll back to"
            )
        with kafka_lock(log_dir, store):
            changed = live_changes(plan, key, store)
            if changed and not force:
                return RollbackReport(key, store.phase, (), tuple(changed))
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            if store.phase != LogDirPhase.ROLLING_BACK:
                store.set_phase(LogDirPhase.ROLLING_BACK, EventKind.ROLLBACK_BEGUN, force=force)
            live = store.partitions_in(*LIVE)
            restore_partitions(plan, key, store, live, force)
            rest = store.partitions_in(*(s for s in PartitionState if s != PartitionState.ROLLED_BACK))
            remove_work_dirs([plan.partition(key, name).dir for name in rest], plan.plan_id)
            store.set_partitions(rest, PartitionState.ROLLED_BACK, EventKind.PARTITION_ROLLED_BACK)
            sync_filesystem(log_dir)
            store.set_phase(LogDirPhase.ROLLED_BACK, EventKind.ROLLED_BACK, partitions=len(live))
            if fence.lower_fence(log_dir):
                store.record_event(EventKind.FENCE_DOWN)
        restore_dir_mtimes({p.dir: p.dir_mtime_ns for p in entry.partitions})
        return RollbackReport(key, LogDirPhase.ROLLED_BACK, tuple(live), tuple(changed), force)


def remove_work_dirs(partition_dirs: list[str], plan_id: str) -> None:
    """Remove many partitions' work dirs: unlinks and rmdirs wait on the disk, not on Python, so a few threads
    overlap them (10^4 partitions)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda d: remove_work_dir(d, plan_id), partition_dirs))


def remove_work_dir(partition_dir: str | Path, plan_id: str) -> None:
    """Delete the partition's staging and backups for this plan, and our directory if nothing else is left. The
    caller makes the removals durable with one syncfs for all partitions."""
    shutil.rmtree(work_dir(partition_dir, plan_id), ignore_errors=True)
