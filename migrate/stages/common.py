"""What every stage needs: the log dir must be on this host, the state store, Kafka's lock, directory mtimes."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from migrate.errors import MigrateError
from migrate.kafka.lock import LogDirLock
from migrate.model.plan_tree import LogDirPlan, Plan
from migrate.model.run_state import Outcome, PartitionAfter, PartitionState, Problem, SegmentOutcome, SegmentState
from migrate.run.partition.after import judge_after_swap
from migrate.run.partition.reconcile import places_of
from migrate.run.partition.record import ConvertedSegment
from migrate.run.partition.standing import find_record
from migrate.run.state import StateStore

# a partition whose segments convert, compact and join may still work on: not failed, no swap or rollback begun
WORKABLE = (PartitionState.PLANNED, PartitionState.CONVERTING, PartitionState.READY)


def locate(plan: Plan, key: str) -> tuple[LogDirPlan, str]:
    """The log dir a stage call names by its key, and its path, which must exist on this host."""
    entry = plan.log_dir(key)
    require_local(entry.log_dir)
    return entry, entry.log_dir


def require_local(log_dir: str) -> None:
    if not Path(log_dir).is_dir():
        raise MigrateError(
            f"log dir {log_dir} does not exist on this host ({socket.gethostname()}): the task ran on the wrong "
            "host. Map each log dir to its broker host (plan --host-map), or run the command on the broker."
        )


def kafka_lock(log_dir: str, store: StateStore) -> LogDirLock:
    """Kafka's .lock, so no broker starts while files change; removed afterwards only if it did not exist before the
    migration first touched the log dir (a crash leaves ours behind, so the first run's observation counts)."""
    existed = store.lock_existed
    return LogDirLock(log_dir, remove_after=None if existed is None else not existed)


def partition_after(
    plan: Plan, key: str, name: str, cleaned: frozenset[str], store: StateStore
) -> PartitionAfter | None:
    """What became of a migrated partition's files since its swap: judged by its swap record where its new
    directory still holds one, else by the state's converted segments (after finalize removed the record); None
    where the partition is gone. ``cleaned``: the log dir's compacted partitions (``cleaned_partitions``); a
    partition the plan compacts counts too."""
    places = places_of(plan, key, name)
    if not os.path.isdir(places.live):
        return None
    compacted = name in cleaned or plan.partition(key, name).compaction is not None
    record = find_record(places)
    if record is not None:
        return judge_after_swap(places, record.segments, record.linked, compacted)
    segments = [
        ConvertedSegment(row.base, row.result)
        for row in store.segments_of(name)
        if row.state == SegmentState.SWAPPED and row.result is not None and row.result.outputs
    ]
    return judge_after_swap(places, segments, None, compacted)


def restore_dir_mtimes(mtimes: dict[str, int]) -> None:
    """Directories back at the mtimes they had when planned: our work dirs, the fence and the state change them, and
    a rehearsal compares fingerprints that include them (Kafka itself never reads a directory's mtime)."""
    for path, mtime in mtimes.items():
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        os.utime(path, ns=(st.st_atime_ns, mtime))


def unconverted(
    log_dir: str, partition: str, base_offset: int, kind: Outcome, problem: Problem, started: float
) -> SegmentOutcome:
    """A segment refused or failed before it was converted, timed from ``started`` (perf_counter)."""
    return SegmentOutcome(
        log_dir,
        partition,
        base_offset,
        kind,
        problem=problem,
        convert_seconds=time.perf_counter() - started,
        finished_at=time.time(),
    )
