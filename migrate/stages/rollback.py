"""rollback: every partition's original directory back at its path (the same inode: its files' bytes, mtimes,
owner and mode as they were) and everything the migration added removed.

Every partition whose swap began is judged before anything moves: a new directory whose files are not as the swap
left them (a broker ran on it) refuses the whole rollback unless ``force``, naming each file, so a refusal never
leaves some partitions rolled back and others not. A partition mid-swap or mid-rollback after a crash is placed by
its directories (``migrate.run.partition.standing``) and taken back from wherever it stands.
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import stat
from pathlib import Path

from migrate.errors import MigrateError
from migrate.model.plan_tree import Plan
from migrate.model.run_state import EventKind, LogDirPhase, PartitionState, SegmentState, Standing
from migrate.model.stage_reports import RollbackReport
from migrate.prestage.cutover import plan_staging_tree
from migrate.prestage.tree import StagingTree
from migrate.run import fence
from migrate.run.partition.after import cleaned_partitions
from migrate.run.partition.moves import built_place, move_out, remove_work
from migrate.run.partition.places import PartitionPlaces
from migrate.run.partition.reconcile import LIVE, Reconciliation, open_reconciled, places_of
from migrate.run.state import StateStore
from migrate.run.workspace import sync_filesystem, work_dir
from migrate.stages.common import kafka_lock, locate, partition_after, restore_dir_mtimes

ROLLBACK_BATCH_PARTITIONS = 256


def rollback_check_log_dir(plan: Plan, key: str) -> tuple[list[str], tuple[str, ...]]:
    """Files of this log dir changed after their swap (run on every log dir before any rollback moves a directory;
    it may correct the state from the files, and moves nothing), and what the files said otherwise than the state:
    the correction is made here, so the rollback that follows finds nothing left to report, and the operator must
    still be told (a rebuilt database, a stale partition state)."""
    entry, log_dir = locate(plan, key)
    store, reconciled = open_reconciled(plan, key, entry, log_dir, write=True, tidy=False)
    if store is None:
        return [], reconciled.lines
    with store:
        return _changes(plan, key, store, reconciled), reconciled.lines


def _changes(plan: Plan, key: str, store: StateStore, reconciled: Reconciliation) -> list[str]:
    """What a rollback would lose: in each partition at its converted directory, what the broker appended, rolled,
    truncated, cleaned or deleted since the swap, and converted bytes changed otherwise (files only resized or
    touched, the same bytes, lose nothing); and partitions whose directories cannot be placed (something else at
    their path, an unreadable record)."""
    out = [f"{p.problem.path or p.partition}: {p.problem.message}" for p in reconciled.unresolved]
    cleaned = cleaned_partitions(plan.log_dir(key).log_dir)
    for name in store.partitions_in(*LIVE):
        where = reconciled.standings.get(name)
        if where == Standing.FINALIZED:
            out.append(
                f"{name}: its original was deleted already (a finalize began): there is nothing to roll back to. Run "
                "`finalize` again to finish it."
            )
            continue
        if where != Standing.CONVERTED:
            continue  # mid-swap: the broker cannot have started (the fence was up), nothing of its is at stake
        after = partition_after(plan, key, name, cleaned, store)
        if after is not None:
            directory = plan.partition(key, name).dir
            out += [f"{directory}/{f.name}: {f.fate}: {f.detail}" for f in after.lost_by_rollback]
    return out


def restore_partitions(plan: Plan, key: str, store: StateStore, names: list[str], tree: StagingTree | None) -> None:
    """Put back the originals of ``names``, a batch at a time: mark the batch rolling back, move each partition back
    from wherever it stands, make that durable with one syncfs, then record it rolled back."""
    for i in range(0, len(names), ROLLBACK_BATCH_PARTITIONS):
        batch = names[i : i + ROLLBACK_BATCH_PARTITIONS]
        store.set_partitions(batch, PartitionState.ROLLING_BACK, EventKind.ROLLBACK_BEGUN)
        for name in batch:
            exchange = store.exchange_of(name)
            places = places_of(plan, key, name)
            if exchange is not None:
                place = built_place(places, exchange.new, tree.fd if tree is not None else None)
                try:
                    move_out(places, exchange.original, exchange.new, exchange.method, place)
                finally:
                    if place is not None:
                        place.close()
        sync_filesystem(plan.log_dir(key).log_dir)
        for name in batch:
            _clear(plan, key, name, tree)
        sync_filesystem(plan.log_dir(key).log_dir)
        store.set_partitions(
            batch, PartitionState.ROLLED_BACK, EventKind.PARTITION_ROLLED_BACK, SegmentState.ROLLED_BACK
        )


def _clear(plan: Plan, key: str, name: str, tree: StagingTree | None) -> None:
    """Nothing of the migration left in a partition that is wholly original: its work dir (conversions, the new
    directory a cold run built) gone, the hard links a cut-over's build made into its staging dir gone (the staged
    segments stay staged), and the directory's mtime as planned."""
    places = places_of(plan, key, name)
    if places.staging is not None and tree is not None:
        _unlink_links(places, tree)
    remove_work(places, plan.partition(key, name).dir_mtime_ns)


def _unlink_links(places: PartitionPlaces, tree: StagingTree) -> None:
    """Remove from a partition's staging dir every file that is a hard link to the live file of its name (what a
    cut-over's build made there before it was undone): a pass refuses a tree holding a link to a live file."""
    staging = tree.partition(places.name)
    if staging is None:
        return
    with staging:
        live = os.open(places.live, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for name in staging.names():
                st = staging.lstat(name)
                if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink < 2:
                    continue
                try:
                    there = os.stat(name, dir_fd=live, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(name, dir_fd=staging.fd)
        finally:
            os.close(live)


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
        with kafka_lock(log_dir, store), plan_staging_tree(entry.log_dir, entry.staging_dir) as tree:
            changed = _changes(plan, key, store, reconciled)
            if changed and not force:
                return RollbackReport(key, store.phase, (), tuple(changed), reconciled=reconciled.lines)
            unknown = [p.partition for p in reconciled.unresolved]
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            if store.phase != LogDirPhase.ROLLING_BACK:
                store.set_phase(LogDirPhase.ROLLING_BACK, EventKind.ROLLBACK_BEGUN, force=force)
            live = [n for n in store.partitions_in(*LIVE) if n not in unknown]
            restore_partitions(plan, key, store, live, tree)
            rest = [
                n
                for n in store.partitions_in(*(s for s in PartitionState if s != PartitionState.ROLLED_BACK))
                if n not in unknown
            ]
            for name in rest:
                _clear(plan, key, name, tree)
            store.set_partitions(rest, PartitionState.ROLLED_BACK, EventKind.PARTITION_ROLLED_BACK)
            sync_filesystem(log_dir)
            if unknown:
                raise MigrateError(
                    f"{log_dir}: {len(unknown)} partition(s) could not be placed (e.g. {unknown[0]}: something else is "
                    "at its path); the others are rolled back and the fence stays up. Find out what is there, then "
                    "run `rollback` again."
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
    """Delete the partition's work dir for this plan (its conversions), when nothing of a swap is in it. The caller
    makes the removals durable with one syncfs for all partitions."""
    shutil.rmtree(work_dir(partition_dir, plan_id), ignore_errors=True)
