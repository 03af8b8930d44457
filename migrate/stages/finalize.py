"""finalize: delete the originals (and any staging, a cut-over's leftover pre-staging too) once the operator is
satisfied; no rollback after this.

Refused while a partition is not migrated, unless ``partial``: then the migrated partitions are finalized and the
others are left exactly as they were (legacy data, untouched), to be planned again later. ``forget_log_dir`` then
removes the state from the log dir once the driver has archived it beside the plan.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from migrate.errors import MigrateError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import Plan
from migrate.model.run_state import EventKind, LogDirPhase, PartitionState
from migrate.model.stage_reports import FinalizeReport, StateChunk
from migrate.prestage.cutover import forget_staged
from migrate.run import fence
from migrate.run.state import StateStore, remove_state_files
from migrate.run.swap_files import SegmentFiles
from migrate.run.swap_record import FileTruth, PartitionTruth, partition_truth
from migrate.run.workspace import state_path, sync_filesystem
from migrate.segment.proof import prove_output
from migrate.stages.common import kafka_lock, locate, restore_dir_mtimes
from migrate.stages.reconcile import db_swap_record, edges_of, files_mixed, open_reconciled
from migrate.stages.rollback import remove_work_dirs


def finalize_log_dir(plan: Plan, key: str, partial: bool = False) -> FinalizeReport:
    entry, log_dir = locate(plan, key)
    opened, reconciled = open_reconciled(plan, key, entry, log_dir, write=True, keep_truths=True)
    if opened is None:  # the driver says why: never executed, or finalized or rolled back and archived
        return FinalizeReport(key, LogDirPhase.NEW, ())
    with opened as store:
        if store.phase == LogDirPhase.FINALIZED:
            return FinalizeReport(key, store.phase, ())
        changed = [p.problem.message for p in reconciled.unresolved]
        if changed:  # a live file that is neither original nor ours is no swap to finish: say which, and what to do
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(changed)} partition(s) have live files that are neither their "
                f"originals nor the verified outputs swapped in (a broker wrote to them?), e.g. {changed[0]}. Nothing "
                "was deleted. `rollback --force` puts the originals back and loses those writes."
            )
        states = store.partition_states()
        mixed = sorted({*(n for n, s in states.items() if s.mixed), *files_mixed(plan, key, store, reconciled.truths)})
        if mixed or store.phase in (LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
            raise MigrateError(
                f"{log_dir}: {len(mixed)} partition(s) are mid-swap or mid-rollback "
                f"(e.g. {mixed[0] if mixed else '-'}),"
                " or a rollback was begun; finish with `execute` or `rollback` before finalizing"
            )
        migrated = sorted(n for n, s in states.items() if s == PartitionState.MIGRATED)
        others = sorted(n for n, s in states.items() if s != PartitionState.MIGRATED)
        if others and not partial:
            raise MigrateError(
                f"{log_dir}: {len(others)} planned partition(s) are not migrated (e.g. {others[0]}: "
                f"{states[others[0]].value}). Finish them with `execute`, or roll everything back with `rollback`; "
                "`finalize --partial` deletes the originals of the migrated partitions only and leaves the others "
                "as they are."
            )
        unproven = _unproven(plan, key, store, migrated, reconciled.truths)
        if unproven:
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(unproven)} live file(s) are not proven to be the verified "
                f"conversions they replaced the originals with, e.g. {unproven[0]}. Nothing was deleted. "
                f"`verify --plan` re-reads them; `rollback` (`--force` if a broker wrote to them) puts the originals "
                "back."
            )
        failed_proofs = _prove_taken(plan, key, store, migrated)
        if failed_proofs:
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(failed_proofs)} segment(s) taken from pre-staging without a "
                "read at the cut-over do not prove to be their originals converted (the original read again and "
                f"converted gives other records or digests), e.g. {failed_proofs[0]}. Nothing was deleted. Someone or "
                "something changed the staging tree after the pass that wrote it: `rollback` puts every original "
                "back, byte for byte; then pre-stage again (or plan with --no-staged) and execute."
            )
        with kafka_lock(log_dir, store):
            remove_work_dirs([plan.partition(key, name).dir for name in migrated + others], plan.plan_id)
            sync_filesystem(log_dir)
            store.set_phase(LogDirPhase.FINALIZED, EventKind.FINALIZED, migrated=len(migrated), left=len(others))
            if fence.lower_fence(log_dir):
                store.record_event(EventKind.FENCE_DOWN)
        if entry.staging_dir is not None:  # a cut-over: what is left staged for its migrated partitions is stale
            forget_staged(entry.log_dir, entry.staging_dir, migrated)
        return FinalizeReport(key, LogDirPhase.FINALIZED, tuple(migrated), tuple(others), reconciled.lines)


def _unproven(
    plan: Plan, key: str, store: StateStore, names: list[str], known: Mapping[str, PartitionTruth]
) -> list[str]:
    """Why a migrated partition's originals may not be deleted: its live files are not all the verified outputs its
    swap record names (identity), or a live .log's first and last bytes are not the output's (a same-size rewrite
    that kept or forged its times)."""
    out = []
    for name in names:
        part = plan.partition(key, name)
        truth = known.get(name) or partition_truth(
            part, plan.plan_id, fallback=db_swap_record(plan, store, name), known=store.swap_texts(name)
        )
        if not truth.has_record or truth.truth != FileTruth.CONVERTED:
            out.append(f"{part.dir}: its files are {truth.truth.value}, not the converted ones its swap recorded")
            continue
        prefix = os.path.join(part.dir, "")
        for base, log_edges in truth.log_edges():
            live = f"{prefix}{base:020d}.log"
            if log_edges and edges_of(live) != log_edges:
                out.append(f"{live}: its first or last bytes are not those of the output that was swapped in")
    return out


def _prove_taken(plan: Plan, key: str, store: StateStore, names: list[str]) -> list[str]:
    """Every segment of ``names`` a cut-over planned from pre-staging (taken without a read, its digests from a
    record in the untrusted staging tree), proven against its original, still kept as the swap's backup
    (``migrate.segment.proof``): the problems, each naming the partition and what differs."""
    problems = []
    for name in names:
        part = plan.partition(key, name)
        staged = {s.base_offset for s in part.segments if s.staged}
        if not staged:
            continue
        options = plan.options.for_partition(part.leader_epoch)
        prefix = os.path.join(part.dir, "")
        for row in store.segments_of(name):
            if row.base not in staged or row.result is None or not row.result.outputs:
                continue
            original = SegmentFiles(part.dir, plan.plan_id, row.base).backup(".log")
            live = {sfx: f"{prefix}{segment_name(row.base, sfx)}" for sfx in row.result.outputs}
            proof = prove_output(original, replace(row.result, outputs=live), options)
            problems += [f"partition {name}: {p}" for p in proof.problems]
    return problems


ARCHIVE_CHUNK_BYTES = 16 << 20


def state_snapshot(
    plan: Plan, key: str, offset: int = 0, stamp: tuple[int, int, int] | None = None
) -> StateChunk | None:
    """Up to ``ARCHIVE_CHUNK_BYTES`` at ``offset`` of the log dir's state database, to archive beside the plan
    before it leaves the log dir. The first piece (``stamp`` None) checkpoints the database first; every later one
    must come from the same file, unchanged (``stamp``): pieces of two versions never make one archive. None: the
    log dir has no state to archive (a rollback removed the empty one a crash left before its first commit)."""
    _, log_dir = locate(plan, key)
    if stamp is None and not StateStore.exists(log_dir, plan.plan_id):
        return None
    with StateStore.open(log_dir, plan.plan_id) as store:
        if stamp is None:
            store.checkpoint()
        path = store.path
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            before = _stamp(os.fstat(fd))
            data = os.pread(fd, ARCHIVE_CHUNK_BYTES, offset)
            after = _stamp(os.fstat(fd))
        finally:
            os.close(fd)
    if before != after or (stamp is not None and tuple(stamp) != before):
        raise MigrateError(
            f"{path}: the state database changed while it was being archived (at byte {offset} of {before[1]}): "
            "is another command of this plan running? Nothing was removed from the log dir; run the same command "
            "again once the other has ended."
        )
    return StateChunk(offset, data, before[1], before)


def _stamp(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def forget_log_dir(plan: Plan, key: str) -> bool:
    """Remove the state of a finalized or rolled-back run from the log dir, once the driver has archived it."""
    _, log_dir = locate(plan, key)
    if not StateStore.exists(log_dir, plan.plan_id):
        return False
    with StateStore.open(log_dir, plan.plan_id) as store:
        phase = store.phase
    if phase not in (LogDirPhase.FINALIZED, LogDirPhase.ROLLED_BACK):
        raise MigrateError(f"{log_dir}: the run of plan {plan.plan_id} is not finished ({phase.value}); state kept")
    remove_state_files(log_dir, plan.plan_id)
    # databases a verb found unusable and moved aside (StateStore.quarantine) belong to this run too: its archived
    # history says why each was set aside and rebuilt; once the run is over, the log dir keeps nothing of it
    for aside in Path(log_dir).glob(f"{state_path(log_dir, plan.plan_id).name}.unusable-*"):
        aside.unlink(missing_ok=True)
    return True


def set_dir_mtime(plan: Plan, key: str) -> None:
    """The log dir's own mtime as it was planned: the last step of a rollback, after the run's lock file is gone."""
    entry, log_dir = locate(plan, key)
    restore_dir_mtimes({log_dir: entry.mtime_ns})
