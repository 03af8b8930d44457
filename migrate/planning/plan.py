"""Plan a migration: look at the log dirs, refuse what is unsafe, and write a reviewable plan. Changes nothing.

Refused, each with the path, the byte position where there is one, and what to do: a path that is not a Kafka log
dir (or is a partition dir), a held ``.lock``, no clean-shutdown marker, a migration in progress, stray
``.swap``/``.cleaned``/``.deleted`` files, a checksum that does not match, an unknown magic byte, damage in the middle
of a partition, a torn tail (unless ``--truncate-tail``, which drops it from the partition's last segment only and
lists what it drops), and too little space on any filesystem that holds partitions.

With ``--compact`` rules, every partition of a matching topic is planned whatever its format (v2-only ones too)
and read in full now: pass one of compaction (``migrate.compaction.pass_one``) runs here, so the plan shows per
partition the records and bytes it keeps, and refuses keyless records (listing their offsets), transactions and a pass
one over ``--compact-memory-limit`` before anything is touched. ``check=True`` (``plan
--check``) also reads every entry deeply, decompressing and checking every inner checksum and offset, and so reports
everything ``execute`` would refuse before anything is touched.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from migrate import __version__
from migrate.compaction.pass_one import CompactionRule, SegmentSource, Settings, plan_compaction
from migrate.errors import LocatedError, LogDirLockedError, MigrateError
from migrate.kafka.layout import Partition, free_bytes, inspect_log_dir, validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown, leader_epoch_entries, read_meta_properties
from migrate.model import (
    DEFAULT_RANGE_BYTES,
    DEFAULT_TASK_BYTES,
    DEFAULT_TASK_SEGMENTS,
    PLAN_VERSION,
    ByteRange,
    CompactionPlan,
    ConvertOptions,
    Estimates,
    FilesystemSpace,
    LogDirPlan,
    PartitionPlan,
    Plan,
    RangeCut,
    SegmentPlan,
    SegmentRef,
    TailDrop,
    TaskPlan,
)
from migrate.run.workspace import fence_path, other_states
from migrate.segment.profile import SegmentProfile, check_segment, profile_segment, valid_entry_after

# Growth of one uncompressed legacy message rewritten as a single-record v2 batch: 61 bytes of batch header and
# about 7 of record framing replace 26 (v0) or 34 (v1) bytes of message overhead.
V2_GROWTH_PER_MESSAGE = {0: 42, 1: 34}
V2_GROWTH_PER_WRAPPER = 64
SPACE_MARGIN = 1.05
# A torn write leaves a prefix of one entry; a "tail" longer than any entry Kafka would have accepted is damage.
TORN_TAIL_SCAN_BYTES = 4 << 20


class PlanRefusedError(MigrateError):
    """The log dirs are not in a state that can be migrated safely; the message lists every reason."""


@dataclass(frozen=True)
class PlanRequest:
    log_dirs: tuple[str, ...]
    options: ConvertOptions = field(default_factory=ConvertOptions)
    topics: str | None = None  # regex over topic names
    leader_epoch: int | None = None  # None: per partition, from its leader-epoch-checkpoint
    host_map: tuple[tuple[str, str], ...] = ()  # (log dir, host) pairs
    allow_unclean: bool = False
    check: bool = False  # plan --check: read every entry deeply before anything is touched
    task_bytes: int = DEFAULT_TASK_BYTES
    task_segments: int = DEFAULT_TASK_SEGMENTS
    free_bytes_cap: int | None = None  # tests and --assume-free-bytes: pretend the disk has at most this much free
    compact: tuple[CompactionRule, ...] = ()  # --compact: the first rule whose regex matches a topic applies to it
    drop_tombstones_older_than_ms: int | None = None  # --drop-tombstones-older-than (compacted partitions only)
    compact_memory_limit: int | None = None  # --compact-memory-limit: pass one's state per partition, at most
    range_bytes: int | None = DEFAULT_RANGE_BYTES  # --range-bytes: larger segments convert in ranges; None: never

    def compaction_rule(self, topic: str) -> CompactionRule | None:
        return next((r for r in self.compact if r.matches(topic)), None)

    def host_of(self, raw: str, resolved: Path) -> str | None:
        hosts = dict(self.host_map)
        return hosts.get(raw) or hosts.get(str(resolved))


def estimated_output_bytes(profile: SegmentProfile) -> int:
    growth = V2_GROWTH_PER_WRAPPER * profile.wrappers
    growth += sum(V2_GROWTH_PER_MESSAGE[int(m)] * n for m, n in profile.plain_legacy_by_magic.items())
    return profile.valid_bytes + growth


@dataclass
class _Findings:
    refusals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def build_plan(request: PlanRequest) -> Plan:
    opts = request.options
    topic_re = re.compile(request.topics) if request.topics else None
    found = _Findings()
    _check_compaction_request(request, found)
    log_dir_plans = []
    for raw in request.log_dirs:
        problem = validate_log_dir_path(raw)
        if problem:
            found.refusals.append(problem)
            continue
        log_dir = Path(raw).resolve()
        _check_log_dir(log_dir, request, found)
        layout = inspect_log_dir(log_dir)
        found.warnings.extend(layout.warnings)
        meta = read_meta_properties(log_dir)
        wanted = [p for p in layout.partitions if not topic_re or topic_re.fullmatch(p.topic)]
        partitions = []
        for planned, refusals, warnings in _plan_partitions(wanted, request):
            found.refusals += refusals
            found.warnings += warnings
            if planned is not None:
                partitions.append(planned)
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
            )
        )
    if found.refusals:
        raise PlanRefusedError(
            f"refusing to plan ({len(found.refusals)} problem{'s' if len(found.refusals) > 1 else ''}):\n  - "
            + "\n  - ".join(found.refusals)
        )
    parts = [p for d in log_dir_plans for p in d.partitions]
    plan = Plan(
        version=PLAN_VERSION,
        plan_id="",
        tool=f"kafka-log-migrate {__version__}",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        planned_on=socket.gethostname(),
        options=opts,
        log_dirs=tuple(log_dir_plans),
        tasks=make_tasks(log_dir_plans, request.task_bytes, request.task_segments, request.range_bytes, opts),
        estimates=Estimates(
            partitions=len(parts),
            segments=sum(len(p.segments) for p in parts),
            bytes=sum(p.bytes for p in parts),
            estimated_output_bytes=sum(p.estimated_output_bytes for p in parts),
        ),
        warnings=tuple(found.warnings),
    )
    return replace(plan, plan_id=plan.content_id())


def _check_compaction_request(request: PlanRequest, found: _Findings) -> None:
    if request.compact and request.options.target_magic != 2:
        found.refusals.append(
            "--compact writes v2 batches (compaction by header reads v2 headers, deletes may carry the KIP-87 flag of "
            "v2 records): drop --target v1, or plan the compacted topics separately without --compact"
        )
    if not request.compact and (request.drop_tombstones_older_than_ms is not None or request.compact_memory_limit):
        found.refusals.append(
            "--drop-tombstones-older-than and --compact-memory-limit apply to compacted partitions only: add "
            "--compact TOPIC_REGEX=STRATEGY for the topics to compact, or leave them out"
        )
    for rule in request.compact:
        if rule.strategy.value == "header" and not rule.header.strip():
            found.warnings.append(
                f"--compact {rule}: the header name is blank, so its topics are compacted by offset (KIP-280's "
                "fallback), as Kafka's own cleaner does"
            )


def _check_log_dir(log_dir: Path, request: PlanRequest, found: _Findings) -> None:
    holder = lock_holder(log_dir)
    if holder is not None:
        found.refusals.append(str(LogDirLockedError(str(log_dir), holder or None)))
    if not has_clean_shutdown(log_dir) and not request.allow_unclean:
        found.refusals.append(
            f"{log_dir}: no .kafka_cleanshutdown marker, so the broker did not shut down cleanly and the last segments "
            "may hold unrecovered data. Start the broker once, let it recover, stop it cleanly, and plan again (or "
            "pass --allow-unclean if you have checked the segments yourself)."
        )
    if fence_path(log_dir).exists():
        found.refusals.append(
            f"{log_dir}: {fence_path(log_dir).name} exists: a migration is in progress here. Finish it with "
            "`execute --plan` or undo it with `rollback --plan` using its plan file."
        )
    for state in other_states(log_dir, "-"):
        found.refusals.append(
            f"{log_dir}: {state.name} holds the state of a migration that was not finalized or rolled back; run "
            "`execute`, `finalize` or `rollback` with its plan file first."
        )


# Planning reads every byte of every segment; past this many segments the partitions are shared among processes,
# one per core (starting one costs about half a second).
PARALLEL_MIN_SEGMENTS = 2000
PARALLEL_CHUNK = 64

PartitionFindings = tuple[PartitionPlan | None, list[str], list[str]]


def _plan_one(part: Partition, request: PlanRequest) -> PartitionFindings:
    found = _Findings()
    planned = _plan_partition(part, request, found)
    return planned, found.refusals, found.warnings


def _plan_chunk(parts: list[Partition], request: PlanRequest) -> list[PartitionFindings]:
    return [_plan_one(p, request) for p in parts]


def _plan_partitions(parts: list[Partition], request: PlanRequest) -> list[PartitionFindings]:
    """Each partition's plan and findings, in order; on several processes for large log dirs."""
    cores = os.cpu_count() or 1
    if cores < 2 or sum(len(p.segments) for p in parts) < PARALLEL_MIN_SEGMENTS:
        return _plan_chunk(parts, request)
    import concurrent.futures
    import multiprocessing

    chunks = [parts[i : i + PARALLEL_CHUNK] for i in range(0, len(parts), PARALLEL_CHUNK)]
    # spawn, not fork: the caller may hold threads (a Dask client) that a forked child would inherit half-locked
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=cores, mp_context=context) as pool:
        return [found for chunk in pool.map(_plan_chunk, chunks, [request] * len(chunks)) for found in chunk]


def _plan_partition(part: Partition, request: PlanRequest, found: _Findings) -> PartitionPlan | None:
    opts = request.options
    if part.stray_files:
        found.refusals.append(
            f"{part.path}: {', '.join(part.stray_files)} left by an interrupted broker operation; start the broker "
            "once so it completes or discards them, stop it cleanly, and plan again."
        )
    segments = []
    rule = request.compaction_rule(part.topic)
    refusals_before = len(found.refusals)
    for seg in part.segments:
        if not seg.size:
            continue
        # a crash can tear only the segment being appended to: the partition's last (a roll follows a full write)
        is_last = seg is part.segments[-1]
        cuts = _predicted_cuts(seg.size, request, rule)
        try:
            profile = profile_segment(seg.path, check_crc=True, cuts=cuts)
        except LocatedError as exc:
            found.refusals.append(str(exc))
            continue
        except OSError as exc:
            found.refusals.append(f"{seg.path}: cannot read ({exc.strerror}); check its permissions and the disk")
            continue
        if profile.corruption is not None:
            found.refusals.append(str(profile.corruption))
            continue
        if not profile.has_magic_below(opts.target_magic) and rule is None:
            continue  # nothing to convert; a torn tail here is Kafka's recovery's business, not ours
        tail_drop = _tail(seg.path, profile, is_last, request, found)
        if profile.tail_bytes and tail_drop is None:
            continue
        if profile.largest_entry > opts.max_message_bytes:
            found.warnings.append(
                f"{seg.path}: an entry of {profile.largest_entry} bytes at byte position "
                f"{profile.largest_entry_position} is larger than --max-message-bytes {opts.max_message_bytes}; a "
                "broker accepted it, so the topic's max.message.bytes is at least that. Its converted batch keeps "
                "about that size; consumers need fetch.max.bytes at least as large."
            )
        if request.check:
            try:
                check_segment(seg.path, seg.base_offset, opts.chunk_bytes)
            except LocatedError as exc:
                if tail_drop is None or exc.position is None or exc.position < tail_drop.position:
                    found.refusals.append(str(exc))
                    continue
        segments.append(
            SegmentPlan(
                base_offset=seg.base_offset,
                size=seg.size,
                mtime_ns=seg.mtime_ns,
                inode=os.stat(seg.path).st_ino,
                entries_by_magic=dict(sorted(profile.entries_by_magic.items())),
                estimated_output_bytes=estimated_output_bytes(profile),
                tail_drop=tail_drop,
                range_cuts=profile.range_cuts,
            )
        )
    if not segments:
        return None
    compaction = None
    if rule is not None and len(found.refusals) == refusals_before:
        compaction = _plan_compaction(part, segments, rule, request, found)
    epochs = leader_epoch_entries(part.path)
    epoch = request.leader_epoch if request.leader_epoch is not None else (epochs[0][0] if epochs else 0)
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
    except LocatedError as exc:
        found.refusals.append(str(exc))
    except OSError as exc:
        found.refusals.append(f"{part.path}: cannot read ({exc.strerror}); check its permissions and the disk")
    return None


def _tail(
    path: Path, profile: SegmentProfile, is_last: bool, request: PlanRequest, found: _Findings
) -> TailDrop | None:
    """A torn tail is a partial entry running to the end of the partition's last segment, with no valid entry after
    it; anything else is damage, reported with the failed check and never with advice to truncate."""
    if not profile.tail_bytes:
        return None
    position = profile.tail_position
    assert position is not None
    limit = max(request.options.max_message_bytes, profile.largest_entry) + 12
    after = valid_entry_after(path, position + 1, min(profile.tail_bytes - 1, TORN_TAIL_SCAN_BYTES))
    if not is_last or after is not None or profile.tail_bytes > limit:
        if not is_last:
            why = "it is not the partition's last segment, so a crash cannot have torn it"
        elif after is not None:
            why = f"a valid entry follows at byte position {after}, so the entry header here is damaged"
        else:
            why = f"the partial entry would be {profile.tail_bytes} bytes, larger than any entry in the partition"
        found.refusals.append(
            f"{path}: the entry at byte position {position} runs past the end of the file ({profile.tail_bytes} bytes "
            f"left), and {why}. This is damage, not a torn tail: restore the partition from a replica (or leave its "
            "topic out with --topics). Inspect it with `kafka-log-migrate dump --deep-iteration`."
        )
        return None
    drop = TailDrop(position, profile.tail_bytes, profile.last_offset, profile.tail_claimed_offset)
    if request.options.truncate_tail:
        return drop
    found.refusals.append(
        f"{path}: {profile.tail_bytes} bytes of a partial entry at byte position {position} after offset "
        f"{profile.last_offset} (a crash tore the last write; Kafka's recovery would truncate it). Plan with "
        "--truncate-tail to drop them (the original is kept until finalize), or restore the segment from a replica."
    )
    return None


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
        need = int(sum(p.estimated_output_bytes for p in parts) * SPACE_MARGIN)
        free = free_bytes(real[dev], request.free_bytes_cap)
        out.append(FilesystemSpace(dev, real[dev], len(parts), need, free))
        if need > free:
            found.refusals.append(
                f"{real[dev]}: the converted segments of {len(parts)} partitions on this filesystem need about {need} "
                f"bytes of staging space (originals are kept as hard links until finalize), but only {free} bytes are "
                "free. Free space, or migrate fewer topics at a time (--topics)."
            )
    return tuple(out)


def make_tasks(
    log_dirs: list[LogDirPlan],
    task_bytes: int,
    task_segments: int,
    range_bytes: int | None = DEFAULT_RANGE_BYTES,
    options: ConvertOptions | None = None,
) -> tuple[TaskPlan, ...]:
    """Group segments into tasks of about ``task_bytes`` and at most ``task_segments``: a task per tiny file would
    drown the scheduler, one task per log dir would leave workers idle. A segment larger than ``range_bytes`` gets a
    task per range of about that size instead (``ByteRange``), so that one large partition keeps every worker busy;
    not in a compacted partition (its survivors are checked record by record, segment by segment) nor under
    ``--pack-bytes`` (packing follows the entries a reader groups, so ranges would move batch boundaries)."""
    split = range_bytes is not None and range_bytes > 0 and (options is None or options.pack_bytes is None)
    tasks: list[TaskPlan] = []
    for d in log_dirs:
        current: list[SegmentRef] = []
        size = 0
        for p in d.partitions:
            for s in p.segments:
                ref = SegmentRef(p.name, s.base_offset)
                if split and s.size > range_bytes and p.compaction is None:  # type: ignore[operator]
                    for span in _ranges(s, range_bytes):  # type: ignore[arg-type]
                        tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, (ref,), span.end - span.start, span))
                    continue
                current.append(ref)
                size += s.size
                if size >= task_bytes or len(current) >= task_segments:
                    tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, tuple(current), size))
                    current, size = [], 0
        if current:
            tasks.append(TaskPlan(f"t{len(tasks):05d}", d.key, tuple(current), size))
    return tuple(tasks)


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


def load_plan(path: str | Path) -> Plan:
    """A plan file, checked against the model and its own id; a MigrateError says what is wrong and to re-plan."""
    from migrate.errors import ModelError
    from migrate.model import load_plan_json

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise MigrateError(f"cannot read plan {path}: {exc.strerror}") from exc
    try:
        return load_plan_json(text, str(path))
    except ModelError as exc:
        raise MigrateError(f"{path}: {exc}") from exc


def write_plan(plan: Plan, path: str | Path) -> None:
    from migrate.model import dump_plan_json

    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(dump_plan_json(plan))
    os.replace(partial, target)
