"""Verify a converted segment from what is on disk, independently of the writer that produced it.

The staged ``.log`` is re-read with the reader (every CRC checked) in one streaming pass, into one reused buffer:
its records are digested (offsets, keys, values, headers and timestamps) and compared with the digest the conversion
computed from the *source* records and the timestamps its policy gives them, so equal digests mean the output holds
exactly the source's records with the promised timestamps. The same pass rebuilds both indexes the way Kafka's
recovery would from the re-read batches (``LogSegment.recover``), and the index files must equal them byte for byte:
that implies the rules of Kafka's ``DumpLogSegments`` (every offset-index entry points at the start of the batch
whose last offset it names; time-index timestamps strictly increase and each is the max so far at its offset), which
are checked one by one only to explain a difference. Every file keeps the source mtime. Memory is bounded by the
chunk, not the segment.

A segment of a compacted partition is compared instead, record by record (offset, key, value, headers, timestamp),
with the records the deliberately simple implementation says must survive (``migrate.compaction.reference``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import accel
from migrate.format import batch as v2
from migrate.format.digest import LogDigest
from migrate.format.entries import iter_records, read_entries, records_of, walk_entries
from migrate.format.records import BatchColumns, Record, RecordColumns
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentResult
from migrate.model.segment_files import SegmentFiles
from migrate.segment import offset_index, time_index
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import DEFAULT_CHUNK_BYTES, Chunk, decode_whole, read_chunks, read_file, read_whole


@dataclass
class SegmentCheck:
    path: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    batches: int = 0
    records: int = 0
    digest_ts: str = ""  # of the records read back, timestamps included (the algorithm of the result)

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)


@dataclass
class _Decoded:
    """A chunk of a converted log: its batches and their records, in groups (one per entry, or one for a run of
    uncompressed v2 batches decoded column-wise)."""

    consumed: int
    groups: list[tuple[BatchColumns, RecordColumns]]
    tail: int = 0


def _decode(buf: bytes | memoryview, final: bool) -> _Decoded:
    walk = walk_entries(buf)
    tail = walk.tail.size if final and walk.tail else 0
    if len(walk.positions) and (walk.magics == v2.MAGIC).all():
        columns = v2.decode_uncompressed_batches(buf, walk.positions, walk.sizes)
        if columns is not None:
            return _Decoded(walk.consumed, [(columns.batch_columns(), columns.records)], tail)
    entries = read_entries(buf, final=final, walk=walk)
    groups = [(item.batch_columns(), records_of(item)) for item in entries.items]
    return _Decoded(entries.consumed, groups, entries.tail.size if entries.tail else 0)


@dataclass
class ReadBack:
    """What one streaming pass over a converted log found."""

    batches: int = 0
    records: int = 0
    below_magic: int = 0  # batches below the target magic
    tail: int = 0  # bytes after the last complete batch
    size: int = 0  # bytes of complete batches
    head: bytes = b""  # the file's first 12 bytes (its first batch's offset and size)
    stat: os.stat_result | None = None  # of the file read, as it was opened


def read_back(
    log_path: str | Path,
    digest: LogDigest,
    index: IndexBuilder | None,
    target_magic: int,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    on_batches: Callable[[BatchColumns], None] | None = None,
    region: tuple[int, int] | None = None,
) -> ReadBack:
    """Re-read ``log_path`` once: every batch CRC-checked, its records into ``digest``, its batches into ``index``
    (Kafka's recovery rule) and ``on_batches``. ``region``: only the batches that start in ``[start, end)`` of the
    file (a range's place in a joined segment); sizes and the head are then the region's."""
    back = ReadBack()
    fd = os.open(log_path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = back.stat = os.fstat(fd)
        # a file under the chunk size is read whole, as the chunked read below would read it, without its buffers
        data = read_whole(fd, st.st_size) if region is None and st.st_size < chunk_bytes else None
        if data is None:
            src = open(fd, "rb", buffering=0)  # noqa: SIM115 - closed below (and it closes ``fd``)
    except BaseException:
        os.close(fd)
        raise
    if data is not None:
        os.close(fd)
        if not _take_whole(back, data, digest, index, on_batches):
            _take(back, decode_whole(data, str(log_path), _decode), 0, digest, index, target_magic, on_batches)
        back.records = digest.records
        return back
    start, end = region if region is not None else (0, None)
    with src:
        src.seek(start)
        left = (st.st_size if end is None else min(end, st.st_size)) - start
        chunks = read_chunks(
            src, str(log_path), chunk_bytes, decode=_decode, reuse=True, start=start, limit=end, size_hint=left
        )
        for chunk in chunks:
            _take(back, chunk, start, digest, index, target_magic, on_batches)
    back.records = digest.records
    return back


def _take(
    back: ReadBack,
    chunk: Chunk,
    start: int,
    digest: LogDigest,
    index: IndexBuilder | None,
    target_magic: int,
    on_batches: Callable[[BatchColumns], None] | None,
) -> None:
    """One chunk read back: its records into ``digest``, its batches into ``index`` and ``on_batches``."""
    decoded: _Decoded = chunk.entries
    if chunk.position == start:
        back.head = bytes(chunk.buffer[:12])
    groups = decoded.groups
    for _, records in groups:
        digest.update(records)
    batches = groups[0][0] if len(groups) == 1 else BatchColumns.concat([g[0] for g in groups])
    if len(batches):
        if index is not None:
            index.add_batches(batches.sizes, batches.last_offsets, batches.max_timestamps)
        if on_batches is not None:
            on_batches(batches)
        back.batches += len(batches)
        back.below_magic += int(np.count_nonzero(batches.magics < target_magic))
    back.size = chunk.end - start
    back.tail = decoded.tail or back.tail


_small_v2_records = accel.compiled("small_v2_records") if accel.speedups is not None else None


def _take_whole(
    back: ReadBack,
    data: bytes,
    digest: LogDigest,
    index: IndexBuilder | None,
    on_batches: Callable[[BatchColumns], None] | None,
) -> bool:
    """``_take`` of a whole small file of sound, uncompressed, header-less v2 batches (the usual converted tiny
    segment), read back by one call of the accelerator (``small_v2_records``: every CRC-32C checked, every record
    decoded as ``v2_batches`` decodes it, their digest serialization); False, with nothing taken, for any other file
    or digest (``_take`` then reads it, and names any problem)."""
    if _small_v2_records is None or not len(data):
        return False
    got = _small_v2_records(data)
    if got is None:
        return False
    raw_positions, raw_sizes, raw_lasts, raw_maxes, records, stream = got
    if not digest.update_timed_stream(stream, records):
        return False
    positions, sizes = np.frombuffer(raw_positions, np.int64), np.frombuffer(raw_sizes, np.int64)
    lasts, maxes = np.frombuffer(raw_lasts, np.int64), np.frombuffer(raw_maxes, np.int64)
    back.head = data[:12]
    if index is not None:
        index.add_batches(sizes, lasts, maxes)
    if on_batches is not None:
        on_batches(BatchColumns(positions, sizes, lasts, maxes, np.full(len(positions), v2.MAGIC, np.int64)))
    back.batches += len(positions)  # every batch of magic 2: none below any target magic
    back.size = len(data)
    return True


def verify_segment(
    result: SegmentResult,
    options: ConvertOptions,
    base_offset: int | None = None,
    expected: Iterable[Record] | None = None,
    mtimes: bool = True,
) -> SegmentCheck:
    """Check the staged outputs named by ``result`` against what the conversion promised; ``expected`` (a compacted
    partition's survivors in this segment) adds a record-by-record comparison with them. A split source's outputs
    (``result.parts``) are read in order into one digest: every record of the source once, in order, across them.
    ``mtimes=False``: the files' mtimes are not checked (live files after a broker started on them: it resizes and
    trims its active indexes, the same bytes with a new mtime)."""
    base = result.base_offset if base_offset is None else base_offset
    log_path = result.outputs.log or ""
    check = SegmentCheck(path=log_path)
    digest = LogDigest(plain=False, timed=True, algorithm=result.digest, splits=result.digest_splits)
    outputs = [(base, result.outputs, result.output_stats)]
    outputs += [(p.base_offset, p.outputs, p.output_stats) for p in result.parts or ()]
    below_magic = 0
    read: dict[str, os.stat_result] = {}  # each output's stat, from the descriptor it was read through
    for n, (part_base, files, stats) in enumerate(outputs):
        rebuilt = IndexBuilder(part_base, options.index_interval_bytes)
        seen = _Span()
        part_log = files.require(FileKind.LOG)
        try:
            back = read_back(part_log, digest, rebuilt, options.target_magic, options.chunk_bytes, seen.add)
        except (CorruptRecordError, UnsupportedFormatError, OSError) as exc:  # damaged since written: refused
            check.fail(f"cannot read the converted log {part_log}: {exc}")
            return check
        check.batches += back.batches
        below_magic += back.below_magic
        if back.stat is not None:
            read[part_log] = back.stat
        if back.tail:
            check.fail(f"{part_log}: {back.tail} bytes after the last complete batch")
        if result.parts is not None:
            _check_part(check, part_log, part_base, n, outputs, back, seen, options)
        _check_indexes(files, part_base, rebuilt, check, options, stats.map(lambda _, st: st.size), read)
    check.records = digest.records
    check.digest_ts = digest.hexdigests()[1]
    if expected is not None:
        try:
            for problem in compare_records([files.require(FileKind.LOG) for _, files, _ in outputs], expected):
                check.fail(problem)
        except CorruptRecordError as exc:
            check.fail(f"cannot compare the records with the compaction survivors: {exc}")
    if check.digest_ts != result.output_digest_ts:
        check.fail(_digest_problem(result, log_path, check.digest_ts, options.chunk_bytes))
    if check.records != result.records:
        check.fail(f"{check.records} records read back, {result.records} in the source")
    if below_magic:
        check.fail(f"{below_magic} batches below magic {options.target_magic} remain")
    for _, files, stats in outputs:
        for kind, path in files:
            st = read.get(path) or os.stat(path)
            want = stats.get(kind)
            if mtimes and st.st_mtime_ns != result.mtime_ns:
                check.fail(f"{path} has mtime_ns {st.st_mtime_ns}, the source had {result.mtime_ns}")
            if want is None or st.st_size != want.size:
                check.fail(f"{path} is {st.st_size} bytes, {want.size if want else 'nothing'} were written")
    return check


@dataclass
class _Span:
    """The last offset of the batches read back from one output."""

    last_offset: int | None = None

    def add(self, batches: BatchColumns) -> None:
        if len(batches):
            self.last_offset = int(batches.last_offsets[-1])


def _check_part(
    check: SegmentCheck,
    log_path: str,
    base: int,
    n: int,
    outputs: list,
    back: ReadBack,
    seen: _Span,
    options: ConvertOptions,
) -> None:
    """One output of a split source: within the size limit, opened by a batch of its own base offset (the first may
    start above it, as Kafka's segments do), every offset below the next output's base offset."""
    if back.size > options.segment_bytes_limit:
        check.fail(f"{log_path} holds {back.size} bytes, over the segment size limit {options.segment_bytes_limit}")
    first_base = int.from_bytes(back.head[:8], "big", signed=True) if len(back.head) >= 8 else None
    if n > 0 and first_base != base:
        check.fail(f"{log_path}: its first batch's base offset is {first_base}, not {base}, the offset it is named for")
    if n + 1 < len(outputs) and (seen.last_offset is None or seen.last_offset >= outputs[n + 1][0]):
        check.fail(
            f"{log_path}: its last offset {seen.last_offset} is not below the next output's base offset "
            f"{outputs[n + 1][0]}"
        )


def _digest_problem(result: SegmentResult, log_path: str, got: str, chunk_bytes: int) -> str:
    """Which promise a digest difference breaks: the records themselves, or only their timestamps. A second pass,
    on this (rare) path only, digests the records read back without timestamps for comparison with the source."""
    plain = LogDigest(plain=True, timed=False, algorithm=result.digest, splits=result.digest_splits)
    with contextlib.suppress(CorruptRecordError, OSError):  # the difference itself is the finding
        for path in [log_path, *(p.outputs.require(FileKind.LOG) for p in result.parts or ())]:
            read_back(path, plain, None, 0, chunk_bytes)
    if result.source_digest and plain.hexdigests()[0] == result.source_digest:
        return f"timestamps differ from what the conversion wrote: {result.digest} {got} != {result.output_digest_ts}"
    return (
        f"records differ from the source {result.source}: {result.digest} content digest "
        f"{plain.hexdigests()[0]} != source {result.source_digest}"
    )


_FIELDS = ("offset", "key", "value", "headers", "timestamp")


def compare_records(log_paths: str | list[str], expected: Iterable[Record], limit: int = 5) -> list[str]:
    """The records of ``log_paths`` (one log, or a split source's outputs in order) against ``expected``, one by
    one: the first differences, each named by record index, offset and field."""
    problems: list[str] = []
    paths = [log_paths] if isinstance(log_paths, str) else log_paths
    written = (r for path in paths for chunk in read_file(path) for r in iter_records(chunk.entries.items))
    for i, (got, want) in enumerate(itertools.zip_longest(written, expected)):
        if got is None:
            problems.append(f"record {i}: offset {want.offset} must survive compaction but is not in the output")
        elif want is None:
            problems.append(f"record {i}: offset {got.offset} is in the output but must not survive compaction")
        else:
            for name in _FIELDS:
                a, b = getattr(got, name), getattr(want, name)
                if name == "headers":
                    a, b = tuple(a), tuple(b)
                if a != b:
                    problems.append(
                        f"record {i} (offset {want.offset}): {name} is {_short(a)}, the survivor's is {_short(b)}"
                    )
                    break
        if len(problems) >= limit:
            break
    return problems


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_indexes(
    outputs: SegmentFiles[str],
    base: int,
    rebuilt: IndexBuilder,
    check: SegmentCheck,
    options: ConvertOptions,
    sizes: SegmentFiles[int] | None = None,
    read: dict[str, os.stat_result] | None = None,
) -> None:
    """The index files must be exactly what Kafka's recovery builds from the batches read back. ``sizes``: what the
    conversion wrote (the reads' first size; the files are read to their end whatever it is). ``read`` gets each
    index file's stat, taken through the descriptor it was read from."""
    sizes = sizes or SegmentFiles()
    stats = read if read is not None else {}
    index_data = _read(outputs.require(FileKind.INDEX), sizes.index or 0, stats)
    time_data = _read(outputs.require(FileKind.TIME_INDEX), sizes.time_index or 0, stats)
    try:
        want_index, want_time = rebuilt.finish()
    except ValueError as exc:  # batches read back whose offsets no index can hold: damaged since written
        check.fail(f"the batches read back from {outputs.log} cannot be indexed: {exc}")
        return
    if want_index == index_data and want_time == time_data:
        return
    if want_index != index_data:
        check.fail(
            "offset index differs from the one Kafka's recovery would build "
            f"({len(index_data)} vs {len(want_index)} bytes)"
        )
    if want_time != time_data:
        check.fail(
            f"time index differs from the one Kafka's recovery would build ({len(time_data)} vs {len(want_time)} bytes)"
        )
    try:
        explain_index_difference(outputs.require(FileKind.LOG), base, index_data, time_data, check, options.chunk_bytes)
    except (CorruptRecordError, UnsupportedFormatError, OSError) as exc:
        check.fail(f"cannot read the converted log to explain the index difference: {exc}")


def _read(path: str, size_hint: int = 0, stats: dict[str, os.stat_result] | None = None) -> bytes:
    """A small file whole (an index): one open and read, none of ``Path.read_bytes``'s layers. ``size_hint``: its
    expected size, so the first read asks for no more than it needs (and one more byte: a regular file's read comes
    back short only at its end). ``stats`` gets the file's stat, from the descriptor read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if stats is not None:
            stats[path] = os.fstat(fd)
        chunks = []
        want = size_hint + 1 if 0 <= size_hint < 1 << 20 else 1 << 20
        while data := os.read(fd, want):
            chunks.append(data)
            if len(data) < want:
                break
            want = 1 << 20
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def explain_index_difference(
    log_path: str, base: int, index_data: bytes, time_data: bytes, check: SegmentCheck, chunk_bytes: int
) -> None:
    """``kafka-dump-log --verify-index-only``'s rules, entry by entry: what is wrong with the index files. Holds
    every batch's columns, so only for a segment whose indexes already differ."""
    try:
        idx_offsets, idx_positions = offset_index.decode(index_data, base)
        ts_values, ts_offsets = time_index.decode(time_data, base)
    except CorruptRecordError as exc:
        check.fail(str(exc))
        return
    parts: list[BatchColumns] = []
    position = 0

    def keep(batches: BatchColumns) -> None:
        nonlocal position
        sizes = batches.sizes.copy()
        starts = position + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        position += int(sizes.sum())
        parts.append(BatchColumns(starts, sizes, batches.last_offsets.copy(), batches.max_timestamps.copy(), sizes))

    read_back(log_path, LogDigest(plain=False, timed=False), None, 0, chunk_bytes, on_batches=keep)
    all_batches = BatchColumns.concat(parts)
    positions, last_offsets, max_ts = all_batches.positions, all_batches.last_offsets, all_batches.max_timestamps
    at = np.searchsorted(positions, idx_positions)
    found = (
        (at < len(positions)) & (positions[np.minimum(at, len(positions) - 1)] == idx_positions)
        if len(positions)
        else at < 0
    )
    if not found.all():
        check.fail(f"{int((~found).sum())} offset-index entries do not point at a batch start")
    elif len(idx_offsets) and (last_offsets[at] != idx_offsets).any():
        i = int(np.argmax(last_offsets[at] != idx_offsets))
        check.fail(f"offset-index entry {i}: offset {idx_offsets[i]}, batch there ends at {last_offsets[at[i]]}")
    if len(idx_offsets) > 1 and ((np.diff(idx_offsets) <= 0).any() or (np.diff(idx_positions) <= 0).any()):
        check.fail("offset-index entries do not strictly increase")
    if len(ts_values) > 1 and (np.diff(ts_values) <= 0).any():
        check.fail("time-index timestamps do not strictly increase")
    holder = np.searchsorted(last_offsets, ts_offsets)
    ok = (
        (holder < len(last_offsets)) & (last_offsets[np.minimum(holder, len(last_offsets) - 1)] == ts_offsets)
        if len(last_offsets)
        else holder < 0  # no batch read back: no entry names one
    )
    if len(ts_offsets) and not ok.all():
        check.fail("time-index entries name offsets that are not a batch's last offset")
    elif len(ts_offsets) and (max_ts[holder] != ts_values).any():
        i = int(np.argmax(max_ts[holder] != ts_values))
        check.fail(
            f"time-index entry {i}: timestamp {ts_values[i]}, the batch holding offset {ts_offsets[i]} "
            f"has max {max_ts[holder[i]]}"
        )
