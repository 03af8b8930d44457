"""rollback: put every original file back (bytes, mtimes, the same inodes) and remove everything the migration added.

Every live file of every partition of the log dir is checked before anything is renamed: a file changed after the
swap (a broker ran) refuses the whole rollback unless ``force``, so a refusal never leaves some partitions rolled
back and others not. A partition mid-swap or mid-rollback after a crash is recognised file by file (original, ours,
or changed), so a rollback interrupted between a rename and its record resumes without blaming a broker.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
from collections.abc import Collection
from pathlib import Path

from migrate.errors import MigrateError
from migrate.model.plan_tree import Plan
from migrate.model.run_state import EventKind, LogDirPhase, PartitionState, SegmentState
from migrate.model.stage_reports import RollbackReport
from migrate.run import fence
from migrate.run.state import StateStore
from migrate.run.swap_files import SegmentFiles
from migrate.run.swap_keys import swap_file_keys_of
from migrate.run.workspace import sync_filesystem, work_dir
from migrate.stages.common import kafka_lock, locate, restore_dir_mtimes
from migrate.stages.reconcile import LIVE, Reconciliation, files_mixed, open_reconciled


def live_changes(plan: Plan, key: str, store: StateStore, settled: Collection[str] = ()) -> list[str]:
    """Live files changed after their swap. ``settled``: partitions the reconciliation just judged by a record that
    is exactly the database's swap files, none changed (``Reconciliation.settled``): asked the same of the same
    files, so not asked again."""
    changed = []
    for name in store.partitions_in(*LIVE):
        if name in settled:
            continue
        part = plan.partition(key, name)
        for row in store.segments_of(name):
            if row.swap:
                changed += SegmentFiles(part.dir, plan.plan_id, row.base).change(row.swap)
    return changed


def rollback_check_log_dir(plan: Plan, key: str) -> tuple[list[str], tuple[str, ...]]:
    """Live files of this log dir changed after their swap (run on every log dir before any rollback renames a file;
    it may correct the state from the files, and renames nothing), and what the files said otherwise than the state:
    the correction is made here, so the rollback that follows finds nothing left to report, and the operator must
    still be told (a rebuilt database, a stale partition state)."""
    entry, log_dir = locate(plan, key)
    store, reconciled = open_reconciled(plan, key, entry, log_dir, write=True, tidy=False)
    if store is None:
        return [], reconciled.lines
    with store:
        return _changes(plan, key, store, reconciled), reconciled.lines


def _changes(plan: Plan, key: str, store: StateStore, reconciled: Reconciliation) -> list[str]:
    """Changed live files, by the swaps the state holds (reconciliation put every swap the files show there), and
    partitions whose swap record cannot be read while their files are not the planned ones."""
    unreadable = [f"{p.problem.path}: {p.problem.message}" for p in reconciled.unresolved if p.problem.kind == "state"]
    return live_changes(plan, key, store, reconciled.settled) + unreadable


ROLLBACK_BATCH_PARTITIONS = 256


def restore_partitions(plan: Plan, key: str, store: StateStore, names: list[str], force: bool) -> None:
    """Put back the originals of ``names``, a batch at a time: mark the batch rolling back, restore its files,
    make that durable with one syncfs, then record it rolled back."""
    for i in range(0, len(names), ROLLBACK_BATCH_PARTITIONS):
        batch = names[i : i + ROLLBACK_BATCH_PARTITIONS]
        store.set_partitions(batch, PartitionState.ROLLING_BACK, EventKind.ROLLBACK_BEGUN)
        for name in batch:
            part = plan.partition(key, name)
            # the work dir listed once: staged files already renamed in are not unlinked one by one
            folder = work_dir(part.dir, plan.plan_id)
            try:
                work_names = frozenset(os.listdir(folder))
            except FileNotFoundError:
                work_names = frozenset()
            for base, swap in reversed(store.swap_rows(name)):
                files = swap_file_keys_of(swap, f"{name}/{base}")
                SegmentFiles(part.dir, plan.plan_id, base).restore_keys(files, force, work_names)
        # the originals durable before their swap records go: a record never disappears while its renames may not
        sync_filesystem(plan.log_dir(key).log_dir)
        for name in batch:
            remove_work_dir(plan.partition(key, name).dir, plan.plan_id)
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(
            batch, PartitionState.ROLLED_BACK, EventKind.PARTITION_ROLLED_BACK, SegmentState.ROLLED_BACK
        )


def rollback_log_dir(plan: Plan, key: str, force: bool = False) -> RollbackReport:
    entry, log_dir = locate(plan, key)
    opened, reconciled = open_reconciled(plan, key, entry, log_dir, write=True)
    if opened is None:
        owner = fence.fence_plan_id(log_dir)
        if fence.is_up(log_dir):
            raise MigrateError(
                f"{log_dir}: the fence is up but nothing of plan {plan.plan_id} is here: it belongs to "
                f"{f'plan {owner}' if owner else 'another plan'}. Run rollback with that plan's file (its id is in "
                "the fence's README.txt)."
            )
        # NEW: no run of this plan changed the log dir; an empty state left by a crash before its first commit is
        # gone now, and with it the only trace of that run
        phase = LogDirPhase.ROLLED_BACK if reconciled.removed_empty else LogDirPhase.NEW
        return RollbackReport(key, phase, (), reconciled=reconciled.lines)
    with opened as store:
        if store.phase == LogDirPhase.FINALIZED:
            raise MigrateError(
                f"{log_dir}: the migration was finalized and its originals deleted; there is nothing to roll back to"
            )
        with kafka_lock(log_dir, store):
            changed = _changes(plan, key, store, reconciled)
            if changed and not force:
                return RollbackReport(key, store.phase, (), tuple(changed), reconciled=reconciled.lines)
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
            mixed = files_mixed(plan, key, store)
            if mixed:  # never reached while restore is sound; if it is, the fence must not come down
                raise MigrateError(
                    f"{log_dir}: after the rollback {len(mixed)} partition(s) still have a swap record and live files "
                    f"that are not all original (e.g. {mixed[0]}); the fence stays up. Run `rollback --force` again; "
                    "if it says the same, restore those partitions from a replica."
                )
            store.set_phase(LogDirPhase.ROLLED_BACK, EventKind.ROLLED_BACK, partitions=len(live))
            if fence.lower_fence(log_dir):
                store.record_event(EventKind.FENCE_DOWN)
        restore_dir_mtimes({p.dir: p.dir_mtime_ns for p in entry.partitions})
        return RollbackReport(
            key, LogDirPhase.ROLLED_BACK, tuple(live), tuple(changed), force, reconciled=reconciled.lines
        )


def remove_work_dirs(partition_dirs: list[str], plan_id: str) -> None:
    """Remove many partitions' work dirs: unlinks and rmdirs wait on the disk, not on Python, so a few threads
    overlap them (10^4 partitions)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda d: remove_work_dir(d, plan_id), partition_dirs))


def remove_work_dir(partition_dir: str | Path, plan_id: str) -> None:
    """Delete the partition's staging and backups for this plan, and our directory if nothing else is left. The
    caller makes the removals durable with one syncfs for all partitions."""
    shutil.rmtree(work_dir(partition_dir, plan_id), ignore_errors=True)
