"""join: the ranges of a large segment, converted and verified by their own tasks, become one segment.

Runs once every convert task has returned, one call per segment converted in ranges, on the host that owns it. The
segment's outcome is recorded here, in one transaction, and only here: a range's part files are never trusted, and
a crash before this commit leaves the segment planned (the next ``execute`` converts all its ranges again; the work
dir is cleaned by rollback and finalize). A range refused from a confirmed start refuses the segment (and so its
partition) with the range's problem; an I/O error of any range fails it.
"""

from __future__ import annotations

import time

from migrate.errors import LocatedError, StateWriteError
from migrate.model.plan_tree import Plan
from migrate.model.run_state import ConversionStatus, Outcome, Problem, SegmentOutcome, SegmentState
from migrate.model.stage_reports import ConvertTaskResult, RangePart
from migrate.run import faults
from migrate.run.state import StateStore
from migrate.run.workspace import sync_filesystem
from migrate.segment.ranges import RangeRefusedError, discard, join_parts, remove_range_files
from migrate.stages.common import WORKABLE, locate
from migrate.stages.convert import segment_task, steady_allocator
from migrate.watch import progress


def join_segment(
    plan: Plan, log_dir: str, partition: str, base_offset: int, parts: list[RangePart], run: str = ""
) -> ConvertTaskResult:
    """The segment's one outcome, in the record convert tasks return, so progress and the dashboard read both alike."""
    steady_allocator()
    _, path = locate(plan, log_dir)
    with StateStore.open(path, plan.plan_id) as store:
        state = store.segment_states({partition}).get((partition, base_offset))
        workable = store.partition_states([partition]).get(partition) in WORKABLE
        if state != SegmentState.PLANNED or not workable or any(p.outcome == Outcome.SKIPPED for p in parts):
            discard(parts)
            remove_range_files(segment_task(plan, log_dir, partition, base_offset))
            return ConvertTaskResult((SegmentOutcome(log_dir, partition, base_offset, Outcome.SKIPPED),))
        outcome = _join(plan, log_dir, partition, base_offset, parts, run)
        if outcome.outcome == Outcome.VERIFIED:
            try:
                faults.point("before:syncfs")
                sync_filesystem(path)
            except OSError as exc:
                raise StateWriteError(f"cannot make the staged segments of {path} durable: {exc}") from exc
        store.record_outcomes([outcome])
    progress.report(outcome)
    return ConvertTaskResult((outcome,))


def _join(
    plan: Plan, log_dir: str, partition: str, base_offset: int, parts: list[RangePart], run: str
) -> SegmentOutcome:
    task = segment_task(plan, log_dir, partition, base_offset)
    convert_seconds = sum(p.convert_seconds for p in parts)
    verify_seconds = sum(p.verify_seconds for p in parts)
    failed = [p for p in parts if p.outcome == Outcome.FAILED]
    if failed:  # the environment failed under a range: nothing it wrote is worth anything
        discard(parts)
        remove_range_files(task)
        return _outcome(
            log_dir, partition, base_offset, Outcome.FAILED, failed[0].problem, convert_seconds, verify_seconds
        )
    started = time.perf_counter()
    try:
        faults.point("before:join")
        result = join_parts(task, parts, run or None)
    except RangeRefusedError as exc:
        return _outcome(log_dir, partition, base_offset, Outcome.REFUSED, exc.problem, convert_seconds, verify_seconds)
    except LocatedError as exc:
        return _outcome(
            log_dir, partition, base_offset, Outcome.REFUSED, Problem.of(exc), convert_seconds, verify_seconds
        )
    except OSError as exc:
        return _outcome(
            log_dir, partition, base_offset, Outcome.FAILED, Problem.of(exc), convert_seconds, verify_seconds
        )
    except Exception as exc:  # a bug met on this segment: fail its partition, keep the traceback for the run log
        problem = Problem.bug(exc, task.source)
        return _outcome(log_dir, partition, base_offset, Outcome.FAILED, problem, convert_seconds, verify_seconds)
    convert_seconds += time.perf_counter() - started  # the join, and any range converted again in it
    kind = Outcome.VERIFIED if result.status == ConversionStatus.CONVERTED else Outcome.UNCHANGED
    return SegmentOutcome(
        log_dir,
        partition,
        base_offset,
        kind,
        source_bytes=result.source_bytes,
        output_bytes=result.output_bytes,
        records=result.records,
        result=result,
        finished_at=time.time(),
        convert_seconds=convert_seconds,
        verify_seconds=verify_seconds,
    )


def _outcome(
    log_dir: str,
    partition: str,
    base_offset: int,
    kind: Outcome,
    problem: Problem | None,
    convert_seconds: float,
    verify_seconds: float,
) -> SegmentOutcome:
    return SegmentOutcome(
        log_dir,
        partition,
        base_offset,
        kind,
        problem=problem,
        finished_at=time.time(),
        convert_seconds=convert_seconds,
        verify_seconds=verify_seconds,
    )
