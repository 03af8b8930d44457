"""finalize: delete the originals (and any staging, a cut-over's leftover pre-staging too) once the operator is
satisfied; no rollback after this.

Refused while a partition is not migrated, unless ``partial``: then the migrated partitions are finalized and the
others are left exactly as they were (legacy data, untouched), to be planned again later. ``forget_log_dir`` then
removes the state from the log dir once the driver has archived it beside the plan.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path

from migrate.errors import MigrateError
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import Plan
from migrate.model.run_state import EventKind, Fate, LogDirPhase, PartitionState, Standing
from migrate.model.stage_reports import FinalizeReport, StateChunk
from migrate.prestage.cutover import forget_staged
from migrate.run import fence
from migrate.run.partition.after import PRESTAGE_RECORD_SUFFIX, cleaned_partitions
from migrate.run.partition.moves import drop_original
from migrate.run.partition.places import PartitionPlaces
from migrate.run.partition.reconcile import open_reconciled, places_of
from migrate.run.state import StateStore, remove_state_files
from migrate.run.workspace import state_path, sync_filesystem
from migrate.segment.proof import prove_output
from migrate.stages.common import kafka_lock, locate, partition_after, restore_dir_mtimes
from migrate.stages.rollback import remove_work_dirs


def finalize_log_dir(plan: Plan, key: str, partial: bool = False) -> FinalizeReport:
    entry, log_dir = locate(plan, key)
    opened, reconciled = open_reconciled(plan, key, entry, log_dir, write=True)
    if opened is None:  # the driver says why: never executed, or finalized or rolled back and archived
        return FinalizeReport(key, LogDirPhase.NEW, ())
    with opened as store:
        if store.phase == LogDirPhase.FINALIZED:
            return FinalizeReport(key, store.phase, ())
        unplaced = [f"{p.partition}: {p.problem.message}" for p in reconciled.unresolved]
        if unplaced:
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(unplaced)} partition(s) cannot be placed by their directories, "
                f"e.g. {unplaced[0]}. Nothing was deleted."
            )
        states = store.partition_states()
        mixed = sorted(
            {
                *(n for n, s in states.items() if s.mixed),
                *(n for n, where in reconciled.standings.items() if where.mixed),
            }
        )
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
        failed_verify = store.failed_verify_since_swap()
        if failed_verify is not None:
            at, failed = failed_verify
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
            raise MigrateError(
                f"{log_dir}: refusing to finalize: the verify at {stamp} found {sum(v.problems for v in failed)} "
                f"difference(s), e.g. {failed[0].first}. Nothing was deleted. Run `verify --plan` again once the "
                "cause is found (a verify that passes lifts this); `rollback` puts the originals back."
            )
        found, rewritten, untouched = _judge_migrated(plan, key, store, migrated)
        if rewritten:
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(rewritten)} converted segment file(s) changed since the swap "
                f"where no broker operation explains it (not an append, a roll, a follower's truncation, the cleaner "
                f"or retention), e.g. {rewritten[0]}. Nothing was deleted. `verify --plan` reads them; `rollback` "
                "puts the originals back (`--force`: losing what the broker wrote since)."
            )
        failed_proofs = _prove_taken(plan, key, store, untouched)
        if failed_proofs:
            raise MigrateError(
                f"{log_dir}: refusing to finalize: {len(failed_proofs)} segment(s) taken from pre-staging without a "
                "read at the cut-over do not prove to be their originals converted (the original read again and "
                f"converted gives other records or digests), e.g. {failed_proofs[0]}. Nothing was deleted. Someone or "
                "something changed the staging tree after the pass that wrote it: `rollback` puts every original "
                "back, byte for byte; then pre-stage again (or plan with --no-staged) and execute."
            )
        with kafka_lock(log_dir, store):
            for name in migrated:
                exchange = store.exchange_of(name)
                places = places_of(plan, key, name)
                if exchange is not None and reconciled.standings.get(name) != Standing.GONE:
                    drop_original(places, exchange.original)
                    _drop_prestage_records(places, plan.partition(key, name).staged_bases)
            remove_work_dirs([plan.partition(key, name).dir for name in others], plan.plan_id)
            sync_filesystem(log_dir)
            store.set_phase(LogDirPhase.FINALIZED, EventKind.FINALIZED, migrated=len(migrated), left=len(others))
            if fence.lower_fence(log_dir):
                store.record_event(EventKind.FENCE_DOWN)
        if entry.staging_dir is not None:  # a cut-over: what is left staged for its migrated partitions is stale
            forget_staged(entry.log_dir, entry.staging_dir, migrated)
        return FinalizeReport(
            key, LogDirPhase.FINALIZED, tuple(migrated), tuple(others), reconciled.lines, tuple(found)
        )


def _judge_migrated(
    plan: Plan, key: str, store: StateStore, names: list[str]
) -> tuple[list[str], list[str], dict[str, frozenset[str]]]:
    """What the broker did to each migrated partition since its swap (``migrate.run.partition.after``): a line per
    partition it changed, the files changed where no broker operation explains it, and per partition the files
    still as swapped in (what a staged segment's proof may read)."""
    cleaned = cleaned_partitions(plan.log_dir(key).log_dir)
    found: list[str] = []
    rewritten: list[str] = []
    untouched: dict[str, frozenset[str]] = {}
    for name in names:
        after = partition_after(plan, key, name, cleaned, store)
        if after is None:
            found.append(f"{name}: gone since the swap (the broker deleted the partition)")
            continue
        directory = plan.partition(key, name).dir
        rewritten += [f"{directory}/{f.name}: {f.detail}" for f in after.rewritten]
        untouched[name] = frozenset(f.name for f in after.of(Fate.UNCHANGED))
        if after.by_broker or any(f.metadata_only for f in after.files):
            counts = ", ".join(f"{n} {what}" for what, n in sorted(after.counts().items()))
            detail = "; ".join(f"{f.name} {f.fate}: {f.detail}" for f in after.by_broker[:3] if f.detail)
            found.append(f"{name}: {counts}" + (f" ({detail})" if detail else ""))
    return found, rewritten, untouched


def _drop_prestage_records(places: PartitionPlaces, bases: frozenset[int]) -> None:
    """The pre-stage records a cut-over carried into the partition with its staged segments (Kafka reads no file of
    that name, and finalize has proven what they described)."""
    for base in bases:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(places.live, segment_name(base, PRESTAGE_RECORD_SUFFIX)))


def _prove_taken(plan: Plan, key: str, store: StateStore, untouched: dict[str, frozenset[str]]) -> list[str]:
    """Every segment a cut-over planned from pre-staging (taken without a read, its digests from a record in the
    untrusted staging tree) and still as swapped in (``untouched``: the files so, per partition; one the broker
    rewrote since is the broker's), proven against its original, still kept inside the converted directory
    (``migrate.segment.proof``): the problems, each naming the partition and what differs."""
    problems = []
    for name, files in untouched.items():
        part = plan.partition(key, name)
        staged = part.staged_bases
        if not staged:
            continue
        places = places_of(plan, key, name)
        options = plan.options.for_partition(part.leader_epoch)
        for row in store.segments_of(name):
            if row.base not in staged or row.result is None or not row.result.outputs:
                continue
            if segment_name(row.base, FileKind.LOG) not in files:
                continue
            original = os.path.join(places.kept, segment_name(row.base, FileKind.LOG))
            live = row.result.outputs.paths_in(places.live, row.base)
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
