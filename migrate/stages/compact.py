"""compact: pass one of compaction for one partition planned with ``--compact``, before any of it is converted.

It reads every planned segment of the partition in offset order, computes the survivors
(``migrate.compaction.pass_one``), checks them against what planning found and against the deliberately simple
implementation (``migrate.compaction.reference``), and stores them in the partition's work dir, where the convert tasks
of that partition read them (pass two drops the rest) and its verification finds them:

    <partition>/.kafka-log-migrate-<plan id>/compaction-survivors.npy    the kept offsets, int64, in order
    <partition>/.kafka-log-migrate-<plan id>/compaction.json             their SHA-256 and counts, written last

Both are written under a temporary name, fsynced and renamed, the directory fsynced after: a crash leaves either
nothing or both, and a resumed run reuses them once their digest matches the plan's. They go with the work dir at
rollback and finalize. A partition that cannot be compacted (keyless records, a transaction, the memory limit, a
disagreement between the two implementations) is refused as its first planned segment's outcome, so its partition
fails untouched and the convert stage skips it; ``execute`` retries it like any refused segment.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from migrate.compaction.facts import SegmentSource
from migrate.compaction.pass_one import pass_one, survivors_sha256
from migrate.compaction.reference import reference_survivors
from migrate.compaction.rules import CompactionRefusedError, Settings
from migrate.errors import LocatedError, SourceChangedError
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import PartitionPlan, Plan
from migrate.model.run_state import Outcome, Problem, SegmentOutcome, SegmentState
from migrate.run.state import StateStore
from migrate.run.workspace import durable_file, fsync_dir, segment_file, work_dir, write_durably
from migrate.segment.identity import planned_file_change
from migrate.stages.common import WORKABLE, locate, unconverted

SURVIVORS_FILE = "compaction-survivors.npy"
RECORD_FILE = "compaction.json"


def survivors_path(partition_dir: str | Path, plan_id: str) -> Path:
    return work_dir(partition_dir, plan_id) / SURVIVORS_FILE


def record_path(partition_dir: str | Path, plan_id: str) -> Path:
    return work_dir(partition_dir, plan_id) / RECORD_FILE


@dataclass(frozen=True)
class CompactionReport:
    """What the compact stage did with one partition."""

    log_dir: str
    partition: str
    outcome: Outcome  # VERIFIED: survivors stored and agreed; SKIPPED: nothing to do (resumed, done, failed)
    records: int = 0
    survivors: int = 0
    seconds: float = 0.0
    reused: bool = False
    refusal: SegmentOutcome | None = None  # the refused or failed segment outcome recorded for the partition


def sources_of(part: PartitionPlan) -> list[SegmentSource]:
    return [
        SegmentSource(str(segment_file(part.dir, s.base_offset, FileKind.LOG)), s.base_offset, s.mtime_ns // 1_000_000)
        for s in part.segments
    ]


def stored_survivors_intact(part: PartitionPlan, plan_id: str) -> bool:
    """The survivors a previous run stored are whole and are the ones this plan expects."""
    assert part.compaction is not None
    try:
        record = json.loads(record_path(part.dir, plan_id).read_text())
        offsets = np.load(survivors_path(part.dir, plan_id), allow_pickle=False)
    except (OSError, ValueError):
        return False
    digest = survivors_sha256(offsets)
    return record.get("survivors_sha256") == digest == part.compaction.survivors_sha256


def compact_partition(plan: Plan, log_dir: str, partition: str) -> CompactionReport:
    """``log_dir``: the log dir's key in the plan."""
    _, path = locate(plan, log_dir)
    part = plan.partition(log_dir, partition)
    if part.compaction is None:
        return CompactionReport(log_dir, partition, Outcome.SKIPPED)
    started = time.perf_counter()
    with StateStore.open(path, plan.plan_id) as store:
        state = store.partition_states([partition]).get(partition)
        planned = [
            base for (_, base), s in sorted(store.segment_states([partition]).items()) if s == SegmentState.PLANNED
        ]
        if state not in WORKABLE or not planned:
            return CompactionReport(log_dir, partition, Outcome.SKIPPED)
        if stored_survivors_intact(part, plan.plan_id):
            return CompactionReport(log_dir, partition, Outcome.SKIPPED, reused=True)
        try:
            records, kept = _compute_and_store(plan, part)
        except LocatedError as exc:
            return _refuse(store, log_dir, partition, planned[0], Outcome.REFUSED, Problem.of(exc), started)
        except OSError as exc:
            return _refuse(store, log_dir, partition, planned[0], Outcome.FAILED, Problem.of(exc), started)
        except Exception as exc:  # a bug met on this partition: fail it alone, keep the traceback for the run log
            problem = Problem.bug(exc, part.dir)
            return _refuse(store, log_dir, partition, planned[0], Outcome.FAILED, problem, started)
    return CompactionReport(log_dir, partition, Outcome.VERIFIED, records, kept, time.perf_counter() - started)


def _compute_and_store(plan: Plan, part: PartitionPlan) -> tuple[int, int]:
    comp = part.compaction
    assert comp is not None
    _refuse_changed_sources(part)
    settings = Settings.of(comp, plan.options)
    sources = sources_of(part)
    survivors = pass_one(sources, settings, part.name, plan.options.chunk_bytes)
    digest = survivors.sha256()
    if (len(survivors.offsets), digest) != (comp.records_kept, comp.survivors_sha256):
        raise CompactionRefusedError(
            f"partition {part.name}: compaction keeps {len(survivors.offsets)} records now (survivors "
            f"{digest[:16]}), planning found {comp.records_kept} ({comp.survivors_sha256[:16]}), although its "
            "segment files are unchanged",
            path=part.dir,
            hint="Nothing was changed. This is a bug in kafka-log-migrate: keep the plan and the partition and report "
            "it; leave the topic out of --compact meanwhile.",
        )
    reference = reference_survivors(
        sources, comp.strategy, comp.header, plan.options.timestamps, comp.drop_tombstones_older_than_ms
    )
    expected = np.array(reference.survivors, np.int64)
    if survivors_sha256(expected) != digest:
        kept = survivors.offsets
        raise CompactionRefusedError(
            f"partition {part.name}: the survivors of compaction ({len(kept)} records) differ from those of the simple "
            f"reference implementation ({len(expected)} records), first at offset {_first_difference(kept, expected)}",
            path=part.dir,
            hint="Nothing was changed. This is a bug in kafka-log-migrate: keep the partition and report it; leave "
            "the topic out of --compact meanwhile.",
        )
    _store(part, plan.plan_id, expected, digest, reference.records)
    return reference.records, len(expected)


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    if len(differ):
        i = int(differ[0])
        return int(min(a[i], b[i]))
    return int(a[n] if len(a) > n else b[n])


def _refuse_changed_sources(part: PartitionPlan) -> None:
    for s in part.segments:
        path = segment_file(part.dir, s.base_offset, FileKind.LOG)
        change = planned_file_change(path, s)
        if change is not None:
            raise SourceChangedError(f"{change}: not the file that was planned", path=str(path))


def _store(part: PartitionPlan, plan_id: str, offsets: np.ndarray, digest: str, records: int) -> None:
    folder = work_dir(part.dir, plan_id)
    folder.mkdir(parents=True, exist_ok=True)
    with durable_file(survivors_path(part.dir, plan_id)) as f:
        np.save(f, offsets, allow_pickle=False)
    record = {"survivors_sha256": digest, "records": records, "records_kept": len(offsets), "reference_agrees": True}
    # written last: its presence says the survivors file beside it is whole
    write_durably(record_path(part.dir, plan_id), json.dumps(record, sort_keys=True).encode())
    fsync_dir(folder)


def _refuse(
    store: StateStore,
    log_dir: str,
    partition: str,
    base_offset: int,
    kind: Outcome,
    problem: Problem,
    started: float,
) -> CompactionReport:
    outcome = unconverted(log_dir, partition, base_offset, kind, problem, started)
    store.record_outcomes([outcome])
    return CompactionReport(log_dir, partition, kind, seconds=outcome.convert_seconds, refusal=outcome)
