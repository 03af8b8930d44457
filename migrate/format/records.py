"""The record model shared by every format.

A record is what Kafka's deep iteration yields: an absolute offset, a timestamp and its type, a key and a value
(``None`` and ``b""`` are different things: a null value is a tombstone, an empty value is not), and headers (v2
only). ``Record`` is the row-wise form used by tests, ``dump`` and writers of small batches. ``RecordColumns`` is the
columnar form used on the hot path: offsets, timestamps and the positions and lengths of keys and values as numpy
arrays over one buffer, so that a million records cost arrays, not a million Python objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

NO_TIMESTAMP = -1
Header = tuple[str, bytes | None]


class TimestampType(enum.IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Compression(enum.IntEnum):
    """The codec ids of the low three attribute bits, the same in every magic."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, name: str) -> Compression:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"unknown compression {name!r}: use none, gzip, snappy, lz4 or zstd") from None


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    batch_position: int = 0


@dataclass(slots=True)
class RecordColumns:
    """Records as columns over ``buffer``: ``key_len``/``value_len`` of -1 mean null.

    ``headers`` is None when no record has headers (always so for magic 0/1), else one tuple per record.
    """

    buffer: bytes | bytearray | memoryview
    offsets: np.ndarray
    timestamps: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    headers: list[tuple[Header, ...]] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def key(self, i: int) -> bytes | None:
        n = int(self.key_len[i])
        if n < 0:
            return None
        p = int(self.key_pos[i])
        return bytes(self.buffer[p : p + n])

    def value(self, i: int) -> bytes | None:
        n = int(self.value_len[i])
        if n < 0:
            return None
        p = int(self.value_pos[i])
        return bytes(self.buffer[p : p + n])

    def rows(
        self,
        timestamp_type: TimestampType | np.ndarray = TimestampType.CREATE_TIME,
        batch_position: int | np.ndarray = 0,
    ) -> list[Record]:
        """Every record, row-wise. ``timestamp_type`` and ``batch_position``: one for all records, or one each (the
        messages of a legacy run are each their own entry)."""
        n = len(self)
        types: list[TimestampType] = (
            [TimestampType(t) for t in timestamp_type.tolist()]
            if isinstance(timestamp_type, np.ndarray)
            else [timestamp_type] * n
        )
        positions: list[int] = (
            batch_position.tolist() if isinstance(batch_position, np.ndarray) else [batch_position] * n
        )
        headers = self.headers
        return [
            Record(
                int(self.offsets[i]),
                int(self.timestamps[i]),
                self.key(i),
                self.value(i),
                headers[i] if headers is not None else (),
                types[i],
                positions[i],
            )
            for i in range(n)
        ]

    @property
    def first_offset(self) -> int:
        return int(self.offsets[0])

    @property
    def last_offset(self) -> int:
        return int(self.offsets[-1])

    def slice(self, start: int, end: int) -> RecordColumns:
        """Records ``start`` to ``end`` (exclusive), over the same buffer: no bytes are copied."""
        return RecordColumns(
            self.buffer,
            self.offsets[start:end],
            self.timestamps[start:end],
            self.key_pos[start:end],
            self.key_len[start:end],
            self.value_pos[start:end],
            self.value_len[start:end],
            None if self.headers is None else self.headers[start:end],
        )

    def subset(self, keep: np.ndarray) -> RecordColumns:
        """The records ``keep`` (a boolean mask) marks, over the same buffer; headers None if none is left with any."""
        headers = None
        if self.headers is not None:
            headers = [h for h, k in zip(self.headers, keep.tolist()) if k]
            headers = headers if any(headers) else None
        return RecordColumns(
            self.buffer,
            self.offsets[keep],
            self.timestamps[keep],
            self.key_pos[keep],
            self.key_len[keep],
            self.value_pos[keep],
            self.value_len[keep],
            headers,
        )

    @classmethod
    def from_records(cls, records: list[Record]) -> RecordColumns:
        """Columns over a fresh buffer holding the records' keys and values back to back."""
        buf = bytearray()
        n = len(records)
        key_pos = np.zeros(n, np.int64)
        key_len = np.full(n, -1, np.int64)
        value_pos = np.zeros(n, np.int64)
        value_len = np.full(n, -1, np.int64)
        for i, r in enumerate(records):
            if r.key is not None:
                key_pos[i] = len(buf)
                key_len[i] = len(r.key)
                buf += r.key
            if r.value is not None:
                value_pos[i] = len(buf)
                value_len[i] = len(r.value)
                buf += r.value
        has_headers = any(r.headers for r in records)
        return cls(
            buffer=bytes(buf),
            offsets=np.fromiter((r.offset for r in records), np.int64, n),
            timestamps=np.fromiter((r.timestamp for r in records), np.int64, n),
            key_pos=key_pos,
            key_len=key_len,
            value_pos=value_pos,
            value_len=value_len,
            headers=[tuple(r.headers) for r in records] if has_headers else None,
        )


@dataclass(slots=True)
class BatchColumns:
    """Per log batch, what Kafka's ``RecordBatch`` interface gives ``LogSegment.recover`` of any batch, as columns:
    a legacy message (compressed or not) is a batch of its own, like a v2 batch. Positions are relative to the
    buffer the batches were read from; a legacy batch's max timestamp is its own (-1 for magic 0), its last offset
    its offset field."""

    positions: np.ndarray
    sizes: np.ndarray  # including the 12-byte log overhead
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    magics: np.ndarray

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def one(cls, position: int, size: int, last_offset: int, max_timestamp: int, magic: int) -> BatchColumns:
        row = np.array([position, size, last_offset, max_timestamp, magic], np.int64)
        return cls(row[0:1], row[1:2], row[2:3], row[3:4], row[4:5])

    @classmethod
    def concat(cls, parts: list[BatchColumns]) -> BatchColumns:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty, empty, empty, empty)
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in _BATCH_FIELDS))


_BATCH_FIELDS = ("positions", "sizes", "last_offsets", "max_timestamps", "magics")
