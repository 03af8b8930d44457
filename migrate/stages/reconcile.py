"""reconcile: before a verb acts on a log dir, its state database is compared with the files, and the files win.

The database is a record of the files (migrate/run/swap_record.py says why it can be wrong: lost commits, a restored
copy, truncation, deletion). Every verb that renames or deletes starts here:

- a database that is missing, empty, unreadable or of another plan is detected and named. Where the files show this
  plan's run (the fence names it, or a partition has its swap record) the unusable one is moved aside and the state is
  rebuilt from the plan and the files; where they show nothing, the run never started;
- each partition with a swap record (or, from runs before records existed, swap rows in the database) is classified
  by its live files; where the database says otherwise it is corrected: mixed or converted files make the partition
  swapping (execute finishes it, rollback undoes it), original files with no swap left make it planned again;
- files that are neither the original nor the verified output (a broker wrote to them) are never corrected away:
  they are returned as problems, and the verbs refuse to touch those partitions without ``--force``.

``write=False`` (status) classifies and reports, and changes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import deque
from collections.abc import Collection, Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from migrate.errors import MigrateError
from migrate.model.plan_tree import LogDirPlan, PartitionPlan, Plan
from migrate.model.run_state import EVERY_PARTITION, EventKind, PartitionRange, PartitionState, Problem
from migrate.model.stage_reports import PartitionProblem
from migrate.run import fence
from migrate.run.state import StateHealth, StateStore, remove_state_files
from migrate.run.swap_keys import gc_paused
from migrate.run.swap_record import (
    FileTruth,
    PartitionSwapRecord,
    PartitionTruth,
    SegmentSwap,
    UnreadableSwapRecordError,
    partition_truth,
    read_record,
    record_file,
    record_path,
    remove_record,
)
from migrate.run.swap_status import settled_truth
from migrate.segment.identity import edges_digest

# partitions whose proof runs ahead of the reconciliation's loop: one on the thread, one queued
SETTLED_AHEAD = 2

logger = logging.getLogger(__name__)

LIVE = (PartitionState.SWAPPING, PartitionState.MIGRATED, PartitionState.ROLLING_BACK)


@dataclass(frozen=True)
class Reconciliation:
    rebuilt: str | None = None  # why the state was rebuilt from the files, if it was
    corrected: tuple[str, ...] = ()  # "<partition>: state said X, files say Y; now Z"
    unresolved: tuple[PartitionProblem, ...] = ()  # live files that are neither original nor ours
    removed_empty: bool = False  # a database a crash left before its first commit (nothing was changed) is gone
    # what the files said of each partition that has a swap, where the verb asked to keep them (finalize's proof
    # reuses them rather than ask again): about 0.5 KB a segment, so only the verb that reuses them keeps them
    truths: Mapping[str, PartitionTruth] = field(default_factory=dict, compare=False)
    # the partitions whose live files are each the original or the output the state database names (rollback's
    # check of changed files skips them: it would ask the same of the same files)
    settled: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def lines(self) -> tuple[str, ...]:
        out = (self.rebuilt,) if self.rebuilt else ()
        return out + self.corrected + tuple(f"{p.partition}: {p.problem.message}" for p in self.unresolved)


def _evidence(entry: LogDirPlan, log_dir: str, plan_id: str) -> str | None:
    """What on disk shows that a run of ``plan_id`` changed this log dir, or None."""
    owner = fence.fence_plan_id(log_dir)
    if owner == plan_id:
        return f"the fence {fence.fence_path(log_dir)} of this plan is up"
    for p in entry.partitions:
        if record_path(p.dir, plan_id).exists():
            return f"partition {p.name} has this plan's swap record ({record_path(p.dir, plan_id)})"
    return None


def open_reconciled(
    plan: Plan,
    key: str,
    entry: LogDirPlan,
    log_dir: str,
    write: bool,
    tidy: bool = True,
    keep_truths: bool = False,
    within: PartitionRange = EVERY_PARTITION,
) -> tuple[StateStore | None, Reconciliation]:
    """The log dir's state store, checked against the files (None: no run of this plan ever changed the log dir).
    With ``write``, an unusable database is moved aside and rebuilt, and disagreements are corrected in it; with
    ``tidy`` too, a database a crash left empty (nothing was changed) is removed, which the verb then reports.
    ``keep_truths``: the reconciliation keeps what the files said of each partition (``Reconciliation.truths``: the
    verdicts and log edges, ``PartitionTruth.edges_only``). ``within``: only those partitions are checked (read-only
    verbs cut a big log dir into runs, one per call)."""
    if write and not within.whole:  # a rebuilt or corrected state must hold every partition: one call does it
        raise MigrateError(f"{log_dir}: a run of its partitions was asked to correct the state (a bug: report it)")
    health = StateStore.health(log_dir, plan.plan_id)
    rebuilt = None
    if health == StateHealth.OTHER_PLAN:
        raise MigrateError(
            f"{log_dir}: the state database named for plan {plan.plan_id} holds the state of another plan (a copy "
            "restored to the wrong name?). Nothing was changed. Move it away, then run the same command again: the "
            "state is rebuilt from the files."
        )
    if health in (StateHealth.MISSING, StateHealth.EMPTY, StateHealth.UNREADABLE):
        evidence = _evidence(entry, log_dir, plan.plan_id)
        if evidence is None:
            if health == StateHealth.UNREADABLE and write:
                StateStore.quarantine(log_dir, plan.plan_id)  # nothing of this run on disk: start afresh
            elif health == StateHealth.EMPTY and write and tidy:
                remove_state_files(log_dir, plan.plan_id)  # a crash before the first commit changed nothing
                return None, Reconciliation(removed_empty=True)
            return None, Reconciliation()
        rebuilt = f"the state database was {health.value} while {evidence}: rebuilt from the plan and the files"
        if not write:
            return None, Reconciliation(rebuilt=rebuilt.replace("rebuilt", "to be rebuilt by execute or rollback"))
        if health != StateHealth.MISSING:
            aside = StateStore.quarantine(log_dir, plan.plan_id)
            rebuilt += f" (the unusable one kept as {aside.name})"
        store = StateStore.open(log_dir, plan.plan_id, create=True)
        # Kafka deletes its .lock on a clean stop, so a .lock here now is one a crashed run of ours left
        store.initialize(plan.plan_id, entry, lock_existed=False)
        store.record_event(EventKind.STATE_REBUILT, why=rebuilt)
        logger.warning("%s: %s", log_dir, rebuilt)
    else:
        store = StateStore.open(log_dir, plan.plan_id)
    try:
        with gc_paused():
            corrected, unresolved, truths, settled = _reconcile_partitions(plan, key, store, write, keep_truths, within)
    except BaseException:
        store.close()
        raise
    return store, Reconciliation(
        rebuilt, tuple(corrected), tuple(unresolved), truths=truths, settled=frozenset(settled)
    )


def db_swap_record(plan: Plan, store: StateStore, name: str) -> PartitionSwapRecord | None:
    """The partition's swap as the database holds it, for runs that began before swap records were written."""
    segments = tuple(
        SegmentSwap.of(row.base, row.swap, row.result, "")
        for row in store.segments_of(name)
        if row.swap and row.result is not None
    )
    return PartitionSwapRecord(plan.plan_id, name, segments) if segments else None


def _reconcile_partitions(
    plan: Plan, key: str, store: StateStore, write: bool, keep_truths: bool, within: PartitionRange
) -> tuple[list[str], list[PartitionProblem], dict[str, PartitionTruth], set[str]]:
    corrected: list[str] = []
    unresolved: list[PartitionProblem] = []
    truths: dict[str, PartitionTruth] = {}
    settled_names: set[str] = set()
    states = store.partition_states()
    if not within.whole:
        states = {name: state for name, state in states.items() if name in within}
    # the usual partition, every live file the swap's output, is settled from one query of the whole log dir's
    # swap texts, streamed in this loop's order (``migrate.run.swap_status``); ``partition_truth`` judges the rest
    settled = _settled_truths(plan, key, store, within=within)
    next(settled)
    with contextlib.closing(settled):  # its query ends with the loop, not when the generator is collected
        _judge_partitions(
            plan,
            key,
            store,
            write,
            states,
            settled,
            corrected,
            unresolved,
            truths if keep_truths else None,
            settled_names,
        )
    return corrected, unresolved, truths, settled_names


def _judge_partitions(
    plan: Plan,
    key: str,
    store: StateStore,
    write: bool,
    states: Mapping[str, PartitionState],
    settled: Generator[PartitionTruth | None, str, None],
    corrected: list[str],
    unresolved: list[PartitionProblem],
    truths: dict[str, PartitionTruth] | None,
    settled_names: set[str],
) -> None:
    """``_reconcile_partitions``' loop: each partition judged by its files, into the lists it returns (``truths``
    None: none kept)."""
    for name, state in sorted(states.items()):
        truth = settled.send(name) if state in LIVE else None
        if truth is not None:  # every live file is the output (or every one the original): nothing changed
            if truths is not None:
                truths[name] = truth.edges_only()
        else:
            part = plan.partition(key, name)
            has_record = os.path.exists(record_file(part.dir, plan.plan_id))
            if not has_record and state not in LIVE:
                continue  # nothing renamed yet: the swap checks each file before its first rename
            try:
                # the database's copy of the swap only where the files keep none (runs from before swap records);
                # where they keep one, the database's rows only spare decoding it where it is exactly what they say
                known = store.swap_texts(name)
                fallback = None if has_record else db_swap_record(plan, store, name)
                truth = partition_truth(part, plan.plan_id, fallback=fallback, known=known)
            except UnreadableSwapRecordError as exc:
                unresolved.append(
                    PartitionProblem(name, Problem("state", f"{exc}; its live files are not the planned ones"))
                )
                continue
            if truths is not None:
                truths[name] = truth.edges_only()
            if truth.truth == FileTruth.CHANGED:
                unresolved.append(
                    PartitionProblem(name, Problem("live-changed", "; ".join(truth.changed[:3]), part.dir))
                )
                if state not in LIVE and truth.has_record and write:
                    store.adopt_swap(
                        name, _segments(part.dir, plan.plan_id, truth), "files changed mid-swap: fence kept up"
                    )
                continue
        if truth.as_database_says:
            settled_names.add(name)
        fix = _correction(state, truth.truth, truth.has_record)
        if fix is None:
            continue
        corrected.append(f"{name}: the state said {state.value}, the files say {truth.truth.value}; {fix}")
        if not write:
            continue
        partition_dir = plan.partition(key, name).dir
        if fix.startswith("swapping"):
            why = f"state {state.value}, files {truth.truth.value}"
            store.adopt_swap(name, _segments(partition_dir, plan.plan_id, truth), why)
        else:  # every live file is the original again and nothing of the swap is left to undo
            remove_record(partition_dir, plan.plan_id)
            store.reset_rolled_back([name])
            store.record_event(EventKind.STATE_CORRECTED, partition=name, why=fix)


def _segments(partition_dir: str, plan_id: str, truth: PartitionTruth) -> list:
    """The swap the record states, with its results: the truth's record was read without them (or came from the
    database, with them)."""
    record = truth.record
    assert record is not None
    if not all(s.has_result for s in record.segments):
        record = read_record(partition_dir, plan_id)
        assert record is not None  # it was there a moment ago: a record is removed only by this tool
    return [(s.base_offset, s.files, s.result) for s in record.segments]


def _settled_truths(
    plan: Plan,
    key: str,
    store: StateStore,
    asked: Collection[str] | None = None,
    within: PartitionRange = EVERY_PARTITION,
) -> Generator[PartitionTruth | None, str, None]:
    """Sent each partition name in sorted order (the first ``send`` after ``next``), yields ``settled_truth`` of
    it from the database's swap texts (``StateStore.swap_pieces``), streamed by one query in the same order; None
    where that cannot settle it (the caller then asks ``partition_truth``). The proof of the next partitions runs on
    a thread while this one reads their rows and the caller judges: its stat calls run without the GIL. ``asked``:
    the only names that will be sent, if known (no proof runs ahead for the others); ``within``: no row outside it
    is read."""
    rows = store.swap_pieces(within)
    ahead: deque[tuple[str, Future[PartitionTruth | None]]] = deque()
    pool = ThreadPoolExecutor(1, thread_name_prefix="settled-proof")

    def read_ahead() -> None:
        while len(ahead) < SETTLED_AHEAD and (row := next(rows, None)) is not None:
            name, known = row
            if asked is not None and name not in asked:
                continue
            ahead.append((name, pool.submit(settled_truth, plan.partition(key, name).dir, plan.plan_id, name, known)))

    try:
        read_ahead()
        found: PartitionTruth | None = None
        while True:
            name = yield found
            found = None
            while ahead and ahead[0][0] < name:  # rows of partitions this loop does not ask of
                ahead.popleft()[1].cancel()
                read_ahead()
            if ahead and ahead[0][0] == name:
                found = ahead.popleft()[1].result()
            read_ahead()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _correction(state: PartitionState, truth: FileTruth, has_record: bool) -> str | None:
    """What the state must become for ``truth`` (``has_record``: judged by a swap record), or None where it
    already agrees."""
    if truth in (FileTruth.MIXED, FileTruth.CONVERTED):
        if state in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK):
            return None  # the verbs finish or undo it from here
        if state == PartitionState.MIGRATED and truth == FileTruth.CONVERTED:
            return None
        return "swapping (execute finishes it, rollback undoes it)"
    # ORIGINAL
    if state in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK) and has_record:
        return None  # a swap that renamed nothing yet, or a rollback that restored all: the verbs finish either
    if state == PartitionState.MIGRATED or has_record:
        return "planned again (its swap was undone; execute converts it anew)"
    return None


edges_of = edges_digest  # the name the reconciliation's callers know


def _name(part: PartitionPlan) -> str:
    return part.name


def files_mixed(
    plan: Plan,
    key: str,
    store: StateStore | None = None,
    truths: Mapping[str, PartitionTruth] | None = None,
    swapped_now: Collection[str] = (),
) -> list[str]:
    """Partitions of the log dir whose live files are partly original and partly converted, by their swap records:
    asked before the fence comes down, whatever the state database says (``store``: its rows only spare decoding
    a record that is exactly what they say). ``truths``: what a reconciliation of this same verb said of them, with
    no file renamed since (finalize), not asked again. ``swapped_now``: partitions this same call has just swapped
    whole under Kafka's lock (every output's identity checked when its batch was planned, every live original's at
    its rename): converted, not proved again (at 10^6 segments that proof is about 20 s of the swap; the final
    status still proves every partition)."""
    mixed = []
    swapped = frozenset(swapped_now)
    asked = [
        part
        for part in sorted(plan.log_dir(key).partitions, key=_name)
        if part.name not in swapped and os.path.exists(record_file(part.dir, plan.plan_id))
    ]
    if not asked:
        return mixed
    # with the database, the usual partition (every file the output, or every one the original) is settled by the
    # cheap proof that status uses (``_settled_truths``), asked in name order; ``partition_truth`` judges the rest
    settled = (
        _settled_truths(plan, key, store, frozenset(part.name for part in asked))
        if store is not None and truths is None
        else None
    )
    if settled is not None:
        next(settled)
    with gc_paused(), contextlib.closing(settled) if settled is not None else contextlib.nullcontext():
        for part in asked:
            try:
                if truths is not None and (known_truth := truths.get(part.name)) is not None:
                    truth = known_truth.truth
                elif settled is not None and (settled_truth := settled.send(part.name)) is not None:
                    truth = settled_truth.truth
                else:
                    known = store.swap_texts(part.name) if store is not None else None
                    truth = partition_truth(part, plan.plan_id, known=known).truth
            except UnreadableSwapRecordError:
                truth = FileTruth.CHANGED
            if truth in (FileTruth.MIXED, FileTruth.CHANGED):
                mixed.append(part.name)
    return mixed
