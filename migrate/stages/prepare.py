"""prepare: refuse inputs that changed since planning, record the plan in the state store, put the fence up.

From here until the swap is done no broker can start on the log dir. On a resumed run it also puts the run back on
its feet: segments that failed or were refused are planned again, verified segments whose staged files are gone
are converted again, and partitions a crashed rollback had begun are restored first and then migrated anew.
"""

from __future__ import annotations

import os
from pathlib import Path

from migrate.errors import MigrateError, SourceChangedError
from migrate.kafka.names import FileKind, segment_name
from migrate.kafka.properties import read_meta_properties
from migrate.model.plan_tree import LogDirPlan, Plan
from migrate.model.run_state import EventKind, FileStat, LogDirPhase, PartitionState, SegmentResult
from migrate.model.stage_reports import PrepareReport
from migrate.planning.checks import recheck_log_dir
from migrate.prestage.cutover import plan_staging_tree
from migrate.run import fence
from migrate.run.partition.reconcile import LIVE, open_reconciled
from migrate.run.state import StateStore
from migrate.run.workspace import checked_output_dir, other_states, segment_file
from migrate.segment.identity import planned_file_change
from migrate.stages.common import kafka_lock, locate
from migrate.stages.rollback import restore_partitions


def prepare_log_dir(plan: Plan, key: str) -> PrepareReport:
    entry, log_dir = locate(plan, key)
    for other in other_states(log_dir, plan.plan_id):
        raise MigrateError(
            f"{log_dir}: {other.name} holds the state of another migration of this log dir; finish it (`execute`) or "
            "undo it (`rollback`) with its own plan file first"
        )
    refuse_other_broker(entry)
    for part in entry.partitions:  # a work dir planted as a symbolic link: refused before anything is written
        checked_output_dir(part.dir, plan.plan_id)
    store, reconciled = open_reconciled(plan, key, entry, log_dir, write=True)
    new = store is None
    if store is None:
        # nothing of this run on disk yet: the plan's own checks again, on the log dir as it is now, before the
        # first file of ours appears in it (a refusal leaves no state behind to block the next plan)
        recheck_log_dir(entry, plan.plan_id)
        _refuse_changed_inputs(entry)
        lock_existed = (Path(log_dir) / ".lock").exists()
        store = StateStore.open(log_dir, plan.plan_id, create=True)
        store.initialize(plan.plan_id, entry, lock_existed)
    with store:
        if store.phase == LogDirPhase.FINALIZED:
            return PrepareReport(key, store.phase, resumed=True, reconciled=reconciled.lines)
        with kafka_lock(log_dir, store):
            restored = _finish_interrupted_rollback(plan, key, store)
            keep = [(part, base) for part, base, result in store.verified_results() if outputs_intact(result)]
            reset = store.reset_for_retry(keep) if not new else 0
            for problem in reconciled.unresolved:
                if store.partition_states([problem.partition]).get(problem.partition) not in LIVE:
                    store.fail_partition(problem.partition, problem.problem)
            if fence.raise_fence(log_dir, plan.plan_id):
                store.record_event(EventKind.FENCE_UP)
            store.record_event(EventKind.RUN_STARTED, verb="execute")
        return PrepareReport(
            key,
            store.phase,
            resumed=not new,
            reset_segments=reset,
            restored_partitions=restored,
            reconciled=reconciled.lines,
            changed=tuple(f"{p.partition}: {p.problem.message}" for p in reconciled.unresolved),
        )


def refuse_other_broker(entry: LogDirPlan) -> None:
    """The log dir must still be the broker's the plan was made for: another broker's dir mounted at the same path,
    or meta.properties replaced or deleted since planning, would be migrated under a plan that never looked at it."""
    meta = read_meta_properties(entry.log_dir)
    now = (meta.broker_id, meta.cluster_id) if meta else (None, None)
    if now != (entry.broker_id, entry.cluster_id):
        seen = f"broker {now[0]} of cluster {now[1]}" if meta else "no meta.properties"
        raise SourceChangedError(
            f"{entry.log_dir}: meta.properties now says {seen}; the plan was made for broker {entry.broker_id} of "
            f"cluster {entry.cluster_id}. This is not the log dir that was planned (another broker's disk, or its "
            "identity file replaced). Nothing was changed; make a new plan with `kafka-log-migrate plan` on this "
            "log dir if it is the one to migrate.",
            path=str(Path(entry.log_dir) / "meta.properties"),
        )


def _refuse_changed_inputs(entry: LogDirPlan) -> None:
    log_dir = entry.label
    changed = []
    for p in entry.partitions:
        prefix = os.path.join(p.dir, "")
        for base, size, mtime_ns, inode in p.identities():
            path = f"{prefix}{segment_name(base, '.log')}"
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            # the planned identity, compared as a tuple; only a file that differs is described (asked again)
            if st is None or (st.st_ino, st.st_size, st.st_mtime_ns) != (inode, size, mtime_ns):
                change = planned_file_change(segment_file(p.dir, base, FileKind.LOG), p.segment_by_base[base])
                if change is not None:
                    changed.append(change)
    if changed:
        raise SourceChangedError(
            f"{len(changed)} segment file(s) of {log_dir} changed since planning, e.g. {changed[0]}",
            hint="Nothing was changed. A broker may have run on this log dir: stop it and make a new plan with "
            "`kafka-log-migrate plan`.",
        )


def outputs_intact(result: SegmentResult) -> bool:
    """A verified segment's outputs are still what the conversion wrote and verified (each of a split source's too):
    their identities against the files, by lstat (a cut-over's staged outputs are read in the staging tree, never
    followed)."""
    outputs = [(result.outputs, result.output_stats), *((p.outputs, p.output_stats) for p in result.parts or ())]
    for paths, stats in outputs:
        for kind, path in paths:
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                return False
            if FileStat.of(st) != stats.get(kind):
                return False
    return True


def _finish_interrupted_rollback(plan: Plan, key: str, store: StateStore) -> int:
    """execute after a crashed (or finished but not archived) rollback: restore what the rollback had begun, then
    plan those partitions again, so this run migrates every partition."""
    if store.phase not in (LogDirPhase.ROLLING_BACK, LogDirPhase.ROLLED_BACK):
        return 0
    entry = plan.log_dir(key)
    with plan_staging_tree(entry.log_dir, entry.staging_dir) as tree:
        restore_partitions(plan, key, store, store.partitions_in(PartitionState.ROLLING_BACK), tree)
    again = store.partitions_in(PartitionState.ROLLED_BACK)
    store.reset_rolled_back(again)
    store.set_phase(LogDirPhase.EXECUTING)
    return len(again)
