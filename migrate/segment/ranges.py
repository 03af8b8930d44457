"""A large segment converted as several ranges, each by its own worker, then joined into one segment.

A plan splits a segment larger than ``--range-bytes`` into nominal byte ranges (``ByteRange``). Each range task
converts the entries that *start* in its range: the first range from byte 0, every other one from the first entry
start it finds at or after its nominal start (``reader.find_entry_start``); it reads past its nominal end only to
finish the entry that straddles it, and stops there. It writes its batches to a part file in the partition's work
dir, then re-reads that part from disk like any converted segment (every CRC, its records' digest against the one
computed from the source) and keeps each batch's size, last offset and max timestamp for the join.

The join (``join_parts``) trusts a range only if it starts exactly where the previous one stopped, which proves its
first entry start by induction from byte 0; a range that found a false start (record bytes that look like entries)
is converted again from the right place, there and then. It checks that offsets keep increasing across ranges and
that the whole fits Kafka's limits, concatenates the parts (the kernel copies, ``copy_file_range``), builds both
indexes over the joined batches with Kafka's recovery rule, and checks each part's first batch header in place.

Placement (``run`` given, as ``execute`` does): the concatenation mostly happens before the join, off its critical
path. A range that verified records where it starts and stops and its size, under a lock shared by the segment's
ranges; then whoever holds the lock copies into the joined file every range whose offset is known by then (all the
ranges before it recorded, each starting where the previous one stopped). So a range's copy, and the disk writes
it starts, overlap the conversion of later ranges, and the join copies only what is left (the last range, a range
converted again). The files of a run carry its id: a crashed run's leftovers are never mistaken for this run's.
The bytes are those of a one-worker conversion: each entry converts on its own, and the indexes see the same
batches in the same order.

Planned places (``ByteRange.output``, what ``plan`` predicts for a segment of uncompressed legacy messages and v2
batches, whose converted sizes are known before conversion): each range starts at the entry start the plan found
and writes straight into its place in the joined file, re-reads that place, and hands its pages back to the kernel
once they are on disk (``_write_out``). Nothing is copied, no part file is written, and the join only checks. A
range whose bytes do not fill its place exactly is not in place, and the join then converts the segment whole: a
wrong prediction costs time, never bytes.

Digests: each range digests its records apart; the segment's digests are composite (``digest.composite``) with
``SegmentResult.digest_splits`` naming where the ranges' records begin, so ``verify_segment`` recomputes them from
the joined file alone.

Nothing here is trusted before the join's outcome is recorded: part files, batch files and even the joined files
live in the work dir, which rollback and finalize remove whole, and a crash before the outcome is committed leaves
the segment planned, so the next ``execute`` converts it again from the start.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import fcntl
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from migrate.errors import CorruptRecordError, LocatedError, ProblemKind, SegmentRefusedError
from migrate.format.digest import LogDigest, composite
from migrate.format.records import BatchColumns
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import CONVERTED_FILES, MAX_SEGMENT_BYTES
from migrate.model.run_state import ConversionStatus, Outcome, Problem, SegmentResult, SegmentTask
from migrate.model.segment_files import SegmentFiles
from migrate.model.stage_reports import RangePart
from migrate.segment.convert import (
    check_planned,
    convert_segment,
    finish_outputs,
    live_stats,
    stream_entries,
)
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import find_entry_start, open_unbuffered
from migrate.segment.verify import read_back

_WRITE_BUFFER = 1 << 20
_BATCH_ROW = 3  # int64s per batch in a part's batch file: size, last offset, max timestamp
_BATCH_ROWS_PER_READ = 1 << 18  # the join reads a part's batches this many at a time (6 MiB)


class RangeRefusedError(Exception):
    """A range that starts where the previous one stopped refused its bytes: the segment is refused with the
    range's own problem (a range from a start the join did not confirm proves nothing and is converted again)."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def part_path(task: SegmentTask, index: int, what: str, run: str | None = None) -> Path:
    suffix = f".{run}" if run else ""
    return Path(task.staging_dir) / segment_name(task.base_offset, f".{what}.range-{index:05d}{suffix}")


def joining_path(task: SegmentTask, run: str | None) -> Path:
    """The joined .log while it is assembled (renamed to its final name by the join)."""
    return Path(task.staging_dir) / segment_name(task.base_offset, f".log.joining{f'.{run}' if run else ''}")


def _lock_path(task: SegmentTask, run: str) -> Path:
    return Path(task.staging_dir) / segment_name(task.base_offset, f".log.placing.{run}")


def convert_range(
    task: SegmentTask,
    index: int,
    count: int,
    nominal_start: int,
    nominal_end: int,
    exact_start: int | None = None,
    run: str | None = None,
    output: tuple[int, int] | None = None,
) -> RangePart:
    """Convert and verify the entries of ``task.source`` that start in ``[nominal_start, nominal_end)`` (to the end
    of the file for the last range), from ``exact_start`` when the caller knows where the first one starts; with
    ``run``, then place what can be placed in the joined file (see the module docstring).

    ``output`` (the plan's ``ByteRange.output``): ``nominal_start`` is an entry start and the converted bytes go
    straight to ``[start, end)`` of the joined file; a range whose bytes would not fit there exactly is left
    VERIFIED but not ``in_place``, and the join then converts the segment whole.

    What ``convert_segment`` would refuse comes back as a REFUSED part with the problem (it counts only if the join
    confirms the range's start), as does a part that does not verify; OSError is raised.
    """
    part = RangePart(index, count, nominal_start, nominal_end, output=output)
    try:
        _convert_range(task, part, nominal_start if output is not None else exact_start, run)
    except LocatedError as exc:
        part.outcome, part.problem = Outcome.REFUSED, Problem.of(exc)
    placeable = part.outcome == Outcome.VERIFIED and part.start is not None and output is None
    if run and exact_start is None and placeable:
        _place(task, part, run)
    return part


def _convert_range(task: SegmentTask, part: RangePart, exact_start: int | None, run: str | None) -> None:
    started = time.perf_counter()
    index, count, nominal_start, nominal_end = part.index, part.count, part.nominal_start, part.nominal_end
    opts = task.options
    src, st = open_unbuffered(task.source)
    with src:
        check_planned(task, st)
        if exact_start is not None:
            start: int | None = exact_start
        elif index == 0:
            start = 0
        else:
            window = max(2 * opts.chunk_bytes, 4 * opts.max_message_bytes)
            start = find_entry_start(src, nominal_start, st.st_size, task.base_offset, window)
        part.start = start
        if start is None:  # the join converts it from where the previous range stopped
            return
        last = index == count - 1
        Path(task.staging_dir).mkdir(parents=True, exist_ok=True)
        if part.output is None:
            out_path = part_path(task, index, "log", run)
            part.files.append(str(out_path))
            out: BinaryIO | _PlacedWriter = open(out_path, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115 (closed below)
        else:
            out_path = joining_path(task, run)
            out = _PlacedWriter(out_path, *part.output)
        src.seek(start)
        try:
            with out:
                if last or start < nominal_end:
                    streamed = stream_entries(task, src, out, st, start=start, limit=None if last else nominal_end)
                    result, part.stop, part.changed = streamed.result, streamed.stop, streamed.changed
                else:  # no entry starts in this range (one entry spans it): an empty part
                    result = SegmentResult(task.source, task.base_offset, ConversionStatus.EMPTY, digest=opts.digest)
                    result.source_digest, result.output_digest_ts = LogDigest(algorithm=opts.digest).hexdigests()
                    part.stop = start
        except _OutsidePlace:
            return  # not in place: the join converts the segment whole
        if part.output is not None:
            if result.output_bytes != part.output[1] - part.output[0]:
                return
            part.in_place = True
        part.at_end = part.stop + result.truncated_tail_bytes >= st.st_size
        result.outputs = SegmentFiles(log=str(out_path))
        part.result = result
        part.convert_seconds = time.perf_counter() - started
        _verify_part(task, part, run)
        if part.in_place:
            _write_out(out_path, *part.output)  # type: ignore[misc]
        part.verify_seconds = time.perf_counter() - started - part.convert_seconds


def _verify_part(task: SegmentTask, part: RangePart, run: str | None) -> None:
    """Re-read the part file from disk: every CRC, its records (with their timestamps) against the digest computed
    from the source, no batch below the target magic, nothing after the last batch. Keeps the batch columns."""
    assert part.result is not None
    opts = task.options
    result = part.result
    batches_path = part_path(task, part.index, "batches", run)
    part.files.append(str(batches_path))
    digest = LogDigest(plain=False, timed=True, algorithm=result.digest)
    with open(batches_path, "wb", buffering=_WRITE_BUFFER) as sink:

        def keep(b: BatchColumns) -> None:
            sink.write(np.stack([b.sizes, b.last_offsets, b.max_timestamps], axis=1).astype(np.int64).tobytes())

        back = read_back(
            result.outputs.require(FileKind.LOG),
            digest,
            None,
            opts.target_magic,
            opts.chunk_bytes,
            keep,
            region=part.output,
        )
    part.batches = str(batches_path)
    part.head = back.head
    result.output_bytes = back.size + back.tail
    problems = []
    if back.tail:
        problems.append(f"{back.tail} bytes after the last complete batch")
    if part.output is not None and back.size != part.output[1] - part.output[0]:
        planned = part.output[1] - part.output[0]
        problems.append(f"{back.size} bytes of batches read back from its place in the joined file, not {planned}")
    if digest.hexdigests()[1] != result.output_digest_ts:
        problems.append(f"records or timestamps differ from the source ({result.digest} of the records read back)")
    if back.records != result.records:
        problems.append(f"{back.records} records read back, {result.records} in the source")
    if back.below_magic:
        problems.append(f"{back.below_magic} batches below magic {opts.target_magic} remain")
    if problems:
        part.outcome = Outcome.REFUSED
        part.problem = Problem(
            ProblemKind.VERIFY,
            f"range {part.index + 1} of {part.count} (bytes {part.start}..{part.stop}) did not verify: "
            f"{'; '.join(problems)}. Nothing live was changed; this is a bug in kafka-log-migrate: keep the segment "
            "and report it",
            task.source,
            part.start,
        )


def discard(parts: list[RangePart]) -> None:
    for part in parts:
        for path in part.files:
            Path(path).unlink(missing_ok=True)


def join_parts(task: SegmentTask, parts: list[RangePart], run: str | None = None) -> SegmentResult:
    """One segment from its converted ranges, under its final names in the staging dir (see the module docstring).

    Raises RangeRefusedError with the problem of a range that refused its bytes from a confirmed start, what
    ``convert_segment`` raises for what only the whole shows (offsets across ranges, the output's size). Every file
    of the ranges (and what an earlier, crashed run of them left) is removed whatever happens.
    """
    started = time.perf_counter()
    chain: list[RangePart] = []
    try:
        if task.options.pack_bytes is not None:
            # --pack-bytes groups the messages of each run the reader sees: only a whole conversion gives its bytes
            return convert_segment(task)
        if _missed_place(parts):
            # the plan's places did not hold (a bug, or a file changed in a way its size, mtime and inode hide):
            # nothing in the joined file can be trusted, and a whole conversion gives the segment's bytes
            return convert_segment(task)
        chain = _chain(task, sorted(parts, key=lambda p: p.index), run)
        return _join(task, chain, started, run)
    finally:
        discard(parts)
        discard(chain)
        remove_range_files(task)


def remove_range_files(task: SegmentTask) -> None:
    """Everything ranges of this segment left in the staging dir, of this run or an earlier one."""
    base = segment_name(task.base_offset)
    staging = Path(task.staging_dir)
    for pattern in (f"{base}.*.range-*", f"{base}.log.joining*", f"{base}.log.placing*"):
        for path in staging.glob(pattern):
            path.unlink(missing_ok=True)


def _missed_place(parts: list[RangePart]) -> bool:
    """Some range had a place in the joined file from the plan and its bytes are not exactly there."""
    return any(p.output is not None and p.outcome == Outcome.VERIFIED and not p.in_place for p in parts)


def _chain(task: SegmentTask, parts: list[RangePart], run: str | None) -> list[RangePart]:
    """The ranges that follow one another from byte 0 to the end of the file; a range that does not start where
    the previous one stopped is converted again from there."""
    chain: list[RangePart] = []
    expected = 0
    for part in parts:
        if chain and chain[-1].at_end:
            break  # the file ended (a listed torn tail) before this range: whatever it found is not entries
        if part.start != expected:
            if part.output is not None:
                raise RuntimeError(
                    f"range {part.index + 1} of {task.source} starts at byte {part.start}, where the plan found an "
                    f"entry, but the previous range stopped at byte {expected}"
                )
            discard([part])
            part = convert_range(task, part.index, part.count, part.nominal_start, part.nominal_end, expected, run)
        if part.outcome != Outcome.VERIFIED:
            assert part.problem is not None
            raise RangeRefusedError(part.problem)
        chain.append(part)
        expected = part.stop
    if not chain or not chain[-1].at_end:
        raise RuntimeError(f"the ranges of {task.source} end at byte {expected}, before the end of the file")
    return chain


def _join(task: SegmentTask, chain: list[RangePart], started: float, run: str | None) -> SegmentResult:
    source = Path(task.source)
    st = os.stat(source)
    check_planned(task, st)
    results = [p.result for p in chain if p.result is not None]
    result = SegmentResult(task.source, task.base_offset, ConversionStatus.CONVERTED, digest=task.options.digest)
    result.source_bytes = st.st_size
    result.mtime_ns = st.st_mtime_ns
    previous: int | None = None
    for part in chain:
        r = part.result
        assert r is not None
        if r.first_offset is not None:
            if previous is not None and r.first_offset <= previous:
                raise CorruptRecordError(
                    f"offset {r.first_offset} does not follow offset {previous}: offsets must strictly increase",
                    position=part.start,
                    offset=r.first_offset,
                    path=task.source,
                )
            previous = r.last_offset
            if result.first_offset is None:
                result.first_offset = r.first_offset
            result.last_offset = r.last_offset
        result.entries_in += r.entries_in
        result.batches_out += r.batches_out
        result.records += r.records
        result.mtime_timestamped_records += r.mtime_timestamped_records
        result.max_timestamp = max(result.max_timestamp, r.max_timestamp)
        result.truncated_tail_bytes += r.truncated_tail_bytes
        for magic, n in r.magics_in.items():
            result.magics_in[magic] = result.magics_in.get(magic, 0) + n
    total = sum(r.output_bytes for r in results)
    if total > MAX_SEGMENT_BYTES:
        raise SegmentRefusedError(
            f"the converted segment would exceed {MAX_SEGMENT_BYTES} bytes, the largest .log Kafka opens",
            path=task.source,
            hint="Convert this partition with compression (--compression lz4) or --pack-bytes, which shrink the "
            "output, or lower segment.bytes and let Kafka roll smaller segments first.",
        )
    if result.entries_in == 0:
        result.status = ConversionStatus.EMPTY
    elif not any(p.changed for p in chain):
        result.status = ConversionStatus.UNCHANGED
    if result.status == ConversionStatus.UNCHANGED:
        result.seconds = time.perf_counter() - started
        return result
    with_records = [r for r in results if r.records]
    if len(with_records) > 1:
        result.digest_splits = tuple(int(r.first_offset) for r in with_records[1:])  # type: ignore[arg-type]
        result.source_digest = composite(result.digest, [r.source_digest for r in with_records])
        result.output_digest_ts = composite(result.digest, [r.output_digest_ts for r in with_records])
    else:
        empty = LogDigest(algorithm=result.digest).hexdigests()
        result.source_digest, result.output_digest_ts = (
            (with_records[0].source_digest, with_records[0].output_digest_ts) if with_records else empty
        )
    result.live_before = live_stats(source.parent, task.base_offset)
    staging = Path(task.staging_dir)
    finals = SegmentFiles.of((kind, staging / segment_name(task.base_offset, kind)) for kind in CONVERTED_FILES)
    log_path = finals.require(FileKind.LOG)
    try:
        joined = joining_path(task, run)
        if all(p.in_place for p in chain):
            with open(joined, "ab") as f:  # every byte is in place; nothing of an earlier attempt past the end
                f.truncate(total)
        else:
            _assemble(joined, chain, _placed_prefix(task, chain, run), total)
        os.replace(joined, log_path)
        index = IndexBuilder(task.base_offset, task.options.index_interval_bytes)
        for part in chain:
            _feed(index, part.batches)
        offset_bytes, time_bytes = index.finish()
        for kind, data in ((FileKind.INDEX, offset_bytes), (FileKind.TIME_INDEX, time_bytes)):
            with open(finals.require(kind), "wb") as f:
                f.write(data)
        _check_joined(log_path, chain, total, index.valid_bytes)
        finish_outputs(result, finals, source.parent, task.base_offset, source, st)
    except BaseException:
        for p in finals.values():
            p.unlink(missing_ok=True)
        raise
    result.seconds = time.perf_counter() - started
    return result


def _assemble(joined: Path, chain: list[RangePart], placed: int, total: int) -> None:
    """Complete ``joined``: the first ``placed`` ranges are in it already; the others are copied in at their offsets
    by the kernel, on as many threads as there are cores (each copy releases the GIL). With nothing placed yet, the
    first range's part file becomes the joined file (a rename, no copy)."""
    paths = [p.result.outputs.require(FileKind.LOG) for p in chain]  # type: ignore[union-attr]
    sizes = [p.result.output_bytes for p in chain]  # type: ignore[union-attr]
    at = [sum(sizes[:i]) for i in range(len(sizes))]
    if placed == 0:
        os.replace(paths[0], joined)
        placed = 1
    out = os.open(joined, os.O_WRONLY)
    try:

        def place(i: int) -> None:
            src = os.open(paths[i], os.O_RDONLY)
            try:
                _copy_all(src, out, sizes[i], at[i])
            finally:
                os.close(src)

        rest = range(placed, len(chain))
        threads = min(len(rest), os.cpu_count() or 1)
        if threads > 1:
            with ThreadPoolExecutor(threads, thread_name_prefix="join") as pool:
                list(pool.map(place, rest))
        else:
            for i in rest:
                place(i)
        os.ftruncate(out, total)  # nothing of an earlier attempt past the end
    finally:
        os.close(out)


class _OutsidePlace(Exception):
    """A range's converted bytes would not fit the place the plan gave it in the joined file."""


class _PlacedWriter:
    """Writes a range's converted bytes straight into its place ``[start, end)`` of the joined file (which the
    segment's ranges share, each in its own place), refusing any byte past ``end``; asks the kernel to start writing
    each piece to disk as soon as it is written (see ``_start_writeback``), so the disk works during the conversion
    and ``_write_out`` seldom waits."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self.end, self.at = end, start

    def write(self, data: bytes | memoryview) -> int:
        n = len(data)
        if self.at + n > self.end:
            raise _OutsidePlace(f"{n} bytes at byte {self.at} of the joined file pass the range's end {self.end}")
        view, written = memoryview(data), 0
        while written < n:
            written += os.pwrite(self.fd, view[written:], self.at + written)
        _start_writeback(self.fd, self.at, n)
        self.at += n
        return n

    def __enter__(self) -> _PlacedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# --- placement: ranges copy themselves into the joined file as soon as their offset is known ---------------------


def _record_path(task: SegmentTask, index: int, run: str) -> Path:
    return part_path(task, index, "placed", run)


@dataclass(frozen=True)
class Placement:
    """What a range recorded for the ranges of its segment that place after it: where its entries start and stop in
    the source, its output's size, whether it reached the segment's end, and whether it is in the joined file."""

    start: int
    stop: int
    size: int
    at_end: bool
    placed: bool = False

    @classmethod
    def of(cls, part: RangePart, placed: bool = False) -> Placement:
        assert part.result is not None and part.start is not None
        return cls(part.start, part.stop, part.result.output_bytes, part.at_end, placed)


def _read_record(task: SegmentTask, index: int, run: str) -> Placement | None:
    try:
        return Placement(**json.loads(_record_path(task, index, run).read_text()))
    except FileNotFoundError:
        return None


def _write_record(task: SegmentTask, index: int, run: str, record: Placement) -> None:
    # whole or absent, not durable: a placement lives as long as its run's staging, and the join checks every byte
    path = _record_path(task, index, run)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(dataclasses.asdict(record)))
    os.replace(partial, path)


def _place(task: SegmentTask, part: RangePart, run: str) -> None:
    """Record where ``part`` starts and stops, then copy into the joined file every range of the run whose offset
    is known: the ranges recorded from the first on, each starting where the previous one stopped. Under a lock the
    segment's ranges share (they run on one host), so each range is placed once, by whoever finds it placeable."""
    assert part.result is not None and part.start is not None
    lock = os.open(_lock_path(task, run), os.O_RDWR | os.O_CREAT, 0o644)
    target = -1
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _write_record(task, part.index, run, Placement.of(part))
        offset = expected = 0
        for j in range(part.count):
            record = _read_record(task, j, run)
            if record is None or record.start != expected:
                break  # not done yet, or a start the join must check: the join places the rest
            if not record.placed:
                source = part_path(task, j, "log", run)
                if j == 0:
                    os.replace(source, joining_path(task, run))  # the first range is the joined file's start
                if target < 0:
                    target = os.open(joining_path(task, run), os.O_WRONLY)
                if j > 0:
                    src = os.open(source, os.O_RDONLY)
                    try:
                        _copy_all(src, target, record.size, offset)
                    finally:
                        os.close(src)
                    source.unlink()
                _start_writeback(target, offset, record.size)
                _write_record(task, j, run, dataclasses.replace(record, placed=True))
            offset += record.size
            expected = record.stop
            if record.at_end:
                break
    finally:
        if target >= 0:
            os.close(target)
        os.close(lock)  # and its lock


_libc = ctypes.CDLL(None, use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
_SYNC_FILE_RANGE_WRITE = 2


_SYNC_FILE_RANGE_WAIT_ALL = 1 | 2 | 4  # wait for earlier writeback, write, wait for it


def _write_out(path: Path, start: int, end: int) -> None:
    """Wait until a verified range's place is on disk, then let the kernel drop those pages from its cache.

    Nothing reads them again before the broker does (the join reads one header per range, the swap renames), and
    the pages freed are the ones the next range writes into: without this a GiB-scale migration grows the page cache
    by every byte it writes, and each new page costs the kernel (on this project's VMs, whose freed memory returns
    to the host, an 88 MB range took 0.35-0.45 s in fresh pages against 0.2 s in reused ones). Durability is still
    the swap's syncfs; this only writes earlier. Advisory: without sync_file_range only the clean pages are dropped.
    """
    if end <= start:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if _sync_file_range is not None:
            _sync_file_range(fd, start, end - start, _SYNC_FILE_RANGE_WAIT_ALL)
        os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _start_writeback(fd: int, offset: int, size: int) -> None:
    """Start writing a placed range of the joined file to disk now, without waiting: the disk then works while
    the next ranges convert, and the join's syncfs finds little left to write (by default the kernel would hold
    these pages back for up to 30 s). Advisory: nothing depends on it but speed."""
    if _sync_file_range is not None and size > 0:
        _sync_file_range(fd, offset, size, _SYNC_FILE_RANGE_WRITE)


def _placed_prefix(task: SegmentTask, chain: list[RangePart], run: str | None) -> int:
    """How many of the chain's first ranges are in the joined file already, exactly as the chain has them."""
    if not run or not joining_path(task, run).exists():
        return 0
    for i, part in enumerate(chain):
        record = _read_record(task, part.index, run)
        if record is None or record != Placement.of(part, placed=True):
            return i
    return len(chain)


def _copy_all(src: int, dst: int, size: int, at: int) -> int:
    """Copy all ``size`` bytes of ``src`` to ``dst`` at ``at``: in the kernel where it can, else through a buffer."""
    copied = 0
    try:
        while copied < size:
            n = os.copy_file_range(src, dst, size - copied, copied, at + copied)
            if n == 0:
                break
            copied += n
    except OSError as exc:
        # no copy_file_range between these files (an old kernel, another filesystem): copy through user space
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP) or copied:
            raise
        while copied < size:
            data = os.pread(src, min(8 << 20, size - copied), copied)
            if not data:
                break
            copied += os.pwrite(dst, data, at + copied)
    if copied != size:
        raise OSError(errno.EIO, f"copied {copied} of the {size} bytes of a converted range")
    return copied


def _feed(index: IndexBuilder, batches_path: str) -> None:
    """A part's batches into the index builder, a bounded block at a time."""
    with open(batches_path, "rb") as f:
        while True:
            raw = f.read(_BATCH_ROWS_PER_READ * _BATCH_ROW * 8)
            if not raw:
                return
            rows = np.frombuffer(raw, np.int64).reshape(-1, _BATCH_ROW)
            index.add_batches(rows[:, 0], rows[:, 1], rows[:, 2])


def _check_joined(log: Path, chain: list[RangePart], total: int, indexed: int) -> None:
    """The joined file is every part, whole and in order: its size, and each part's first batch header in place."""
    size = os.stat(log).st_size
    if size != total or indexed != total:
        raise RuntimeError(f"{log}: joined {size} bytes, indexed {indexed}, the ranges wrote {total}")
    position = 0
    fd = os.open(log, os.O_RDONLY)
    try:
        for part in chain:
            assert part.result is not None
            if part.head and os.pread(fd, len(part.head), position) != part.head:
                raise RuntimeError(f"{log}: range {part.index + 1} is not at byte {position} of the joined file")
            position += part.result.output_bytes
    finally:
        os.close(fd)
