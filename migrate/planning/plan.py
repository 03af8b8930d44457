"""Plan a migration: look at the log dirs, refuse what is unsafe, and write a reviewable plan. Changes nothing.

Refused, each with the path, the byte position where there is one, and what to do: a path that is not a Kafka log
dir (or is a partition dir), a held ``.lock``, no clean-shutdown marker, a migration in progress, stray
``.swap``/``.cleaned`` files (``.deleted`` ones are ignored: Kafka's loader unlinks them unread), a checksum that
does not match, an unknown magic byte, damage in the middle of a partition, a torn tail (unless ``--truncate-tail``,
which drops it from the partition's last segment only and lists what it drops), and too little space on any
filesystem that holds partitions. Those checks are one table, ``migrate.planning.checks``; a refusal
(PlanRefusedError) carries each problem as a record.

After a pre-stage pass (``migrate.prestage``), a segment whose staged conversion provably stands for it is planned
from its record without being read (``migrate.prestage.cutover``): the plan of a cut-over costs the delta.

With ``--compact`` rules, every partition of a matching topic is planned whatever its format (v2-only ones too)
and read in full now: pass one of compaction (``migrate.compaction.pass_one``) runs here, so the plan shows per
partition the records and bytes it keeps, and refuses keyless records (listing their offsets), transactions and a pass
one over ``--compact-memory-limit`` before anything is touched. ``check=True`` (``plan
--check``) also reads every entry deeply, decompressing and checking every inner checksum and offset, and so reports
everything ``execute`` would refuse before anything is touched.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from migrate import __version__
from migrate.compaction.facts import SegmentSource
from migrate.compaction.pass_one import plan_compaction
from migrate.compaction.rules import CompactionRule, Settings
from migrate.errors import LocatedError, MigrateError, PlanProblem, PlanRefusedError
from migrate.kafka.layout import Partition, free_bytes, inspect_log_dir
from migrate.kafka.properties import leader_epoch_entries, read_meta_properties
from migrate.model.plan_columns import ColumnBuilder, SegmentRows, TaskRows, number_tasks, plan_id_of
from migrate.model.plan_tree import (
    DEFAULT_RANGE_BYTES,
    MIN_TASKS_PER_LOG_DIR,
    PLAN_VERSION,
    SMALL_TASK_SEGMENTS,
    ByteRange,
    CompactionPlan,
    ConvertOptions,
    Estimates,
    FilesystemSpace,
    LogDirPlan,
    PartitionPlan,
    Plan,
    PlanForm,
    RangeCut,
    SegmentPlan,
    SegmentRef,
    TaskPlan,
)
from migrate.planning.checks import CompactionAttempt, LogDirSubject, Scope, SegmentSubject, judge
from migrate.planning.request import PlanRequest
from migrate.prestage.cutover import plan_staged_segment, stopped_at_ns
from migrate.prestage.staged_index import options_digest, read_index
from migrate.prestage.tree import PartitionStaging, StagingTree, TreeRef
from migrate.run.exchange import expected_method
from migrate.run.workspace import write_durably
from migrate.segment.profile import SegmentProfile, profile_segment
from migrate.segment.split import predict_split
from migrate.units import human_bytes

# Growth of one uncompressed legacy message rewritten as a single-record v2 batch: 61 bytes of batch header and
# about 7 of record framing replace 26 (v0) or 34 (v1) bytes of message overhead.
V2_GROWTH_PER_MESSAGE = {0: 42, 1: 34}
V2_GROWTH_PER_WRAPPER = 64
SPACE_MARGIN = 1.05


def estimated_output_bytes(profile: SegmentProfile) -> int:
    growth = V2_GROWTH_PER_WRAPPER * profile.wrappers
    growth += sum(V2_GROWTH_PER_MESSAGE[m] * n for m, n in profile.plain_legacy_by_magic.items())
    return profile.valid_bytes + growth


@dataclass
class _Findings:
    refusals: list[PlanProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def build_plan(request: PlanRequest) -> Plan:
    opts = request.options
    topic_re = re.compile(request.topics) if request.topics else None
    found = _Findings()
    found.refusals += judge(Scope.REQUEST, request)
    _warn_blank_headers(request, found)
    log_dir_plans = []
    # a columnar plan keeps each partition's segments as columns as soon as it is planned (a million would not fit)
    builder = ColumnBuilder() if request.form == PlanForm.COLUMNAR else None
    for raw in request.log_dirs:
        problems = judge(Scope.LOG_DIR_PATH, LogDirSubject(raw))
        if problems:
            found.refusals += problems
            continue
        log_dir = Path(raw).resolve()
        found.refusals += judge(Scope.LOG_DIR, LogDirSubject(str(log_dir), request.allow_unclean))
        layout = inspect_log_dir(log_dir)
        found.warnings.extend(layout.warnings)
        meta = read_meta_properties(log_dir)
        wanted = [p for p in layout.partitions if not topic_re or topic_re.fullmatch(p.topic)]
        override = request.staging_dir_of(raw, log_dir)
        tree = _staging_tree(log_dir, override, request) if request.use_staged else None
        partitions = []
        outgrown = _Outgrown()
        try:
            for planned, refusals, warnings in _plan_partitions(wanted, request, tree):
                found.refusals += refusals
                found.warnings += warnings
                if planned is not None:
                    if request.options.max_segment_bytes is None:
                        outgrown.add(planned)
                    partitions.append(planned if builder is None else builder.absorb(str(log_dir), planned))
            if tree is not None:  # what no partition's plan scanned: a link anywhere in the tree refuses the plan
                tree.scan(skip=frozenset(p.name for p in wanted if request.compaction_rule(p.topic) is None))
        finally:
            if tree is not None:
                tree.close()
        found.warnings += outgrown.warnings(str(log_dir))
        staging = tree.root if tree is not None else None
        log_dir_plans.append(
            LogDirPlan(
                key=str(log_dir),
                log_dir=str(log_dir),
                mtime_ns=log_dir.stat().st_mtime_ns,
                host=request.host_of(raw, log_dir),
                broker_id=meta.broker_id if meta else None,
                cluster_id=meta.cluster_id if meta else None,
                partitions=tuple(partitions),
                filesystems=_space(partitions, request, found),
                swap_method=request.swap_method or expected_method(log_dir),
                **_cutover_fields(staging, partitions, log_dir, request.reverify_staged),
            )
        )
    if found.refusals:
        raise PlanRefusedError(found.refusals)
    parts = [p for d in log_dir_plans for p in d.partitions]
    if builder is not None:
        builder.finish()
    tasks = make_tasks(log_dir_plans, request.task_bytes, request.task_segments, request.range_bytes, opts)
    if builder is not None:
        number_tasks(builder.columns, tasks)
    plan = Plan(
        version=PLAN_VERSION,
        plan_id="",
        tool=f"kafka-log-migrate {__version__}",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        planned_on=socket.gethostname(),
        options=opts,
        log_dirs=tuple(log_dir_plans),
        tasks=tasks,
        estimates=Estimates(
            partitions=len(parts),
            segments=sum(len(p.segments) for p in parts),
            bytes=sum(p.bytes for p in parts),
            estimated_output_bytes=sum(p.estimated_output_bytes for p in parts),
        ),
        warnings=tuple(found.warnings),
        form=PlanForm.COLUMNAR if request.form == PlanForm.COLUMNAR else None,
    )
    return replace(plan, plan_id=plan_id_of(plan))


FULL_SEGMENT = 0.9  # of the largest closed segment: a source this large was rolled by size


class _Outgrown:
    """Converted segments larger than their broker rolls segments at. A broker rolls a segment when the next append
    would pass the topic's ``segment.bytes``, so a partition's largest closed source shows about where that is; v2
    is larger than v0 and v1 (a batch header per message), so a full segment's conversion passes it: the broker
    then rolls at the first append, and the cleaner of a compacted topic rewrites it at once."""

    def __init__(self) -> None:
        self.by_partition: list[tuple[str, int, int, int, float]] = []  # name, over, planned, cap, growth

    def add(self, part: PartitionPlan) -> None:
        segments = list(part.segments)
        if len(segments) < 2 or not part.bytes:
            return
        cap = max(s.size for s in segments[:-1])  # the last may be the one that was active
        # a full segment (rolled by size, not by time) whose conversion passes where its broker rolls
        over = sum(1 for s in segments if s.estimated_output_bytes > cap and s.size >= FULL_SEGMENT * cap)
        if over:
            self.by_partition.append((part.name, over, len(segments), cap, part.estimated_output_bytes / part.bytes))

    def warnings(self, log_dir: str) -> list[str]:
        if not self.by_partition:
            return []
        over = sum(n for _, n, _, _, _ in self.by_partition)
        shown = ", ".join(
            f"{name}: {n} of {total} above {human_bytes(cap)} (+{(growth - 1) * 100:.0f}%)"
            for name, n, total, cap, growth in self.by_partition[:5]
        )
        more = f" and {len(self.by_partition) - 5} more partitions" if len(self.by_partition) > 5 else ""
        return [
            f"{log_dir}: {over} converted segment(s) in {len(self.by_partition)} partition(s) will be larger than "
            f"the largest closed segment of their partition, about where their broker rolls (its segment.bytes): "
            f"{shown}{more}. A broker rolls such a partition at its first append, and the cleaner of a compacted "
            "topic rewrites those segments at once. `plan --max-segment-bytes N` (the topic's segment.bytes) cuts "
            "them at N."
        ]


def _warn_blank_headers(request: PlanRequest, found: _Findings) -> None:
    for rule in request.compact:
        if rule.strategy.value == "header" and not rule.header.strip():
            found.warnings.append(
                f"--compact {rule}: the header name is blank, so its topics are compacted by offset (KIP-280's "
                "fallback), as Kafka's own cleaner does"
            )


# the consumers' default max.partition.fetch.bytes (Kafka's ConsumerConfig), and the most a legacy message grows by as
# a v2 batch of its own (a 61-byte batch header and up to 28 bytes of record framing, against 26 of a v0 message)
CONSUMER_FETCH_BYTES = 1 << 20
V2_BATCH_GROWTH = 64

# Planning reads every byte of every segment; past this many segments the partitions are shared among processes,
# one per core (starting one costs about half a second).
PARALLEL_MIN_SEGMENTS = 2000
PARALLEL_CHUNK = 64

PartitionFindings = tuple[PartitionPlan | None, list[PlanProblem], list[str]]


def _staging_tree(log_dir: Path, override: str | None, request: PlanRequest) -> StagingTree | None:
    """The log dir's staging tree, if there is one: held against a pass for as long as the plan reads it, and
    scanned first (a link or a hard link in it refuses the plan, naming it: `--no-staged` plans cold)."""
    tree = StagingTree.open(log_dir, override, create=False, other_log_dirs=tuple(request.log_dirs))
    if tree is None:
        return None
    try:
        tree.lock("plan")  # each partition's staging dir is scanned as it is planned, the others after
    except BaseException:
        tree.close()
        raise
    return tree


def _plan_one(part: Partition, request: PlanRequest, tree: StagingTree | None) -> PartitionFindings:
    found = _Findings()
    planned = _plan_partition(part, request, found, tree)
    return planned, found.refusals, found.warnings


def _plan_chunk(parts: list[Partition], request: PlanRequest, tree: StagingTree | None) -> list[PartitionFindings]:
    return [_plan_one(p, request, tree) for p in parts]


def _plan_chunk_in_worker(parts: list[Partition], request: PlanRequest, ref: TreeRef | None) -> list[PartitionFindings]:
    """``_plan_chunk`` in a process of its own: the staging tree opened again, refused if another directory is
    there now than the one the parent checked."""
    if ref is None:
        return _plan_chunk(parts, request, None)
    with StagingTree.reopen(ref) as tree:
        return _plan_chunk(parts, request, tree)


def _plan_partitions(
    parts: list[Partition], request: PlanRequest, tree: StagingTree | None
) -> Iterator[PartitionFindings]:
    """Each partition's plan and findings, in order, as they come; on several processes for large log dirs."""
    cores = os.cpu_count() or 1
    # a segment read costs; a staged one judged by stat does not: where a partition has a staging dir, only its
    # last segment (never staged) is counted
    staged = set(tree.partition_names()) if tree is not None else set()
    reads = sum(1 if p.name in staged else len(p.segments) for p in parts)
    if cores < 2 or reads < PARALLEL_MIN_SEGMENTS:
        yield from _plan_chunk(parts, request, tree)
        return
    import concurrent.futures
    import multiprocessing

    chunks = [parts[i : i + PARALLEL_CHUNK] for i in range(0, len(parts), PARALLEL_CHUNK)]
    # spawn, not fork: the caller may hold threads (a Dask client) that a forked child would inherit half-locked
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=cores, mp_context=context) as pool:
        n = len(chunks)
        ref = tree.ref() if tree is not None else None
        for chunk in pool.map(_plan_chunk_in_worker, chunks, [request] * n, [ref] * n):
            yield from chunk


def _plan_partition(
    part: Partition, request: PlanRequest, found: _Findings, tree: StagingTree | None = None
) -> PartitionPlan | None:
    staging = tree.partition(part.name) if tree is not None and request.compaction_rule(part.topic) is None else None
    try:
        return _plan_partition_staged(part, request, found, tree, staging)
    finally:
        if staging is not None:
            staging.close()


def _plan_partition_staged(
    part: Partition,
    request: PlanRequest,
    found: _Findings,
    tree: StagingTree | None,
    staging: PartitionStaging | None,
) -> PartitionPlan | None:
    opts = request.options
    found.refusals += judge(Scope.PARTITION, part)
    segments = []
    rule = request.compaction_rule(part.topic)
    refusals_before = len(found.refusals)
    epochs = leader_epoch_entries(part.path)
    epoch = request.leader_epoch if request.leader_epoch is not None else (epochs[0][0] if epochs else 0)
    not_taken: list[str] = []
    oversized: list[str] = []
    staged_options = opts.for_partition(epoch)
    entries = staging.scan() if staging is not None else {}
    index = read_index(staging) if staging is not None else None
    wanted = options_digest(staged_options)
    for seg in part.segments:
        if not seg.size:
            continue
        taken = None
        if tree is not None and staging is not None and seg is not part.segments[-1]:
            taken = plan_staged_segment(
                tree, staging, index, seg.path, seg.base_offset, staged_options, wanted, entries.get
            )
        if taken is not None:
            if taken.judgement.usable:
                if taken.segment is not None:
                    segments.append(taken.segment)
                continue
            not_taken.append(f"{seg.path.name} ({taken.judgement.verdict}: {taken.judgement.reason})")
        # a crash can tear only the segment being appended to: the partition's last (a roll follows a full write)
        subject = SegmentSubject(seg.path, seg.base_offset, seg is part.segments[-1], request, rule is not None)
        try:
            subject.profile = profile_segment(seg.path, check_crc=True, cuts=_predicted_cuts(seg.size, request, rule))
        except (LocatedError, OSError) as exc:
            subject.read_error = exc
        problems = judge(Scope.SEGMENT, subject, first_only=True)
        if problems:
            found.refusals += problems
            continue
        profile = subject.profile
        assert profile is not None
        if not subject.converts:
            continue
        tail_drop = subject.tail.drop
        if profile.largest_entry > opts.max_message_bytes:
            found.warnings.append(
                f"{seg.path}: an entry of {profile.largest_entry} bytes at byte position "
                f"{profile.largest_entry_position} is larger than --max-message-bytes {opts.max_message_bytes}; a "
                "broker accepted it, so the topic's max.message.bytes is at least that. Its converted batch keeps "
                "about that size; consumers need fetch.max.bytes at least as large."
            )
        if profile.largest_legacy_entry + V2_BATCH_GROWTH > CONSUMER_FETCH_BYTES:
            oversized.append(
                f"{seg.path.name} at byte position {profile.largest_legacy_entry_position} "
                f"({profile.largest_legacy_entry} bytes)"
            )
        estimate = estimated_output_bytes(profile)
        # a source whose conversion passes the segment size limit becomes several segments, converted whole
        split = predict_split(seg.path, opts, estimate, compacted=rule is not None)
        segments.append(
            SegmentPlan(
                base_offset=seg.base_offset,
                size=seg.size,
                mtime_ns=seg.mtime_ns,
                inode=os.stat(seg.path).st_ino,
                entries_by_magic=dict(sorted(profile.entries_by_magic.items())),
                estimated_output_bytes=estimate,
                tail_drop=tail_drop,
                range_cuts=profile.range_cuts if split is None else None,
                split=split,
            )
        )
    if oversized:
        found.warnings.append(
            f"{part.name}: a legacy entry becomes one v2 batch of about its size, over 1 MiB (the consumers' default "
            f"max.partition.fetch.bytes): {'; '.join(oversized[:3])}{' ...' if len(oversized) > 3 else ''}. A "
            "consumer still gets such a batch whole when it comes first in a fetch (KIP-74), but one fetching several "
            "partitions at once may stall on it; give its consumers max.partition.fetch.bytes above that size."
        )
    if not_taken:
        found.warnings.append(
            f"{part.path}: {len(not_taken)} pre-staged conversion(s) not used, converted now from the source: "
            f"{'; '.join(not_taken[:3])}{' ...' if len(not_taken) > 3 else ''}"
        )
    if not segments:
        return None
    compaction = None
    if rule is not None and len(found.refusals) == refusals_before:
        compaction = _plan_compaction(part, segments, rule, request, found)
    return PartitionPlan(
        name=part.name,
        topic=part.topic,
        partition=part.partition,
        dir=str(part.path),
        dir_mtime_ns=part.path.stat().st_mtime_ns,
        leader_epoch=epoch,
        bytes=sum(s.size for s in segments),
        estimated_output_bytes=sum(s.estimated_output_bytes for s in segments),
        segments=tuple(segments),
        compaction=compaction,
    )


def nominal_cuts(size: int, range_bytes: int) -> list[int]:
    """The byte positions that cut a segment of ``size`` bytes into ranges of about ``range_bytes``: first 0, last
    ``size``."""
    count = -(-size // range_bytes)
    return [size * i // count for i in range(count + 1)]


def _predicted_cuts(size: int, request: PlanRequest, rule: CompactionRule | None) -> list[int] | None:
    """The inner cuts of a segment ``make_tasks`` will split, when its ranges' output places can be known: every
    uncompressed legacy message then converts to one v2 batch (``one_batch_per_message``; no compaction)."""
    opts, range_bytes = request.options, request.range_bytes
    if range_bytes is None or range_bytes <= 0 or size <= range_bytes or rule is not None:
        return None
    if not opts.one_batch_per_message:
        return None
    return nominal_cuts(size, range_bytes)[1:-1]


def _plan_compaction(
    part: Partition, segments: list[SegmentPlan], rule: CompactionRule, request: PlanRequest, found: _Findings
) -> CompactionPlan | None:
    """Pass one now, so the plan shows what compaction keeps and refuses what it cannot do before execute."""
    draft = CompactionPlan(
        rule=str(rule),
        strategy=rule.strategy,
        records=0,
        distinct_keys=0,
        records_kept=0,
        bytes=0,
        bytes_kept=0,
        tombstones_kept=0,
        tombstones_dropped=0,
        pass_one_bytes=0,
        survivors_sha256="",
        header=rule.header,
        drop_tombstones_older_than_ms=request.drop_tombstones_older_than_ms,
        memory_limit_bytes=request.compact_memory_limit,
    )
    sources = [SegmentSource(str(part.path / s.file), s.base_offset, s.mtime_ns // 1_000_000) for s in segments]
    try:
        return plan_compaction(sources, Settings.of(draft, request.options), draft, part.name)
    except (LocatedError, OSError) as exc:
        found.refusals += judge(Scope.COMPACTION, CompactionAttempt(part.path, exc))
    return None


class _CutoverFields(TypedDict, total=False):
    staging_dir: str
    stopped_at_ns: int | None
    reverify_staged: bool


def _cutover_fields(
    staging: Path | None, partitions: list[PartitionPlan], log_dir: Path, reverify: bool
) -> _CutoverFields:
    """A log dir some of whose segments are planned from staging: where the staging is, and when the broker stopped
    (the window's start). Nothing for a cold plan, whose JSON stays as it was."""
    if staging is None or not any(s.staged for p in partitions for s in p.segments):
        return {}
    fields: _CutoverFields = {"staging_dir": str(staging), "stopped_at_ns": stopped_at_ns(log_dir)}
    if reverify:
        fields["reverify_staged"] = True
    return fields


def _space(partitions: list[PartitionPlan], request: PlanRequest, found: _Findings) -> tuple[FilesystemSpace, ...]:
    """Staging needs room on the filesystem of each partition's real directory (a partition dir may be a symlink
    onto another disk); the originals stay as hard links until finalize."""
    by_device: dict[int, list[PartitionPlan]] = {}
    real: dict[int, str] = {}
    for p in partitions:
        resolved = os.path.realpath(p.dir)
        dev = os.stat(resolved).st_dev
        by_device.setdefault(dev, []).append(p)
        real.setdefault(dev, resolved)
    out = []
    for dev, parts in sorted(by_device.items()):
        # a staged segment's outputs are on this filesystem already: taking them renames, it needs no room
        need = int(sum(_unstaged_output_bytes(p) for p in parts) * SPACE_MARGIN)
        space = FilesystemSpace(dev, real[dev], len(parts), need, free_bytes(real[dev], request.free_bytes_cap))
        found.refusals += judge(Scope.FILESYSTEM, space)
        out.append(space)
    return tuple(out)


def _unstaged_output_bytes(p: PartitionPlan) -> int:
    if isinstance(p.segments, SegmentRows):
        return p.segments.unstaged_output_bytes()
    return sum(s.estimated_output_bytes for s in p.segments if not s.staged)


def make_tasks(
    log_dirs: list[LogDirPlan],
    task_bytes: int,
    task_segments: int,
    range_bytes: int | None = DEFAULT_RANGE_BYTES,
    options: ConvertOptions | None = None,
) -> tuple[TaskPlan, ...]:
    """Group segments into tasks of about ``task_bytes`` and at most ``task_segments`` (``segments_per_task``): a
    task per tiny file would drown the scheduler, one task per log dir would leave workers idle. A segment larger
    than ``range_bytes`` gets a task per range of about that size instead (``ByteRange``), so that one large
    partition keeps every worker busy; not in a compacted partition (its survivors are checked record by record,
    segment by segment) nor under ``--pack-bytes`` (packing follows the entries a reader groups, so ranges would
    move batch boundaries). A segment planned from staging costs a few renames, not its bytes."""
    split = range_bytes is not None and range_bytes > 0 and (options is None or options.pack_bytes is None)
    tasks: list[TaskPlan] = []
    for d in log_dirs:
        per_task = segments_per_task(sum(len(p.segments) for p in d.partitions), task_segments)
        # a columnar plan's tasks hold rows of its columns, not a SegmentRef a segment
        current: list[Any] = []
        size = 0
        for p in d.partitions:
            for ref, staged, seg_size, segment in _task_items(p):
                if staged:  # taking staged outputs renames three files: as light as a tiny segment
                    current.append(ref)
                    if len(current) >= per_task:
                        tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, _held(current, d), size))
                        current, size = [], 0
                    continue
                # a source that splits is converted whole by one task (its cuts follow the output of every batch
                # before them), streaming: memory stays bounded by the chunk
                if split and seg_size > range_bytes and p.compaction is None:  # type: ignore[operator]
                    s = segment()
                    if s.split is None:
                        whole = (SegmentRef(p.name, s.base_offset),)
                        for span in _ranges(s, range_bytes):  # type: ignore[arg-type]
                            tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, whole, span.end - span.start, span))
                        continue
                current.append(ref)
                size += seg_size
                if size >= task_bytes or len(current) >= per_task:
                    tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, _held(current, d), size))
                    current, size = [], 0
        if current:
            tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, _held(current, d), size))
    return tuple(tasks)


def _task_items(p: PartitionPlan) -> Iterator[tuple[Any, bool, int, Callable[[], SegmentPlan]]]:
    """Each segment of ``p`` as make_tasks groups it: its ref (a row of a columnar plan's columns), whether it is
    planned from staging, its size, and its plan when asked (a columnar row is made into one only then)."""
    if isinstance(p.segments, SegmentRows):
        columns, rows = p.segments.columns, p.segments.rows
        staged = columns.ints["staged"][rows.start : rows.stop].tolist()
        sizes = columns.ints["size"][rows.start : rows.stop].tolist()
        for row, is_staged, size in zip(rows, staged, sizes, strict=True):
            yield row, is_staged == 1, size, functools.partial(columns.segment, row)
        return
    for s in p.segments:
        yield SegmentRef(p.name, s.base_offset), bool(s.staged), s.size, functools.partial(_same, s)


def _same(segment: SegmentPlan) -> SegmentPlan:
    return segment


def segments_per_task(segments: int, task_segments: int) -> int:
    """The most segments a task of a log dir of ``segments`` holds: ``task_segments``, but for a log dir too small
    to give each worker several tasks of that many (``MIN_TASKS_PER_LOG_DIR``), where tasks hold
    ``SMALL_TASK_SEGMENTS``, or as many as make that many tasks."""
    return min(task_segments, max(SMALL_TASK_SEGMENTS, -(-segments // MIN_TASKS_PER_LOG_DIR)))


def _held(current: list[Any], d: LogDirPlan) -> Sequence[SegmentRef]:
    """A task's segments: its refs, or its rows of a columnar plan's columns."""
    if not current or isinstance(current[0], SegmentRef):
        return tuple(current)
    return TaskRows(d.partitions[0].segments.columns, np.array(current, dtype=np.int64))  # type: ignore[attr-defined]


def _ranges(segment: SegmentPlan, range_bytes: int) -> list[ByteRange]:
    return byte_ranges(nominal_cuts(segment.size, range_bytes), segment.range_cuts)


def byte_ranges(cuts: list[int], found: tuple[RangeCut, ...] | None) -> list[ByteRange]:
    """The ranges between nominal ``cuts`` (first 0, last the size): at the plan's ``RangeCut``s of those cuts when
    it found them (two cuts on one entry start make one range), else at the cuts themselves, each range then
    finding its first entry itself."""
    distinct = [c for i, c in enumerate(found or ()) if i == 0 or c.position != found[i - 1].position]  # type: ignore[index]
    if found is None or len(found) != len(cuts) or len(distinct) < 2:
        return [ByteRange(i, len(cuts) - 1, a, b) for i, (a, b) in enumerate(itertools.pairwise(cuts))]
    return [
        ByteRange(i, len(distinct) - 1, a.position, b.position, a.output_offset, b.output_offset)
        for i, (a, b) in enumerate(itertools.pairwise(distinct))
    ]


COLUMNAR_SUFFIX = ".parquet"


def form_for(path: str | Path) -> PlanForm:
    """The form a plan file's name asks for: ``*.parquet`` columnar (a broker's million segments), else JSON."""
    return PlanForm.COLUMNAR if str(path).endswith(COLUMNAR_SUFFIX) else PlanForm.JSON


def load_plan(path: str | Path) -> Plan:
    """A plan file in either form, checked against the model and its own id; a MigrateError says what is wrong and
    to re-plan."""
    from migrate.errors import ModelError
    from migrate.model.plan_parquet import is_columnar, load_plan_parquet
    from migrate.model.plan_tree import load_plan_json

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise MigrateError(f"cannot read plan {path}: {exc.strerror}") from exc
    try:
        if is_columnar(data):
            return load_plan_parquet(data, str(path))
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise ModelError(f"neither a JSON nor a columnar plan (byte {exc.start} is not UTF-8)") from exc
        return load_plan_json(text, str(path), plan_id_of)
    except ModelError as exc:  # named once: the model's messages may name the file already
        raise MigrateError(str(exc) if str(exc).startswith(f"{path}:") else f"{path}: {exc}") from exc


def write_plan(plan: Plan, path: str | Path) -> None:
    """The plan in its form: a columnar plan as Parquet, any other as JSON."""
    from migrate.model.plan_parquet import dump_plan_parquet
    from migrate.model.plan_tree import dump_plan_json

    if plan.form == PlanForm.COLUMNAR:
        write_durably(path, dump_plan_parquet(plan))
    else:
        write_durably(path, dump_plan_json(plan))
