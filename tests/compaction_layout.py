"""Partitions for compaction tests, written entry by entry in any mix of formats.

``Rec`` is one record; ``Entry`` says how a list of them is written: ``v0``/``v1`` uncompressed (a log entry per
record), ``v0``/``v1`` compressed (one wrapper), or one ``v2`` batch (optionally compressed, LogAppendTime,
transactional) whose records may carry the KIP-87 delete flag, which Kafka's own builders cannot set (records of a
v2 batch have an attributes byte Kafka ignores). ``write_partition`` writes ``<dir>/<base>.log`` files with the
given mtimes. Every writer is the package's own (``legacy.encode_*``, the v2 record writer), so tests judge the
bytes with the Kafka oracle too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.records import Compression, Record, RecordColumns, TimestampType


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = -1  # v1/v2 only
    headers: tuple[tuple[str, bytes | None], ...] = ()  # v2 only
    flag: bool = False  # KIP-87 delete flag (v2 only)


@dataclass(frozen=True)
class Entry:
    magic: int
    records: tuple[Rec, ...]
    compression: Compression = Compression.NONE
    log_append_time: int | None = None  # v1/v2: LogAppendTime at this time
    transactional: bool = False
    producer_id: int = -1
    last_offset: int | None = None  # v2: a batch header's last offset beyond its last record (a cleaned batch)


@dataclass
class Segment:
    base_offset: int
    mtime_ms: int
    entries: list[Entry] = field(default_factory=list)


def v2_batch(e: Entry, partition_leader_epoch: int = 0) -> bytes:
    recs = e.records
    cols = RecordColumns.from_records([Record(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs])
    lat = e.log_append_time is not None
    attributes = np.array([v2.KIP87_TOMBSTONE_BIT if r.flag else 0 for r in recs], np.uint8)
    return v2.encode_batch(
        cols,
        last_offset=e.last_offset,
        partition_leader_epoch=partition_leader_epoch,
        compression=e.compression,
        timestamp_type=TimestampType.LOG_APPEND_TIME if lat else TimestampType.CREATE_TIME,
        log_append_time=e.log_append_time,
        carried=v2.CarriedHeader(
            producer_id=e.producer_id,
            producer_epoch=0 if e.producer_id >= 0 else -1,
            base_sequence=-1 if e.producer_id < 0 else 0,
            is_transactional=e.transactional,
        ),
        record_attributes=attributes,
    )


def entry_bytes(e: Entry) -> bytes:
    if e.magic == 2:
        return v2_batch(e)
    records = [Record(r.offset, r.timestamp if e.magic == 1 else -1, r.key, r.value) for r in e.records]
    tstype = TimestampType.LOG_APPEND_TIME if e.log_append_time is not None else TimestampType.CREATE_TIME
    if e.compression == Compression.NONE:
        if tstype == TimestampType.LOG_APPEND_TIME:
            records = [r._replace(timestamp=e.log_append_time) for r in records]
        return legacy.encode_messages(records, e.magic, tstype)
    return legacy.encode_wrapper(records, e.magic, e.compression, tstype, e.log_append_time)


def write_partition(directory: Path, segments: list[Segment]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for seg in segments:
        path = directory / f"{seg.base_offset:020d}.log"
        path.write_bytes(b"".join(entry_bytes(e) for e in seg.entries))
        os.utime(path, ns=(seg.mtime_ms * 1_000_000, seg.mtime_ms * 1_000_000))
        paths.append(path)
    return paths
