"""The survivors of a compacted partition, computed the deliberately simple way: what verification trusts.

``migrate.compaction.pass_one`` is built for memory (key digests, sorted numpy arrays, merges). This module shares none
of that: a plain dict from each key's bytes to its best record so far, one Python step per record, KIP-280's rules
written as tuple comparisons, its own reading of the KIP-87 bit and of the timestamps a conversion gives. Keying by
the real bytes also catches what a digest cannot: two keys with the same digest. Its memory is a dict over the
partition's distinct keys (about 330 bytes per key in CPython: ``benchmarks/bench_compaction.py --reference``), the
price of being obviously right; it runs once per compacted partition, in the compact stage, and again per segment
only as a filter over one segment.

``expected_records`` gives, for one source segment, the records a compacted conversion must write: the survivors,
with the timestamps the conversion gives them, for a record-by-record comparison with the output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from migrate.compaction.facts import SegmentSource
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import Entry
from migrate.format.records import Record, TimestampType
from migrate.model.plan_tree import CompactionStrategy, TimestampPolicy
from migrate.segment.reader import read_file

KIP87_DELETE_BIT = 0x20  # bit 5 of a v2 record's attributes byte


@dataclass(frozen=True)
class ReferenceResult:
    survivors: list[int]
    keyless: list[int]
    records: int
    distinct_keys: int


def _varint(body: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (protobuf sint), as a v2 record's length is written."""
    shift = raw = 0
    while True:
        b = body[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _record_attributes(batch: v2.V2Batch) -> list[int]:
    assert batch.records is not None
    body = bytes(memoryview(batch.records.buffer).cast("B"))
    out, pos = [], 0
    for _ in range(len(batch.records)):
        length, pos = _varint(body, pos)
        out.append(body[pos])
        pos += length
    return out


def _rows(entry: Entry) -> list[tuple[Record, int]]:
    """Each record of the entry with its attributes byte (0 outside v2: no KIP-87 flag there)."""
    records = entry.rows()
    if isinstance(entry, v2.V2Batch):
        return list(zip(records, _record_attributes(entry)))
    return [(r, 0) for r in records]


def converted_timestamp(entry: Entry, record: Record, mtime_ms: int, policy: TimestampPolicy) -> int:
    if record.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE:  # a v0 record
        return mtime_ms if policy == TimestampPolicy.MTIME else -1
    if isinstance(entry, legacy.LegacyWrapper) and entry.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return entry.timestamp
    return record.timestamp


def _header_value(record: Record, name: str) -> int | None:
    found = None
    for k, v in record.headers:
        if k == name:
            found = v
    if found is None or len(found) != 8:
        return None
    return int.from_bytes(found, "big", signed=True)


def _segments(sources: Iterable[SegmentSource]) -> Iterator[tuple[SegmentSource, Entry]]:
    for src in sources:
        for chunk in read_file(src.path):
            for entry in chunk.entries.items:
                yield src, entry


def reference_survivors(
    sources: Iterable[SegmentSource],
    strategy: CompactionStrategy,
    header: str,
    policy: TimestampPolicy,
    drop_tombstones_older_than_ms: int | None,
) -> ReferenceResult:
    """``sources``: the partition's segments, in offset order. ``strategy`` is taken as given, except
    that a header strategy with a blank name is offset (KIP-280)."""
    if strategy == CompactionStrategy.HEADER and not header.strip():
        strategy = CompactionStrategy.OFFSET
    best: dict[bytes, tuple[tuple[int, ...], int, bool, int]] = {}  # key -> (rank, offset, is a delete, clock)
    keyless: list[int] = []
    records = 0
    last_offset = None
    newest = None
    for src, entry in _segments(sources):
        for record, attributes in _rows(entry):
            records += 1
            last_offset = record.offset
            timestamp = converted_timestamp(entry, record, src.mtime_ms, policy)
            clock = src.mtime_ms if record.timestamp_type == TimestampType.NO_TIMESTAMP_TYPE else timestamp
            newest = clock if newest is None else max(newest, clock)
            if record.key is None:
                keyless.append(record.offset)
                continue
            if strategy == CompactionStrategy.OFFSET:
                rank: tuple[int, ...] = (record.offset,)
            elif strategy == CompactionStrategy.TIMESTAMP:
                rank = (timestamp, record.offset)
            else:
                value = _header_value(record, header)
                rank = (0, 0, record.offset) if value is None else (1, value, record.offset)
            delete = record.value is None or bool(attributes & KIP87_DELETE_BIT)
            if record.key not in best or rank > best[record.key][0]:
                best[record.key] = (rank, record.offset, delete, clock)
    keep = set()
    for _, offset, delete, clock in best.values():
        horizon = (
            None if drop_tombstones_older_than_ms is None or newest is None else newest - drop_tombstones_older_than_ms
        )
        if delete and horizon is not None and clock < horizon:
            continue
        keep.add(offset)
    if last_offset is not None:
        keep.add(last_offset)  # the log end record always stays (KIP-280)
    return ReferenceResult(sorted(keep), keyless, records, len(best))


def expected_records(
    path: str, survivors: np.ndarray, mtime_ms: int, policy: TimestampPolicy, chunk_bytes: int = 8 << 20
) -> Iterator[Record]:
    """The records a compacted conversion of the segment at ``path`` must write, in order: each survivor as
    (offset, timestamp the conversion gives it, key, value, headers)."""
    for chunk in read_file(path, chunk_bytes):
        for entry in chunk.entries.items:
            rows = _rows(entry)
            offsets = np.array([r.offset for r, _ in rows], np.int64)
            at = np.minimum(np.searchsorted(survivors, offsets), max(len(survivors) - 1, 0))
            kept = (np.asarray(survivors[at]) == offsets) if len(survivors) else np.zeros(len(rows), bool)
            for (record, _), keep in zip(rows, kept.tolist()):
                if keep:
                    yield Record(
                        record.offset,
                        converted_timestamp(entry, record, mtime_ms, policy),
                        record.key,
                        record.value,
                        tuple(record.headers),
                    )
