"""Magic 0 and magic 1 messages (Kafka 0.8 to 0.10), the message-set format KIP-31 and KIP-32 changed.

::

    MessageSet (a log segment of legacy data is one)        all integers big-endian
      [offset => int64, message_size => int32, message] ...

    Message (v0)                        Message (v1, KIP-32)
      crc        => uint32  CRC-32        crc        => uint32  CRC-32 (IEEE) over magic..end
      magic      => int8   = 0            magic      => int8   = 1
      attributes => int8                  attributes => int8
                                          timestamp  => int64
      key        => int32 length, bytes   key        => int32 length (-1 = null), bytes
      value      => int32 length, bytes   value      => int32 length (-1 = null: a tombstone), bytes

    attributes: bits 0-2 compression codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp type
                (v1 only: 0 CreateTime, 1 LogAppendTime), bits 4-7 unused

A compressed message ("wrapper") has a null key and, as value, the compressed bytes of an inner message set of
uncompressed messages. Its offset field is the absolute offset of the *last* inner message. Inner offsets are
absolute in v0 and relative in v1 (KIP-31): absolute = wrapper offset - last inner relative + inner relative, and a
wrapper offset of 0 means base 0 (a librdkafka produce quirk Kafka honours). A v1 wrapper's timestamp is the max
inner timestamp (CreateTime) or the broker's append time (LogAppendTime bit set), and under LogAppendTime every
inner record reports the wrapper's timestamp. Magic 0 has no timestamps: Kafka reports -1.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import accel, codecs
from migrate.format.buffers import as_u8, gather_be, int64_column
from migrate.format.checksums import crc32, crc32_ranges
from migrate.format.records import NO_TIMESTAMP, BatchColumns, Compression, Record, RecordColumns, TimestampType

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class LegacyVisitor(Protocol[T_co]):
    """The legacy part of ``migrate.format.entries.EntryVisitor``: what a caller does with each legacy kind."""

    def legacy_run(self, run: LegacyRun) -> T_co: ...

    def legacy_wrapper(self, wrapper: LegacyWrapper) -> T_co: ...


LOG_OVERHEAD = 12
CRC_OFFSET = 12  # within an entry: after offset and size
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 17
TIMESTAMP_OFFSET = 18
KEY_LENGTH_OFFSET = {0: 18, 1: 26}
RECORD_OVERHEAD = {0: 14, 1: 22}  # crc..value lengths, without key and value bytes
MIN_MESSAGE_SIZE = 14
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08

HEADER_V0 = struct.Struct(">qiIbb")
HEADER_V1 = struct.Struct(">qiIbbq")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def timestamp_type_of(magic: int, attributes: int) -> TimestampType:
    if magic == 0:
        return TimestampType.NO_TIMESTAMP_TYPE
    return TimestampType.LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_BIT else TimestampType.CREATE_TIME


class _LegacyEntry:
    """What both legacy entry kinds answer alike: first and last offset (their records' own, absolute, checked on
    decode), and no transactions, control records or KIP-87 flag, which came with v2."""

    __slots__ = ()
    records: RecordColumns
    is_transactional = False
    is_control = False

    @property
    def first_offset(self) -> int:
        return self.records.first_offset

    @property
    def last_offset(self) -> int:
        return self.records.last_offset

    def tombstones(self) -> np.ndarray:
        """Per record, whether it is a delete: a null value."""
        return self.records.value_len < 0


@dataclass(slots=True)
class LegacyRun(_LegacyEntry):
    """Consecutive uncompressed magic 0/1 messages: each one is its own log entry and holds one record."""

    positions: np.ndarray  # entry start, relative to the buffer
    sizes: np.ndarray  # entry size including the 12-byte log overhead
    magics: np.ndarray
    attributes: np.ndarray
    crcs: np.ndarray
    records: RecordColumns  # over the buffer the run was read from

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def entry_count(self) -> int:
        return len(self.positions)

    @property
    def first_position(self) -> int:
        return int(self.positions[0])

    compression = Compression.NONE

    def batch_columns(self) -> BatchColumns:
        """Each message is a batch of its own: its offset, and its timestamp as max (-1 for magic 0)."""
        return BatchColumns(self.positions, self.sizes, self.records.offsets, self.records.timestamps, self.magics)

    def timestamp_types(self) -> np.ndarray:
        """Per record (here: per entry): -1 (v0), 0 CreateTime, 1 LogAppendTime."""
        v1 = self.magics == 1
        return np.where(v1, ((self.attributes & TIMESTAMP_TYPE_BIT) > 0).astype(np.int64), -1)

    def rows(self) -> list[Record]:
        """Every record, row-wise, each at its own message's position (slow path: tests, dump, small data)."""
        return self.records.rows(self.timestamp_types(), self.positions)

    def accept(self, visitor: LegacyVisitor[T]) -> T:
        return visitor.legacy_run(self)

    def record_position(self, index: int) -> int:
        """Where record ``index`` starts: each message is its own entry."""
        return int(self.positions[index])

    def check_offsets_within(self) -> None:
        """Many entries in one: their offsets must increase from message to message, checked column-wise."""
        offs = self.records.offsets
        if len(offs) > 1 and (back := offs[1:] <= offs[:-1]).any():
            j = int(np.argmax(back)) + 1
            raise CorruptRecordError(
                f"offset {int(offs[j])} does not increase on offset {int(offs[j - 1])}",
                position=int(self.positions[j]),
                offset=int(offs[j]),
            )

    def effective_timestamps(self, v0_timestamp: int) -> np.ndarray:
        """Each record's timestamp as Kafka reads it, but ``v0_timestamp`` for a v0 message's (which has none)."""
        return np.where(self.magics == 0, v0_timestamp, self.records.timestamps)

    def retain(self, keep: np.ndarray) -> LegacyRun:
        """The run of only the messages ``keep`` marks."""
        return LegacyRun(
            self.positions[keep],
            self.sizes[keep],
            self.magics[keep],
            self.attributes[keep],
            self.crcs[keep],
            self.records.subset(keep),
        )


@dataclass(slots=True)
class LegacyWrapper(_LegacyEntry):
    """One compressed magic 0/1 message and the records of its inner message set (absolute offsets)."""

    position: int
    size: int
    magic: int
    attributes: int
    crc: int
    offset: int  # the wrapper's offset field: the last inner offset
    timestamp: int  # the wrapper's own timestamp (-1 for v0)
    records: RecordColumns  # over the decompressed inner message set

    entry_count = 1

    @property
    def first_position(self) -> int:
        return self.position

    def batch_columns(self) -> BatchColumns:
        return BatchColumns.one(self.position, self.size, self.offset, self.timestamp, self.magic)

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return timestamp_type_of(self.magic, self.attributes)

    def timestamp_types(self) -> np.ndarray:
        """Per record: the wrapper's type (-1 for v0)."""
        return np.full(len(self.records), int(self.timestamp_type), np.int64)

    def rows(self) -> list[Record]:
        """Every record, row-wise, at the wrapper's position (slow path: tests, dump, small data)."""
        return self.records.rows(self.timestamp_type, self.position)

    def accept(self, visitor: LegacyVisitor[T]) -> T:
        return visitor.legacy_wrapper(self)

    def record_position(self, index: int) -> int:
        """Where record ``index`` starts, as an entry: the wrapper's own position."""
        return self.position

    def check_offsets_within(self) -> None:
        """Nothing left to check: ``decode_wrapper`` refused inner offsets that do not increase."""

    def effective_timestamps(self, v0_timestamp: int) -> np.ndarray:
        """Each record's timestamp as Kafka reads it: ``v0_timestamp`` for all of a v0 wrapper's (which have none),
        the wrapper's own under LogAppendTime."""
        if self.magic == 0:
            return np.full(len(self.records), v0_timestamp, np.int64)
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return np.full(len(self.records), self.timestamp, np.int64)
        return self.records.timestamps

    def retain(self, keep: np.ndarray) -> LegacyWrapper:
        """The wrapper with only the records ``keep`` marks."""
        return dataclasses.replace(self, records=self.records.subset(keep))


def decode_run(buf: bytes | bytearray | memoryview, positions: np.ndarray, sizes: np.ndarray) -> LegacyRun:
    """Decode and CRC-check a run of uncompressed legacy messages at ``positions``: in one pass of the C
    accelerator when it is active and every message is sound, else (and to raise the precise error) with
    ``decode_run_reference``."""
    return _decode_run(buf, positions, sizes)


def _decode_run_compiled(buf: bytes | bytearray | memoryview, positions: np.ndarray, sizes: np.ndarray) -> LegacyRun:
    if len(positions):
        positions, sizes = int64_column(positions), int64_column(sizes)
        status, *raw = _legacy_run(buf, positions, sizes)
        if status.count(0) == len(status):
            offsets, crcs, timestamps, key_pos, key_len, value_pos, value_len, magics, attributes = (
                np.frombuffer(c, np.int64) for c in raw
            )
            records = RecordColumns(buf, offsets, timestamps, key_pos, key_len, value_pos, value_len)
            return LegacyRun(positions, sizes, magics, attributes, crcs, records)
    return decode_run_reference(buf, positions, sizes)


def decode_run_reference(buf: bytes | bytearray | memoryview, positions: np.ndarray, sizes: np.ndarray) -> LegacyRun:
    """The reference of the accelerator's ``legacy_run`` (vectorized numpy): the same columns for sound messages,
    and the precise error for the first problem. A compressed message, or one of magic above 1, is a caller's bug
    (ValueError)."""
    u8 = as_u8(buf)
    magics = u8[positions + MAGIC_OFFSET].astype(np.int64)
    attributes = u8[positions + ATTRIBUTES_OFFSET].astype(np.int64)
    if (magics > 1).any():
        raise ValueError("decode_run was given a message of magic above 1")  # a caller bug, never bad input
    ends = positions + sizes
    is_v1 = magics == 1
    minimum = np.where(is_v1, RECORD_OVERHEAD[1], RECORD_OVERHEAD[0]) + LOG_OVERHEAD
    short = sizes < minimum
    if short.any():
        i = int(np.argmax(short))
        raise CorruptRecordError(
            f"magic {magics[i]} message of {sizes[i] - LOG_OVERHEAD} bytes is shorter than its fixed fields",
            position=int(positions[i]),
        )
    offsets = gather_be(u8, positions, 8)
    stored_crcs = gather_be(u8, positions + CRC_OFFSET, 4, signed=False)
    computed = crc32_ranges(buf, positions + MAGIC_OFFSET, ends)
    bad = computed != stored_crcs
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptRecordError(
            f"CRC-32 mismatch in magic {magics[i]} message: stored {stored_crcs[i]:#010x}, "
            f"computed {computed[i]:#010x}",
            position=int(positions[i]),
            offset=int(offsets[i]),
        )
    timestamps = np.full(len(positions), NO_TIMESTAMP, np.int64)
    if is_v1.any():
        timestamps[is_v1] = gather_be(u8, positions[is_v1] + TIMESTAMP_OFFSET, 8)
    key_len_at = positions + np.where(is_v1, KEY_LENGTH_OFFSET[1], KEY_LENGTH_OFFSET[0])
    key_len = gather_be(u8, key_len_at, 4)
    key_pos = key_len_at + 4
    value_len_at = key_pos + np.maximum(key_len, 0)
    bad_key = (key_len < -1) | (value_len_at + 4 > ends)
    if bad_key.any():
        i = int(np.argmax(bad_key))
        raise CorruptRecordError(
            f"key length {key_len[i]} does not fit in its message", position=int(positions[i]), offset=int(offsets[i])
        )
    value_len = gather_be(u8, value_len_at, 4)
    value_pos = value_len_at + 4
    bad_value = (value_len < -1) | (value_pos + np.maximum(value_len, 0) != ends)
    if bad_value.any():
        i = int(np.argmax(bad_value))
        raise CorruptRecordError(
            f"value length {value_len[i]} does not match its message size {sizes[i] - LOG_OVERHEAD}",
            position=int(positions[i]),
            offset=int(offsets[i]),
        )
    compressed = (attributes & CODEC_MASK) != 0
    if compressed.any():
        raise ValueError("decode_run was given a compressed message")  # a caller bug, never bad input
    return LegacyRun(
        positions=positions,
        sizes=sizes,
        magics=magics,
        attributes=attributes,
        crcs=stored_crcs,
        records=RecordColumns(
            buffer=buf,
            offsets=offsets,
            timestamps=timestamps,
            key_pos=key_pos,
            key_len=key_len,
            value_pos=value_pos,
            value_len=value_len,
        ),
    )


_legacy_run = accel.compiled("legacy_run")
_decode_run = accel.pick(_decode_run_compiled, decode_run_reference)


def decode_wrapper(buf: bytes | bytearray | memoryview, position: int, size: int) -> LegacyWrapper:
    """Decode and CRC-check one compressed legacy message and its inner message set."""
    magic = buf[position + MAGIC_OFFSET]
    if magic == 0:
        offset, _, crc, magic, attributes = HEADER_V0.unpack_from(buf, position)
        timestamp = NO_TIMESTAMP
    else:
        offset, _, crc, magic, attributes, timestamp = HEADER_V1.unpack_from(buf, position)
    attributes &= 0xFF
    end = position + size
    mv = memoryview(buf)
    computed = crc32(mv[position + MAGIC_OFFSET : end])
    if computed != crc:
        raise CorruptRecordError(
            f"CRC-32 mismatch in magic {magic} compressed message: stored {crc:#010x}, computed {computed:#010x}",
            position=position,
            offset=offset,
        )
    if size < RECORD_OVERHEAD[magic] + LOG_OVERHEAD:
        raise CorruptRecordError(
            f"magic {magic} message of {size - LOG_OVERHEAD} bytes is shorter than its fixed fields",
            position=position,
            offset=offset,
        )
    key_len_at = position + KEY_LENGTH_OFFSET[magic]
    (key_len,) = _INT32.unpack_from(buf, key_len_at)
    value_len_at = key_len_at + 4 + max(key_len, 0)
    if key_len < -1 or value_len_at + 4 > end:
        raise CorruptRecordError(f"key length {key_len} does not fit in its message", position=position, offset=offset)
    (value_len,) = _INT32.unpack_from(buf, value_len_at)
    if value_len < 0 or value_len_at + 4 + value_len != end:
        raise CorruptRecordError(
            f"compressed message value length {value_len} does not match its size {size - LOG_OVERHEAD}",
            position=position,
            offset=offset,
        )
    codec = attributes & CODEC_MASK
    if codec not in (1, 2, 3):
        raise UnsupportedFormatError(
            f"unknown compression codec {codec} in magic {magic} message", position=position, offset=offset
        )
    try:
        inner = codecs.decompress(codec, mv[value_len_at + 4 : end], magic)
        records = decode_inner_set(inner, magic, attributes, offset, timestamp)
    except CorruptRecordError as exc:
        raise CorruptRecordError(
            f"compressed message: {exc.reason}", position=position, offset=offset, hint=exc.hint
        ) from exc
    return LegacyWrapper(position, size, magic, attributes, crc, offset, timestamp, records)


def decode_inner_set(
    inner: bytes, wrapper_magic: int, wrapper_attributes: int, wrapper_offset: int, wrapper_timestamp: int
) -> RecordColumns:
    positions = []
    sizes = []
    pos = 0
    n = len(inner)
    while pos < n:
        if pos + LOG_OVERHEAD > n:
            raise CorruptRecordError(f"inner message set ends inside an entry header at inner byte {pos}")
        (size,) = _INT32.unpack_from(inner, pos + 8)
        if size < MIN_MESSAGE_SIZE or pos + LOG_OVERHEAD + size > n:
            raise CorruptRecordError(f"inner message at inner byte {pos} has bad size {size}")
        positions.append(pos)
        sizes.append(size + LOG_OVERHEAD)
        pos += LOG_OVERHEAD + size
    if not positions:
        raise CorruptRecordError("compressed message holds no inner messages")
    p = np.array(positions, np.int64)
    s = np.array(sizes, np.int64)
    u8 = as_u8(inner)
    inner_magic = u8[p + MAGIC_OFFSET]
    if (inner_magic > 1).any():
        raise CorruptRecordError("inner message with magic above 1 inside a legacy compressed message")
    if (u8[p + ATTRIBUTES_OFFSET] & CODEC_MASK).any():
        raise CorruptRecordError("nested compression: a compressed message inside a compressed message")
    run = decode_run(inner, p, s)
    cols = run.records
    if wrapper_magic > 0:
        last_relative = int(cols.offsets[-1])
        if wrapper_offset < last_relative:
            raise CorruptRecordError(
                f"wrapper offset {wrapper_offset} is below the last inner relative offset {last_relative}"
            )
        base = 0 if wrapper_offset == 0 else wrapper_offset - last_relative
        if base >= 2**63:  # a negative last relative offset: damage, and beyond int64
            raise CorruptRecordError(f"inner relative offset {last_relative} puts the base offset beyond int64")
        cols.offsets = cols.offsets + base
        if wrapper_attributes & TIMESTAMP_TYPE_BIT:
            # LogAppendTime: every inner v1 record reports the wrapper's timestamp (v0 inner records stay -1)
            cols.timestamps = np.where(run.magics == 1, wrapper_timestamp, NO_TIMESTAMP)
    if len(cols.offsets) > 1 and (np.diff(cols.offsets) <= 0).any():
        raise CorruptRecordError("inner offsets do not strictly increase")
    librdkafka_quirk = wrapper_magic > 0 and wrapper_offset == 0
    if int(cols.offsets[-1]) != wrapper_offset and not librdkafka_quirk:
        raise CorruptRecordError(
            f"wrapper offset {wrapper_offset} is not the last inner offset {int(cols.offsets[-1])}"
        )
    return cols


# --- writers -----------------------------------------------------------------------------------------------


def encode_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One legacy log entry: offset, size, and the message with its CRC-32."""
    if magic not in (0, 1):
        raise ValueError(f"legacy messages have magic 0 or 1, not {magic}")
    body = bytearray()
    body.append(magic)
    body.append(attributes & 0xFF)
    if magic == 1:
        body += _INT64.pack(timestamp)
    for field in (key, value):
        if field is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field))
            body += field
    crc = crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def encode_messages(
    records: list[Record], magic: int, timestamp_type: TimestampType = TimestampType.CREATE_TIME
) -> bytes:
    """Uncompressed legacy entries, one per record."""
    attributes = TIMESTAMP_TYPE_BIT if (magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME) else 0
    return b"".join(
        encode_message(r.offset, magic, attributes, r.timestamp, r.key, r.value) for r in _checked(records, magic)
    )


def encode_wrapper(
    records: list[Record],
    magic: int,
    compression: Compression,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """One compressed legacy entry holding ``records`` (KIP-31 relative inner offsets for magic 1)."""
    if compression == Compression.NONE:
        raise ValueError("a wrapper needs a compression codec")
    if compression == Compression.ZSTD:
        raise UnsupportedFormatError(f"zstd compression is not supported for magic {magic} (v2 only)")
    records = _checked(records, magic)
    if not records:
        raise ValueError("a compressed message needs at least one record")
    base = records[0].offset
    append_time: int | None = None  # every message's timestamp under LogAppendTime
    if magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime needs log_append_time")
        append_time = log_append_time
    inner_attributes = TIMESTAMP_TYPE_BIT if append_time is not None else 0
    inner = b"".join(
        encode_message(
            r.offset - base if magic == 1 else r.offset,
            magic,
            inner_attributes,
            r.timestamp if append_time is None else append_time,
            r.key,
            r.value,
        )
        for r in records
    )
    if magic == 0:
        wrapper_ts = NO_TIMESTAMP
    elif append_time is not None:
        wrapper_ts = append_time
    else:
        wrapper_ts = max(r.timestamp for r in records)
    value = codecs.compress(compression, inner, magic)
    return encode_message(records[-1].offset, magic, int(compression) | inner_attributes, wrapper_ts, None, value)


def _checked(records: list[Record], magic: int) -> list[Record]:
    for r in records:
        if r.headers:
            raise UnsupportedFormatError(
                f"record at offset {r.offset} has headers, which magic {magic} cannot hold (v2 only)"
            )
    return records
