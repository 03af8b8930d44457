"""The partitions of the log dirs being served, read as a broker's fetch path reads its log: read-only.

A fetch of ``offset`` finds the segment whose base offset is the highest at or below it, and there the first entry
whose last offset is at or past it (``LogSegment.translateOffset``: a legacy entry's offset field is its last offset,
a v2 batch's last offset is its base offset plus its last offset delta); if that segment holds none, the next
segment. From that entry's first byte it returns the segment file's bytes unchanged, as many as the fetch allows and
no further than the end of the segment's last complete entry (``LogSegment.read``): a cut may fall inside an entry,
and the client drops the partial entry, as with a broker. ``min_one`` is KIP-74: the first partition of a response
that returns data gets its whole first entry even when that is larger than the fetch's limits. A read never spans
two segments, as a broker's does not.

Each segment's entries are found once, when first read, by walking their headers (the sizes of every entry, as
Kafka's ``FileLogInputStream`` does), keeping the first entry of every 4 KiB of the file (a sparse index, as Kafka's
``.index`` is, so a segment of millions of entries costs kilobytes): a read scans forward from the nearest one. The
``.index`` files on disk are not trusted or needed. A walk stops at an incomplete last entry (a torn tail: never
served, as log recovery would have truncated it) or at damage (an entry size below 14, an unknown magic byte),
which the endpoint reports and does not serve past in that segment.

The log end offset is the last segment's last complete entry's last offset plus one (its base offset when it holds
none); the log start offset the ``log-start-offset-checkpoint`` entry, or the first segment's base offset when
that is higher or there is none; the leader epoch the last entry of ``leader-epoch-checkpoint`` (else 0); the topic id
the one in ``partition.metadata``, else one derived from the topic's name.

Not modelled: transactions (no aborted transaction is ever listed: a read_committed consumer sees aborted records
as committed ones), the time index (a ListOffsets by timestamp reads every entry header up to the answer), and any
change to the files while they are served (the endpoint is for a stopped broker's log dirs or their copies).
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.errors import LocatedError, LogDirAccessError, MigrateError
from migrate.format.buffers import as_u8, gather_be
from migrate.format.entries import Walk, read_entries, walk_entries
from migrate.kafka.layout import Segment, inspect_log_dir
from migrate.kafka.names import LOG_START_CHECKPOINT
from migrate.kafka.properties import leader_epoch_entries, read_meta_properties, read_offset_checkpoint, read_topic_id
from migrate.segment.reader import read_chunks

INDEX_INTERVAL = 4096  # Kafka's index.interval.bytes default: one sampled entry per this many bytes of segment
_SCAN_WINDOW = 65536
_HEAD = struct.Struct(">qib")  # offset field, size, (partition leader epoch or crc, ...) up to the magic byte at 16
_V2_LAST_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch
_V2_MAX_TIMESTAMP_AT = 35  # baseOffset 8, length 4, epoch 4, magic 1, crc 4, attributes 2, lastDelta 4, first ts 8
_V1_TIMESTAMP_AT = 18  # offset 8, size 4, crc 4, magic 1, attributes 1
_I64 = struct.Struct(">q")


class OffsetOutOfRange(Exception):
    """A fetch or lookup of an offset outside log start .. log end."""


@dataclass(frozen=True)
class EntryIndex:
    """What the walk of one segment found: where its complete entries end, the last offset of the last one, a sparse
    sample of (last offset, position), and why the walk ended before the file's end, if it did."""

    valid_end: int
    last_offset: int | None
    sample_last: np.ndarray
    sample_position: np.ndarray
    stopped: str | None = None


@dataclass(frozen=True)
class EntryHead:
    position: int
    size: int  # including the 12-byte offset and size
    magic: int
    last_offset: int


class _Stop:
    """The walk of a chunk that ended at damage: the entries before it, and the error."""

    def __init__(self, walk: Walk, error: LocatedError) -> None:
        self.walk = walk
        self.error = error
        self.consumed = walk.consumed


def _walk_until_damage(buf: bytes | memoryview, final: bool) -> Walk | _Stop:
    try:
        return walk_entries(buf)
    except LocatedError as exc:
        stop = exc.position or 0
        return _Stop(walk_entries(buf[:stop]), exc)


def _last_offsets(u8: np.ndarray, positions: np.ndarray, magics: np.ndarray) -> np.ndarray:
    last = gather_be(u8, positions, 8)
    v2 = magics >= 2
    if v2.any():
        last[v2] += gather_be(u8, positions[v2] + 23, 4)
    return last


def walk_segment(path: Path) -> EntryIndex:
    """Every complete entry of one segment file, as a sparse index (one read of the whole file)."""
    samples_last: list[np.ndarray] = []
    samples_position: list[np.ndarray] = []
    last_offset: int | None = None
    valid_end = 0
    stopped: str | None = None
    previous_page = -1
    with open(path, "rb") as src:
        for chunk in read_chunks(src, str(path), decode=_walk_until_damage):
            decoded = chunk.entries
            walk: Walk = decoded.walk if isinstance(decoded, _Stop) else decoded
            if len(walk.positions):
                u8 = as_u8(chunk.buffer)
                last = _last_offsets(u8, walk.positions, walk.magics)
                absolute = walk.positions + chunk.position
                page = absolute // INDEX_INTERVAL
                keep = np.empty(len(page), bool)
                keep[0] = page[0] != previous_page
                np.not_equal(page[1:], page[:-1], out=keep[1:])
                samples_last.append(last[keep])
                samples_position.append(absolute[keep])
                previous_page = int(page[-1])
                last_offset = int(last[-1])
            valid_end = chunk.position + walk.consumed
            if isinstance(decoded, _Stop):
                stopped = f"{path}: not served past byte position {valid_end}: {decoded.error.reason}"
                break
    size = path.stat().st_size
    if stopped is None and valid_end < size:
        stopped = f"{path}: {size - valid_end} bytes after the last complete entry (a torn tail) are not served"
    return EntryIndex(
        valid_end,
        last_offset,
        np.concatenate(samples_last) if samples_last else np.zeros(0, np.int64),
        np.concatenate(samples_position) if samples_position else np.zeros(0, np.int64),
        stopped,
    )


class ServedSegment:
    """One ``.log`` file: its entries found on first use, its bytes read with ``pread`` on a read-only descriptor."""

    def __init__(self, segment: Segment) -> None:
        self.base_offset = segment.base_offset
        self.path = segment.path
        self._index: EntryIndex | None = None
        self._lock = threading.Lock()

    def index(self) -> EntryIndex:
        with self._lock:
            if self._index is None:
                self._index = walk_segment(self.path)
            return self._index

    def heads(self, position: int) -> Iterable[EntryHead]:
        """The headers of the complete entries from ``position`` (an entry start) on, in file order."""
        end = self.index().valid_end
        with open(self.path, "rb", buffering=0) as f:
            window, window_at = b"", position
            while position < end:
                rel = position - window_at
                if rel + 27 > len(window) and window_at + len(window) < end:
                    window, window_at, rel = os.pread(f.fileno(), _SCAN_WINDOW, position), position, 0
                offset, size, _ = _HEAD.unpack_from(window, rel)
                magic = window[rel + 16]
                last = offset
                if magic >= 2:
                    last += _V2_LAST_DELTA.unpack_from(window, rel + 23)[0]
                yield EntryHead(position, size + 12, magic, last)
                position += size + 12

    def find(self, offset: int) -> EntryHead | None:
        """The first entry whose last offset is at or past ``offset``, or None when this segment holds none."""
        index = self.index()
        if index.last_offset is None or offset > index.last_offset:
            return None
        j = int(np.searchsorted(index.sample_last, offset, "left"))
        start = int(index.sample_position[j - 1]) if j > 0 else 0
        for head in self.heads(start):
            if head.last_offset >= offset:
                return head
        return None

    def read(self, position: int, size: int) -> bytes:
        with open(self.path, "rb", buffering=0) as f:
            return os.pread(f.fileno(), size, position)

    def max_timestamp(self, head: EntryHead) -> int:
        """An entry's max timestamp from its header (-1 for magic 0, which has none)."""
        if head.magic == 0:
            return -1
        at = _V2_MAX_TIMESTAMP_AT if head.magic >= 2 else _V1_TIMESTAMP_AT
        return int(_I64.unpack(self.read(head.position + at, 8))[0])


def topic_id_bytes(text: str | None, topic: str) -> bytes:
    """A topic id's 16 bytes: ``partition.metadata``'s (base64url, as Kafka's ``Uuid.toString``), else derived from
    the topic's name (stable across runs, so a client sees the same id every time)."""
    if text:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except ValueError:
            raw = b""
        if len(raw) == 16:
            return raw
    return hashlib.sha256(f"kafka-log-migrate serve/{topic}".encode()).digest()[:16]


@dataclass
class ServedPartition:
    topic: str
    partition: int
    dir: Path
    segments: list[ServedSegment]
    checkpoint_start: int | None
    leader_epoch: int
    topic_id: bytes
    problems: list[str] = field(default_factory=list)

    @property
    def log_start_offset(self) -> int:
        first = self.segments[0].base_offset if self.segments else 0
        return max(first, self.checkpoint_start) if self.checkpoint_start is not None else first

    @property
    def log_end_offset(self) -> int:
        if not self.segments:
            return self.log_start_offset
        last = self.segments[-1]
        index = last.index()
        return last.base_offset if index.last_offset is None else index.last_offset + 1

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes:
        """The bytes a broker returns for a fetch at ``offset`` of at most ``max_bytes`` (see the module docstring);
        raises OffsetOutOfRange outside log start .. log end."""
        end = self.log_end_offset
        if offset < self.log_start_offset or offset > end:
            raise OffsetOutOfRange(f"offset {offset} is outside {self.log_start_offset}..{end}")
        if offset == end:
            return b""
        first = max((i for i, s in enumerate(self.segments) if s.base_offset <= offset), default=0)
        for segment in self.segments[first:]:
            head = segment.find(offset)
            if head is None:
                continue
            limit = max(max_bytes, head.size) if min_one else max_bytes
            if limit <= 0:
                return b""
            return segment.read(head.position, min(segment.index().valid_end - head.position, limit))
        return b""

    def heads(self) -> Iterable[tuple[ServedSegment, EntryHead]]:
        for segment in self.segments:
            for head in segment.heads(0):
                yield segment, head

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp``, as ``fetchOffsetByTimestamp``; None
        when there is none."""
        for segment, head in self.heads():
            if segment.max_timestamp(head) >= timestamp:
                for record in read_entries(segment.read(head.position, head.size)).records():
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record of the largest timestamp; None in an empty log."""
        best: tuple[int, ServedSegment, EntryHead] | None = None
        for segment, head in self.heads():
            ts = segment.max_timestamp(head)
            if best is None or ts > best[0]:
                best = (ts, segment, head)
        if best is None:
            return None
        ts, segment, head = best
        for record in read_entries(segment.read(head.position, head.size)).records():
            if record.timestamp == ts:
                return record.offset, record.timestamp
        return None


@dataclass
class ServedLog:
    """Every live partition of the served log dirs, and the broker identity their ``meta.properties`` give."""

    log_dirs: tuple[Path, ...]
    partitions: dict[tuple[str, int], ServedPartition]
    node_id: int
    cluster_id: str
    warnings: list[str]

    def topics(self) -> dict[str, list[ServedPartition]]:
        out: dict[str, list[ServedPartition]] = {}
        for (topic, _), p in sorted(self.partitions.items()):
            out.setdefault(topic, []).append(p)
        return out


def open_log(log_dirs: Iterable[str | Path]) -> ServedLog:
    """The partitions of ``log_dirs`` (one broker's), each last segment walked at once so the log end offsets are
    known. Raises MigrateError for a path that is not a log dir or a partition found in two of them."""
    dirs = tuple(Path(d).resolve() for d in log_dirs)
    partitions: dict[tuple[str, int], ServedPartition] = {}
    warnings: list[str] = []
    node_id, cluster_id = 0, ""
    for d in dirs:
        try:
            layout = inspect_log_dir(d)
            meta = read_meta_properties(d)
            starts = read_offset_checkpoint(d / LOG_START_CHECKPOINT)
        except (LogDirAccessError, MigrateError) as exc:
            raise MigrateError(f"cannot serve {d}: {exc}") from None
        if meta is not None:
            node_id = meta.broker_id if meta.broker_id is not None else node_id
            cluster_id = meta.cluster_id or cluster_id
        warnings += layout.warnings
        for part in layout.partitions:
            key = (part.topic, part.partition)
            if key in partitions:
                raise MigrateError(
                    f"{part.topic}-{part.partition} is in two of the served log dirs ({partitions[key].dir} and "
                    f"{part.path}): serve the log dirs of one broker, where each partition lives once."
                )
            epochs = leader_epoch_entries(part.path)
            served = ServedPartition(
                part.topic,
                part.partition,
                part.path,
                [ServedSegment(s) for s in part.segments],
                starts.get(key),
                epochs[-1][0] if epochs else 0,
                topic_id_bytes(read_topic_id(part.path), part.topic),
            )
            for segment in served.segments:
                if segment is served.segments[-1]:
                    stopped = segment.index().stopped
                    if stopped:
                        served.problems.append(stopped)
            partitions[key] = served
    warnings += [w for p in partitions.values() for w in p.problems]
    return ServedLog(dirs, partitions, node_id, cluster_id or "kafka-log-migrate-serve", warnings)
