"""finalize: delete the originals (and any staging) once the operator is satisfied; no rollback after this.

Refused while a partition is not migrated, unless ``partial``: then the migrated partitions are finalized and the
others are left exactly as they were (legacy data, untouched), to be planned again later. ``forget_log_dir`` then
removes the state from the log dir once the driver has archived it beside the plan.
"""

from __future__ import annotations

from migrate.errors import MigrateError
from migrate.model import EventKind, FinalizeReport, LogDirPhase, PartitionState, Plan
from migrate.run import fence
from migrate.run.state import StateStore, remove_state_files
from migrate.run.workspace import sync_filesystem
from migrate.stages.common import kafka_lock, locate, restore_dir_mtimes
from migrate.stages.rollback import remove_work_dirs


def finalize_log_dir(plan: Plan, key: str, partial: bool = False) -> FinalizeReport:
    _, log_dir = locate(plan, key)
    if not StateStore.exists(log_dir, plan.plan_id):
        raise MigrateError(f"{log_dir}: no run of plan {plan.plan_id} here to finalize (run `execute` first)")
    with StateStore.open(log_dir, plan.plan_id) as store:
        if store.phase == LogDirPhase.FINALIZED:
            return FinalizeReport(key, store.phase, ())
        states = store.partition_states()
        mixed = sorted(n for n, s in states.items() if s.mixed)
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
        with kafka_lock(log_dir, store):
            remove_work_dirs([plan.partition(key, name).dir for name in migrated + others], plan.plan_id)
            sync_filesystem(log_dir)
            store.set_phase(LogDirPhase.FINALIZED, EventKind.FINALIZED, migrated=len(migrated), left=len(others))
            if fence.lower_fence(log_dir):
                store.record_event(EventKind.FENCE_DOWN)
        return FinalizeReport(key, LogDirPhase.FINALIZED, tuple(migrated), tuple(others))


def state_snapshot(plan: Plan, key: str) -> bytes:
    """The log dir's state database, to archive beside the plan before it leaves the log dir."""
    _, log_dir = locate(plan, key)
    with StateStore.open(log_dir, plan.plan_id) as store:
        return store.snapshot_bytes()


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
    return True


def set_dir_mtime(plan: Plan, key: str) -> None:
    """The log dir's own mtime as it was planned: the last step of a rollback, after the run's lock file is gone."""
    entry, log_dir = locate(plan, key)
    restore_dir_mtimes({log_dir: entry.mtime_ns})
