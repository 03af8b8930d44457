"""convert: each segment of a task is converted into staging and verified from disk; the task returns an outcome
per segment and records them all in one transaction.

A refused segment (bad input, a Kafka limit, a file changed since planning) fails its own partition only: the task
goes on with the other partitions' segments and skips the rest of that partition. An I/O error (disk full, EIO,
EPERM) stops the task, since the next write would fail the same way; the run then stops before the swap, at a state
that ``execute`` (resume) and ``rollback`` both finish. The staged files are made durable with one syncfs before the
outcomes that name them are committed.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

from migrate.compaction.reference import expected_records
from migrate.errors import LocatedError, ProblemKind, StateWriteError, UnsafePathError
from migrate.format.records import Record
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import ConvertOptions, PartitionPlan, Plan, SegmentPlan, TaskPlan
from migrate.model.records import fast_replace
from migrate.model.run_state import (
    ConversionStatus,
    Outcome,
    PartitionState,
    Problem,
    RangeProgress,
    SegmentOutcome,
    SegmentResult,
    SegmentState,
    SegmentTask,
)
from migrate.model.stage_reports import ConvertTaskResult, RangePart
from migrate.prestage.cutover import StagedPartition, Taken, take_staged
from migrate.prestage.record import Verdict
from migrate.prestage.tree import StagingTree
from migrate.run import faults
from migrate.run.state import StateStore
from migrate.run.workspace import checked_output_dir, sync_filesystem
from migrate.segment.compacted import load_survivors
from migrate.segment.convert import convert_segment
from migrate.segment.ranges import convert_range
from migrate.segment.split import convert_split
from migrate.segment.verify import verify_segment
from migrate.stages.common import WORKABLE, locate, unconverted
from migrate.stages.compact import survivors_path
from migrate.watch import progress


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What every segment of one partition shares in a task: its plan, its proven work dir, its options and survivors
    file. Looked up once per partition: a task of many tiny segments would otherwise rebuild each per segment."""

    part: PartitionPlan
    staging_dir: str
    options: ConvertOptions
    survivors: str | None


def partition_facts(
    plan: Plan, log_dir: str, partition: str, known: dict[str, PartitionFacts] | None = None
) -> PartitionFacts:
    """``known``: the partitions this task has looked up (and whose work dirs it has proven) already."""
    facts = known.get(partition) if known is not None else None
    if facts is None:
        p = plan.partition(log_dir, partition)
        # made here, proven a real directory: one planted as a symbolic link would send the outputs elsewhere
        staging = str(checked_output_dir(p.dir, plan.plan_id, create=True))
        facts = PartitionFacts(
            p,
            staging,
            plan.options.for_partition(p.leader_epoch),
            str(survivors_path(p.dir, plan.plan_id)) if p.compaction is not None else None,
        )
        if known is not None:
            known[partition] = facts
    return facts


def segment_task(
    plan: Plan,
    log_dir: str,
    partition: str,
    base_offset: int,
    known: dict[str, PartitionFacts] | None = None,
    seg: SegmentPlan | None = None,
) -> SegmentTask:
    """``known``: the partitions' facts this task has looked up already (a task of many small segments looks each
    partition up, and checks its work dir, once, not once per segment). ``seg``: the segment's plan, when the
    caller has it."""
    facts = partition_facts(plan, log_dir, partition, known)
    p = facts.part
    if seg is None:
        seg = p.segment_by_base[base_offset]
    return SegmentTask(
        source=os.path.join(p.dir, segment_name(base_offset, FileKind.LOG)),
        staging_dir=facts.staging_dir,
        base_offset=base_offset,
        options=facts.options,
        expected_size=seg.size,
        expected_mtime_ns=seg.mtime_ns,
        expected_inode=seg.inode,
        tail_drop=seg.tail_drop,
        survivors=facts.survivors,
        split=seg.split,
    )


def steady_allocator() -> None:
    """Let this process reuse the memory of its large buffers instead of faulting fresh pages in for each chunk.

    Dask starts its worker processes with ``MALLOC_TRIM_THRESHOLD_=65536``, which turns off glibc's adaptive mmap
    threshold: every buffer over 128 KiB (a chunk's columns, its converted batches, its digest stream) is then a
    fresh mmap, zero-filled page by page, and the hot path runs about 1.7 times slower than in a plain process. A
    fixed 64 MiB mmap threshold keeps them in the heap, where a freed chunk's memory serves the next chunk; the heap
    is trimmed past 128 MiB free. Peak memory stays what one chunk needs. Once per process; glibc only."""
    global _ALLOCATOR_SET
    if _ALLOCATOR_SET:
        return
    _ALLOCATOR_SET = True
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 64 << 20)
        mallopt(_M_TRIM_THRESHOLD, 128 << 20)


_ALLOCATOR_SET = False
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def convert_task(plan: Plan, task_id: str, run: str = "") -> ConvertTaskResult:
    """A task's segments converted and verified, their outcomes recorded; for a range task (``byte_range``) its
    range converted and verified, nothing recorded: the join records the segment (``stages.join``). ``run``: an id
    of this execute, shared by its range tasks and joins (their files carry it)."""
    steady_allocator()
    task = plan.tasks_by_id[task_id]
    if task.byte_range is not None:
        return ConvertTaskResult(range_part=convert_range_task(plan, task, run))
    _, path = locate(plan, task.log_dir)
    with StateStore.open(path, plan.plan_id) as store:
        partitions = {ref.partition for ref in task.segments}
        segment_states = store.segment_states(partitions)
        partition_states = store.partition_states(partitions)
        outcomes = _run(plan, task, segment_states, partition_states)
        converted = [o for o in outcomes if o.outcome == Outcome.VERIFIED]
        if converted:
            try:
                faults.point("before:syncfs")
                sync_filesystem(path)
            except OSError as exc:
                raise StateWriteError(f"cannot make the staged segments of {path} durable: {exc}") from exc
        store.record_outcomes(outcomes)
    # the driver keeps every segment's outcome of a run: without its result (the state store holds it, and the
    # progress feed carried it), so a million segments cost the driver their counts, not their digests and stats
    return ConvertTaskResult(
        tuple(o if o.result is None and o.result_text is None else _without_result(o) for o in outcomes)
    )


def _without_result(outcome: SegmentOutcome) -> SegmentOutcome:
    """The outcome without its result (a million outcomes pass here)."""
    return fast_replace(outcome, result=None, result_text=None)


def _run(
    plan: Plan,
    task: TaskPlan,
    segment_states: dict[tuple[str, int], SegmentState],
    partition_states: dict[str, PartitionState],
) -> list[SegmentOutcome]:
    failed: set[str] = {n for n, s in partition_states.items() if s not in WORKABLE}
    known: dict[str, PartitionFacts] = {}
    trees = StagingOpened()
    try:
        return _convert_each(plan, task, segment_states, failed, known, trees)
    finally:
        trees.close()


class StagingOpened:
    """The staging trees a task opened (by log dir) and the partitions' staging dirs it takes from (opening a tree
    walks and checks every ancestor, a partition's dir reads its staged index: once each, not per segment)."""

    def __init__(self) -> None:
        self.trees: dict[str, StagingTree] = {}
        self.partitions: dict[tuple[str, str], StagedPartition] = {}

    def partition(self, tree: StagingTree, log_dir: str, partition: str) -> StagedPartition:
        key = (log_dir, partition)
        found = self.partitions.get(key)
        if found is None:
            for other in self.partitions.values():  # a task's segments come partition by partition
                other.close()
            self.partitions = {key: (found := StagedPartition.open(tree, partition))}
        return found

    def close(self) -> None:
        for part in self.partitions.values():
            part.close()
        for tree in self.trees.values():
            tree.close()


def _convert_each(
    plan: Plan,
    task: TaskPlan,
    segment_states: dict[tuple[str, int], SegmentState],
    failed: set[str],
    known: dict[str, PartitionFacts],
    trees: StagingOpened,
) -> list[SegmentOutcome]:
    outcomes: list[SegmentOutcome] = []
    stopped: Problem | None = None
    for ref in task.segments:
        skip = (
            stopped is not None
            or ref.partition in failed
            or segment_states.get((ref.partition, ref.base_offset)) != SegmentState.PLANNED
        )
        if skip:
            outcomes.append(SegmentOutcome(task.log_dir, ref.partition, ref.base_offset, Outcome.SKIPPED))
            continue
        outcome = convert_and_verify(plan, task.log_dir, ref.partition, ref.base_offset, known, trees)
        outcomes.append(outcome)
        progress.report(outcome)
        if outcome.outcome in (Outcome.REFUSED, Outcome.FAILED):
            failed.add(ref.partition)
        if (
            outcome.outcome == Outcome.FAILED
            and outcome.problem is not None
            and outcome.problem.kind == ProblemKind.IO_ERROR
        ):
            stopped = outcome.problem
    return outcomes


def convert_range_task(plan: Plan, task: TaskPlan, run: str = "") -> RangePart:
    """One range of a large segment, into the partition's work dir; SKIPPED when the segment or its partition is
    done or failed already. Problems come back in the part: the join decides what they mean for the segment."""
    span = task.byte_range
    assert span is not None
    ref = task.segments[0]
    part = RangePart(span.index, span.count, span.start, span.end, task.log_dir, ref.partition)
    _, path = locate(plan, task.log_dir)
    with StateStore.open(path, plan.plan_id) as store:
        state = store.segment_states({ref.partition}).get((ref.partition, ref.base_offset))
        partition_state = store.partition_states([ref.partition]).get(ref.partition)
    if state != SegmentState.PLANNED or partition_state not in WORKABLE:
        part.outcome = Outcome.SKIPPED
        return part
    seg_task = segment_task(plan, task.log_dir, ref.partition, ref.base_offset)
    if seg_task.options.pack_bytes is not None:
        return part  # packing follows the reader's runs: the join converts such a segment whole
    started = time.perf_counter()
    try:
        faults.point("before:convert-range")
        done = convert_range(
            seg_task, span.index, span.count, span.start, span.end, run=run or None, output=span.output
        )
    except OSError as exc:
        part.outcome, part.problem = Outcome.FAILED, Problem.of(exc)
    except Exception as exc:  # a bug met on this range: fail its partition, keep the traceback for the run log
        problem = Problem.bug(exc, seg_task.source)
        part.outcome, part.problem = Outcome.FAILED, problem
    else:
        done.log_dir, done.partition = task.log_dir, ref.partition
        if done.outcome == Outcome.VERIFIED:
            size = span.end - span.start  # the nominal ranges of a segment add up to its size exactly
            progress.report(RangeProgress(task.log_dir, ref.partition, ref.base_offset, span.index, span.count, size))
        return done
    part.convert_seconds = time.perf_counter() - started
    return part


def convert_and_verify(
    plan: Plan,
    log_dir: str,
    partition: str,
    base_offset: int,
    known: dict[str, PartitionFacts] | None = None,
    trees: StagingOpened | None = None,
) -> SegmentOutcome:
    """``known``: the partitions' facts this task looked up already (``partition_facts``); ``trees``: the staging
    trees it opened already, by log dir (opening one walks and checks every ancestor: more than a take itself); the
    caller closes them."""
    started = time.perf_counter()
    fallback = ""
    try:
        facts = partition_facts(plan, log_dir, partition, known)
        seg = facts.part.segment_by_base[base_offset]
        task = segment_task(plan, log_dir, partition, base_offset, known, seg)
        entry = plan.log_dir(log_dir)
        if entry.staging_dir is not None and seg.staged:
            faults.point("before:take-staged")
            opened = trees if trees is not None else StagingOpened()
            try:
                tree = opened.trees.get(entry.log_dir)
                if tree is None:
                    # the plan's tree, checked as prestage checks it; gone: every staged segment converts anew
                    tree = StagingTree.open(entry.log_dir, entry.staging_dir, create=False)
                    if tree is not None:
                        opened.trees[entry.log_dir] = tree
                if tree is None:
                    fallback = f"{task.source}: {Verdict.STAGED_CHANGED}: the staging tree {entry.staging_dir} is gone"
                else:
                    staged = opened.partition(tree, entry.log_dir, partition)
                    taken = take_staged(tree, staged, task, seg.staged_record, deep=bool(entry.reverify_staged))
                    if taken.result is not None or taken.text is not None:
                        return _taken(log_dir, partition, base_offset, taken, started)
                    fallback = f"{task.source}: {taken.judgement.verdict}: {taken.judgement.reason}"
            finally:
                if trees is None:
                    opened.close()
        faults.point("before:convert")
        result = convert_segment(task) if task.split is None else convert_split(task)
    except UnsafePathError as exc:
        problem = Problem(ProblemKind.UNSAFE_PATH, str(exc), exc.path)
        return unconverted(log_dir, partition, base_offset, Outcome.REFUSED, problem, started)
    except LocatedError as exc:
        return unconverted(log_dir, partition, base_offset, Outcome.REFUSED, Problem.of(exc), started)
    except OSError as exc:
        return unconverted(log_dir, partition, base_offset, Outcome.FAILED, Problem.of(exc), started)
    except Exception as exc:  # a bug met on this segment: fail its partition, keep the traceback for the run log
        problem = Problem.bug(exc, task.source)
        return unconverted(log_dir, partition, base_offset, Outcome.FAILED, problem, started)
    converted = time.perf_counter()
    convert_seconds = converted - started
    if result.status != ConversionStatus.CONVERTED:
        return _outcome(
            log_dir, partition, base_offset, result, convert_seconds, Outcome.UNCHANGED, staged_fallback=fallback
        )
    try:
        expected = _survivors_expected(facts, seg, task)
        check = verify_segment(result, task.options, expected=expected)
    except OSError as exc:
        _discard(result)
        return _outcome(
            log_dir,
            partition,
            base_offset,
            result,
            convert_seconds,
            Outcome.FAILED,
            problem=Problem.of(exc),
            staged_fallback=fallback,
        )
    verify_seconds = time.perf_counter() - converted
    if not check.ok:
        _discard(result)
        problem = Problem(
            ProblemKind.VERIFY,
            f"the converted segment did not verify: {'; '.join(check.problems[:5])}. Nothing live was changed; this "
            "is a bug in kafka-log-migrate: keep the segment and report it",
            task.source,
        )
        return _outcome(
            log_dir,
            partition,
            base_offset,
            result,
            convert_seconds,
            Outcome.REFUSED,
            problem=problem,
            verify_seconds=verify_seconds,
            staged_fallback=fallback,
        )
    return _outcome(
        log_dir,
        partition,
        base_offset,
        result,
        convert_seconds,
        verify_seconds=verify_seconds,
        staged_fallback=fallback,
    )


def _taken(log_dir: str, partition: str, base_offset: int, taken: Taken, started: float) -> SegmentOutcome:
    """A segment whose pre-staged conversion was taken: verified by the pass that staged it, from disk, and provably
    unchanged since (``migrate.prestage.cutover``); its result as the state stores it where the index had it so."""
    seconds = time.perf_counter() - started
    if taken.result is not None:
        return _outcome(log_dir, partition, base_offset, taken.result, seconds, staged_seconds=taken.result.seconds)
    counts = taken.counts
    assert counts is not None
    return SegmentOutcome(
        log_dir,
        partition,
        base_offset,
        Outcome.VERIFIED,
        source_bytes=counts.source_bytes,
        output_bytes=counts.output_bytes,
        records=counts.records,
        convert_seconds=seconds,
        result_text=taken.text,
        staged_seconds=counts.seconds,
        mtime_timestamped_records=counts.mtime_timestamped_records,
    )


def _outcome(
    log_dir: str,
    partition: str,
    base_offset: int,
    result: SegmentResult,
    convert_seconds: float,
    outcome: Outcome = Outcome.VERIFIED,
    **more: object,
) -> SegmentOutcome:
    """A converted segment's outcome, built once (a ``dataclasses.replace`` of a draft costs more than the rest of a
    tiny segment's bookkeeping)."""
    return SegmentOutcome(
        log_dir,
        partition,
        base_offset,
        outcome,
        source_bytes=result.source_bytes,
        output_bytes=result.output_bytes,
        records=result.records,
        convert_seconds=convert_seconds,
        result=result,
        finished_at=time.time(),
        **more,  # type: ignore[arg-type]
    )


def _survivors_expected(facts: PartitionFacts, seg: SegmentPlan, task: SegmentTask) -> Iterator[Record] | None:
    """A compacted partition's segment is verified record by record against the survivors the simple reference
    implementation computed (the compact stage stored them only once it agreed), not against the source digest."""
    if facts.part.compaction is None or task.survivors is None:
        return None
    survivors = load_survivors(task.survivors)
    return expected_records(
        task.source, survivors, seg.mtime_ns // 1_000_000, task.options.timestamps, task.options.chunk_bytes
    )


def _discard(result: SegmentResult) -> None:
    for outputs in [result.outputs, *(p.outputs for p in result.parts or ())]:
        for path in outputs.values():
            Path(path).unlink(missing_ok=True)
