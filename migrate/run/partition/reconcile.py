"""The state database held to the files: before a verb acts on a log dir, where each partition stands by its
directories is compared with what the database says, and the files win.

The database is a record of the files (``record`` says why it can be wrong: lost commits, a restored copy,
truncation, deletion). Every verb starts here:

- a database that is missing, empty, unreadable or of another plan is detected and named. Where the files show this
  plan's run (the fence names it, or a partition has its swap record) the unusable one is moved aside and the state is
  rebuilt from the plan and the records; where they show nothing, the run never started;
- each partition whose swap began (by the database, or by a record the database does not know) is placed by its
  directories (``standing``); where the database says otherwise it is corrected: a partition found mid-swap becomes
  swapping (execute finishes it, rollback undoes it), one found swapped becomes migrated, one found wholly original
  with nothing of a swap left becomes planned again;
- something else at a partition's path, or a record that cannot be read, is never corrected away: it is returned as a
  problem, and the verbs refuse to touch that partition.

``write=False`` (status, verify) places and reports, and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from migrate.errors import MigrateError, ProblemKind
from migrate.model.plan_tree import LogDirPlan, Plan
from migrate.model.run_state import (
    EVERY_PARTITION,
    EventKind,
    PartitionExchange,
    PartitionRange,
    PartitionState,
    Problem,
    Standing,
)
from migrate.model.stage_reports import PartitionProblem
from migrate.run import fence
from migrate.run.partition.places import PartitionPlaces
from migrate.run.partition.record import ExchangeRecord
from migrate.run.partition.standing import record_or_none, standing
from migrate.run.state import StateHealth, StateStore, remove_state_files

logger = logging.getLogger(__name__)

# the states in which a partition's directories may have changed (its swap began and was not undone)
LIVE = (PartitionState.SWAPPING, PartitionState.MIGRATED, PartitionState.ROLLING_BACK)


@dataclass(frozen=True)
class Reconciliation:
    rebuilt: str | None = None  # why the state was rebuilt from the files, if it was
    corrected: tuple[str, ...] = ()  # "<partition>: state said X, files say Y; now Z"
    unresolved: tuple[PartitionProblem, ...] = ()  # something else at a partition's path, an unreadable record
    removed_empty: bool = False  # a database a crash left before its first commit (nothing was changed) is gone
    # where each partition whose swap began stands, as this reconciliation found it
    standings: Mapping[str, Standing] = field(default_factory=dict, compare=False)

    @property
    def lines(self) -> tuple[str, ...]:
        out = (self.rebuilt,) if self.rebuilt else ()
        return out + self.corrected + tuple(f"{p.partition}: {p.problem.message}" for p in self.unresolved)


def places_of(plan: Plan, key: str, name: str) -> PartitionPlaces:
    """The places of a planned partition (its staging dir where the plan builds it in a pre-stage tree)."""
    entry = plan.log_dir(key)
    staging = None
    if entry.staging_dir is not None and plan.partition(key, name).staged_bases:
        staging = f"{entry.staging_dir.rstrip('/')}/{name}"
    return PartitionPlaces(entry.log_dir, name, plan.plan_id, staging)


def _evidence(plan: Plan, key: str, entry: LogDirPlan, log_dir: str) -> str | None:
    """What on disk shows that a run of this plan changed this log dir, or None."""
    if fence.fence_plan_id(log_dir) == plan.plan_id:
        return f"the fence {fence.fence_path(log_dir)} of this plan is up"
    for p in entry.partitions:
        record, bad = record_or_none(places_of(plan, key, p.name))
        if record is not None or bad:
            return f"partition {p.name} has this plan's swap record"
    return None


def open_reconciled(
    plan: Plan,
    key: str,
    entry: LogDirPlan,
    log_dir: str,
    write: bool,
    tidy: bool = True,
    within: PartitionRange = EVERY_PARTITION,
) -> tuple[StateStore | None, Reconciliation]:
    """The log dir's state store, held to the files (None: no run of this plan ever changed the log dir). With
    ``write``, an unusable database is moved aside and rebuilt, and disagreements are corrected in it; with ``tidy``
    too, a database a crash left empty (nothing was changed) is removed, which the verb then reports. ``within``:
    only those partitions are placed (read-only verbs cut a big log dir into runs, one per call)."""
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
        evidence = _evidence(plan, key, entry, log_dir)
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
        corrected, unresolved, standings = _reconcile_partitions(plan, key, store, write, within)
    except BaseException:
        store.close()
        raise
    return store, Reconciliation(rebuilt, tuple(corrected), tuple(unresolved), standings=standings)


def _reconcile_partitions(
    plan: Plan, key: str, store: StateStore, write: bool, within: PartitionRange
) -> tuple[list[str], list[PartitionProblem], dict[str, Standing]]:
    corrected: list[str] = []
    unresolved: list[PartitionProblem] = []
    standings: dict[str, Standing] = {}
    states = store.partition_states()
    known = store.exchanges(within)
    for name, state in sorted(states.items()):
        if name not in within:
            continue
        places = places_of(plan, key, name)
        exchange: PartitionExchange | None = known[name][1] if name in known else None
        record: ExchangeRecord | None = None
        if exchange is None:
            # a swap the database does not know: only a record in the new directory can show one (it lost its last
            # commits, or was rebuilt); a partition never built has none, and is asked nothing more
            record, bad = record_or_none(places)
            if bad:
                unresolved.append(PartitionProblem(name, Problem(ProblemKind.STATE, bad, places.live)))
                continue
            if record is None:
                continue
            exchange = PartitionExchange(record.method, record.original, record.new)
        where = standing(places, exchange.original, exchange.new)
        standings[name] = where
        if where == Standing.UNKNOWN:
            unresolved.append(
                PartitionProblem(
                    name,
                    Problem(
                        ProblemKind.LIVE_CHANGED,
                        f"{places.live} is neither the partition's original directory nor its converted one, and "
                        "the fence holds neither: another directory was put there. Nothing of it is touched; find "
                        "out what it is before running anything else.",
                        places.live,
                    ),
                )
            )
            continue
        fix = _correction(state, where, record is not None)
        if fix is None:
            continue
        target, why = fix
        corrected.append(f"{name}: the state said {state.value}, the files say {where.value}; {why}")
        if not write:
            continue
        if target == PartitionState.PLANNED:
            store.reset_rolled_back([name])
            store.record_event(EventKind.STATE_CORRECTED, partition=name, why=why)
            continue
        if record is None:
            record, bad = record_or_none(places)
        results = [(s.base_offset, s.result) for s in record.segments] if record is not None else []
        store.adopt_exchange(name, exchange, target, results, f"state {state.value}, files {where.value}")
    return corrected, unresolved, standings


def _correction(state: PartitionState, where: Standing, unknown_to_db: bool) -> tuple[PartitionState, str] | None:
    """What the state must become where a partition stands ``where`` (``unknown_to_db``: the database did not know
    its swap), with why; None where the state agrees already."""
    if where in (Standing.ORIGINAL, Standing.BUILT):
        if unknown_to_db or state in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK):
            return None  # built, nothing renamed yet (execute takes it in, rollback removes it), or a rollback's end
        if state == PartitionState.MIGRATED:
            return PartitionState.PLANNED, "planned again (its swap was undone; execute converts it anew)"
        return None
    if where.mixed:
        if state in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK):
            return None
        return PartitionState.SWAPPING, "swapping (execute finishes it, rollback undoes it)"
    if where in (Standing.CONVERTED, Standing.FINALIZED):
        if state in (PartitionState.MIGRATED, PartitionState.ROLLING_BACK):
            return None
        return PartitionState.MIGRATED, "migrated (its swap was done: the files say so)"
    return None  # GONE: the broker deleted the partition since; nothing of it to correct
