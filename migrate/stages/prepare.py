"""prepare: refuse inputs that changed since planning, record the plan in the state store, put the fence up.

From here until the swap is done no broker can start on the log dir. On a resumed run it also puts the run back on
its feet: segments that failed or were refused are planned again, verified segments whose staged files are gone
are converted again, and partitions a crashed rollback had begun are restored first and then migrated anew.
"""

from __future__ import annotations

from pathlib import Path

from migrate.errors import MigrateError, SourceChangedError
from migrate.model import EventKind, LogDirPhase, LogDirPlan, PartitionState, Plan, PrepareReport
from migrate.run import fence
from migrate.run.state import StateStore
from migrate.run.swap_files import SegmentFiles
from migrate.run.workspace import other_states, segment_file
from migrate.stages.common import kafka_lock, locate
from migrate.stages.rollback import restore_partitions


def prepare_log_dir(plan: Plan, key: str) -> PrepareReport:
    entry, log_dir = locate(plan, key)
    for other in other_states(log_dir, plan.plan_id):
        raise MigrateError(
            f"{log_dir}: {other.name} holds the state of another migration of this log dir; finish it (`execute`) or "
            "undo it (`rollback`) with its own plan file first"
        )
    new = True
    if StateStore.exists(log_dir, plan.plan_id):
        with StateStore.open(log_dir, plan.plan_id) as store:
            if store.phase == LogDirPhase.FINALIZED:
                return PrepareReport(key, store.phase, resumed=True)
            new = not store.initialized  # a crash before the first commit leaves an empty database
    lock_existed = (Path(log_dir) / ".lock").exists()
    if new:
        _refuse_changed_inputs(entry)
    with StateStore.open(log_dir, plan.plan_id, create=True) as store:
        if new:
            store.initialize(plan.plan_id, entry, lock_existed)
        with kafka_lock(log_dir, store):
            restored = _finish_interrupted_rollback(plan, key, store)
            keep = [
                (part, base)
                for part, base, result in store.verified_results()
                if SegmentFiles(Path(plan.partition(key, part).dir), plan.plan_id, base).staged_intact(result)
            ]
            reset = store.reset_for_retry(keep) if not new else 0
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            store.record_event(EventKind.RUN_STARTED, verb="execute")
        return PrepareReport(key, store.phase, resumed=not new, reset_segments=reset, restored_partitions=restored)


def _refuse_changed_inputs(entry: LogDirPlan) -> None:
    log_dir = entry.label
    changed = []
    for p in entry.partitions:
        for s in p.segments:
            live = segment_file(p.dir, s.base_offset, ".log")
            try:
                st = live.stat()
            except FileNotFoundError:
                changed.append(f"{live} is missing")
                continue
            if (st.st_size, st.st_mtime_ns, st.st_ino) != (s.size, s.mtime_ns, s.inode):
                changed.append(
                    f"{live}: {st.st_size} bytes, mtime_ns {st.st_mtime_ns}, inode {st.st_ino}; "
                    f"planned {s.size} bytes, "
                    f"mtime_ns {s.mtime_ns}, inode {s.inode}"
                )
    if changed:
        raise SourceChangedError(
            f"{len(changed)} segment file(s) of {log_dir} changed since planning, e.g. {changed[0]}. A broker may have "
            "run on this log dir. Nothing was changed; make a new plan with `kafka-log-migrate plan`."
        )


def _finish_interrupted_rollback(plan: Plan, key: str, store: StateStore) -> int:
    """execute after a crashed (or finished but not archived) rollback: restore what the rollback had begun, then
    plan those partitions again, so this run migrates every partition."""
    if store.phase not in (LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
        return 0
    restore_partitions(plan, key, store, store.partitions_in(PartitionState.ROLLING_BACK), force=False)
    again = store.partitions_in(PartitionState.ROLLED_BACK)
    store.reset_rolled_back(again)
    store.set_phase(LogDirPhase.EXECUTING)
    return len(again)
