"""Verify a converted segment from what is on disk, independently of the writer that produced it.

The staged ``.log`` is re-read with the reader (every CRC checked), its records digested and compared with the
source's digest; both indexes are checked with the rules of Kafka's ``DumpLogSegments`` (every offset-index entry
points at the start of the batch whose last offset it names; time-index timestamps strictly increase and each equals
the max timestamp of the batch holding its offset) and compared with the indexes Kafka's recovery would rebuild from
the re-read batches; every file keeps the source mtime.

A segment of a compacted partition is compared instead, record by record (offset, key, value, headers, timestamp),
with the records the deliberately simple implementation says must survive (``migrate.compaction_reference``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from migrate.errors import CorruptRecordError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import Entries, iter_records, read_entries, walk_entries
from migrate.format.records import Record
from migrate.model import ConvertOptions, SegmentResult
from migrate.segment import offset_index, time_index
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import read_chunks, read_file


@dataclass
class SegmentCheck:
    path: str
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    batches: int = 0
    records: int = 0
    sha256: str = ""
    sha256_ts: str = ""

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Batches:
    """Per batch of a segment, as numpy arrays appended a chunk at a time (millions of batches: no Python ints)."""

    parts: list[tuple[np.ndarray, ...]] = field(default_factory=list)

    def add(self, positions, sizes, last_offsets, max_timestamps, magics) -> None:
        self.parts.append(
            tuple(np.asarray(a, np.int64) for a in (positions, sizes, last_offsets, max_timestamps, magics))
        )

    def columns(self) -> tuple[np.ndarray, ...]:
        if not self.parts:
            return tuple(np.zeros(0, np.int64) for _ in range(5))
        return tuple(np.concatenate(col) for col in zip(*self.parts))


@dataclass
class _Decoded:
    consumed: int
    columns: v2.V2Columns | None = None  # a run of uncompressed v2 batches, decoded column-wise
    entries: Entries | None = None  # anything else, from the general reader
    tail: int = 0


def _decode(buf: bytes, final: bool) -> _Decoded:
    walk = walk_entries(buf)
    if len(walk.positions) and (walk.magics == v2.MAGIC).all():
        columns = v2.decode_uncompressed_batches(buf, walk.positions, walk.sizes)
        if columns is not None:
            return _Decoded(walk.consumed, columns=columns, tail=walk.tail.size if final and walk.tail else 0)
    entries = read_entries(buf, final=final)
    return _Decoded(entries.consumed, entries=entries, tail=entries.tail.size if entries.tail else 0)


def read_segment_batches(log_path: str | Path, chunk_bytes: int = 8 << 20) -> tuple[_Batches, LogDigest, int]:
    """Every batch's position, size, last offset, max timestamp and magic, the records' digest, and tail bytes.

    Runs of uncompressed v2 batches (what a conversion mostly writes) are decoded column-wise by
    ``decode_uncompressed_batches``; everything else goes through the general reader.
    """
    batches = _Batches()
    digest = LogDigest()
    tail = 0
    with open(log_path, "rb") as src:
        for chunk in read_chunks(src, str(log_path), chunk_bytes, decode=_decode):
            decoded = chunk.entries
            if decoded.columns is not None:
                _add_columns(batches, digest, decoded.columns, chunk.position)
            else:
                _add_items(batches, digest, decoded.entries.items, chunk.position)
            tail = decoded.tail or tail
    return batches, digest, tail


def _add_columns(batches: _Batches, digest: LogDigest, cols: v2.V2Columns, position: int) -> None:
    batches.add(
        cols.positions + position, cols.sizes, cols.last_offsets, cols.max_timestamps, np.full(len(cols.positions), 2)
    )
    digest.update(cols.records)


def _add_items(batches: _Batches, digest: LogDigest, items: list, position: int) -> None:
    for item in items:
        if isinstance(item, legacy.LegacyRun):
            batches.add(
                item.positions + position, item.sizes, item.records.offsets, item.records.timestamps, item.magics
            )
            digest.update(item.records)
            continue
        if isinstance(item, v2.V2Batch):
            last, max_ts, magic = item.last_offset, item.max_timestamp, 2
        else:
            last, max_ts, magic = item.offset, item.timestamp, item.magic
        batches.add([position + item.position], [item.size], [last], [max_ts], [magic])
        assert item.records is not None
        digest.update(item.records)


def verify_segment(
    result: SegmentResult,
    options: ConvertOptions,
    base_offset: int | None = None,
    expected: Iterable[Record] | None = None,
) -> SegmentCheck:
    """Check the staged outputs named by ``result`` against what the conversion promised; ``expected`` (a compacted
    partition's survivors in this segment) replaces the comparison with the source's digest."""
    base = result.base_offset if base_offset is None else base_offset
    log_path = result.outputs.get(".log", "")
    check = SegmentCheck(path=log_path)
    try:
        batches, digest, tail = read_segment_batches(log_path)
    except (CorruptRecordError, OSError) as exc:
        check.fail(f"cannot read the converted log: {exc}")
        return check
    positions, sizes, last_offsets, max_timestamps, magics = batches.columns()
    check.batches = len(sizes)
    check.records = digest.records
    check.sha256, check.sha256_ts = digest.hexdigests()
    if tail:
        check.fail(f"{tail} bytes after the last complete batch")
    if expected is not None:
        try:
            for problem in compare_records(log_path, expected):
                check.fail(problem)
        except CorruptRecordError as exc:
            check.fail(f"cannot compare the records with the compaction survivors: {exc}")
    elif check.sha256 != result.source_digest:
        check.fail(
            f"records differ from the source {result.source}: content digest {check.sha256} != source "
            f"{result.source_digest}"
        )
    if check.sha256_ts != result.output_digest_ts:
        check.fail(f"timestamps differ from what the conversion wrote: {check.sha256_ts} != {result.output_digest_ts}")
    if digest.records != result.records:
        check.fail(f"{digest.records} records read back, {result.records} in the source")
    low = int((magics < options.target_magic).sum())
    if low:
        check.fail(f"{low} batches below magic {options.target_magic} remain")
    _check_indexes(result, options, base, positions, sizes, last_offsets, max_timestamps, check)
    for sfx, path in result.outputs.items():
        st = os.stat(path)
        want = result.output_stats.get(sfx)
        if st.st_mtime_ns != result.mtime_ns:
            check.fail(f"{path} has mtime_ns {st.st_mtime_ns}, the source had {result.mtime_ns}")
        if want is None or st.st_size != want.size:
            check.fail(f"{path} is {st.st_size} bytes, {want.size if want else 'nothing'} were written")
    return check


_FIELDS = ("offset", "key", "value", "headers", "timestamp")


def compare_records(log_path: str, expected: Iterable[Record], limit: int = 5) -> list[str]:
    """The records of ``log_path`` against ``expected``, one by one: the first differences, each named by record
    index, offset and field."""
    problems: list[str] = []
    written = (r for chunk in read_file(log_path) for r in iter_records(chunk.entries.items))
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
    result: SegmentResult,
    options: ConvertOptions,
    base: int,
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_ts: np.ndarray,
    check: SegmentCheck,
) -> None:
    index_data = Path(result.outputs[".index"]).read_bytes()
    time_data = Path(result.outputs[".timeindex"]).read_bytes()
    try:
        idx_offsets, idx_positions = offset_index.decode(index_data, base)
        ts_values, ts_offsets = time_index.decode(time_data, base)
    except CorruptRecordError as exc:
        check.fail(str(exc))
        return
    # DumpLogSegments --verify-index-only: the batch at each entry's position has the entry's offset as last offset
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
    # DumpLogSegments time-index check: strictly increasing, and the batch ending at the entry's offset has that max
    if len(ts_values) > 1 and (np.diff(ts_values) <= 0).any():
        check.fail("time-index timestamps do not strictly increase")
    holder = np.searchsorted(last_offsets, ts_offsets)
    ok = (holder < len(last_offsets)) & (last_offsets[np.minimum(holder, max(len(last_offsets) - 1, 0))] == ts_offsets)
    if len(ts_offsets) and not ok.all():
        check.fail("time-index entries name offsets that are not a batch's last offset")
    elif len(ts_offsets) and (max_ts[holder] != ts_values).any():
        i = int(np.argmax(max_ts[holder] != ts_values))
        check.fail(
            f"time-index entry {i}: timestamp {ts_values[i]}, the batch holding offset {ts_offsets[i]} "
            f"has max {max_ts[holder[i]]}"
        )
    # completeness: exactly what Kafka's recovery would rebuild from these batches
    rebuilt = IndexBuilder(base, options.index_interval_bytes)
    rebuilt.add_batches(sizes, last_offsets, max_ts)
    want_index, want_time = rebuilt.finish()
    if want_index != index_data:
        check.fail(
            "offset index differs from the one Kafka's recovery would build "
            f"({len(index_data)} vs {len(want_index)} bytes)"
        )
    if want_time != time_data:
        check.fail(
            f"time index differs from the one Kafka's recovery would build ({len(time_data)} vs {len(want_time)} bytes)"
        )
