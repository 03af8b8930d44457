"""Magic 2 record batches (Kafka 0.11+, KIP-98), the format every converted segment is written in.

::

    RecordBatch                                   byte   all integers big-endian
      baseOffset           => int64                  0
      batchLength          => int32                  8   bytes after this field (total size - 12)
      partitionLeaderEpoch => int32                 12   not covered by the CRC
      magic                => int8 = 2              16
      crc                  => uint32                17   CRC-32C (Castagnoli) over attributes..end
      attributes           => int16                 21   bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
                                                         3 timestamp type (1 = LogAppendTime), 4 transactional,
                                                         5 control, 6 delete horizon set
      lastOffsetDelta      => int32                 23
      baseTimestamp        => int64                 27   first record's timestamp (-1 allowed)
      maxTimestamp         => int64                 35   max record timestamp, or the append time (LogAppendTime)
      producerId           => int64                 43   -1 if none
      producerEpoch        => int16                 51
      baseSequence         => int32                 53
      recordsCount         => int32                 57
      records              => [Record]              61   one compressed stream when the codec is not none

    Record                                               varint = zig-zag base-128 (protobuf sint32/sint64)
      length         => varint    bytes after this field
      attributes     => int8      unused by Kafka (KIP-87 proposes bit 5 as an explicit tombstone flag)
      timestampDelta => varlong   timestamp - baseTimestamp
      offsetDelta    => varint    offset - baseOffset (gaps allowed)
      key            => varint length (-1 = null), bytes
      value          => varint length (-1 = null: a tombstone), bytes
      headers        => varint count, then [varint key length, utf-8 key, varint value length (-1 = null), value]

Under LogAppendTime every record reports the batch's maxTimestamp. A control batch holds one control record
(key = version int16, type int16: 0 abort, 1 commit).
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from migrate.errors import CorruptRecordError, UnencodableRecordError, UnsupportedFormatError
from migrate.format import accel, codecs
from migrate.format.buffers import check_pieces, int64_column
from migrate.format.checksums import crc32c
from migrate.format.records import NO_TIMESTAMP, BatchColumns, Compression, Record, RecordColumns, TimestampType
from migrate.format.varint import decode_varint, encode_varint, varint_sizes

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class V2BatchVisitor(Protocol[T_co]):
    """The v2 part of ``migrate.format.entries.EntryVisitor``: what a caller does with a v2 batch."""

    def v2_batch(self, batch: V2Batch) -> T_co: ...


MAGIC = 2
RECORD_BATCH_OVERHEAD = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40
KIP87_TOMBSTONE_BIT = 0x20  # in the *record* attributes byte
NO_PARTITION_LEADER_EPOCH = -1

HEADER = struct.Struct(">qiibIhiqqqhii")
_UNCOVERED = struct.Struct(">qiibI")  # baseOffset .. crc: the 21 bytes the CRC does not cover
_COVERED = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
assert HEADER.size == RECORD_BATCH_OVERHEAD


@dataclass(slots=True)
class V2Batch:
    position: int
    size: int  # including the 12-byte log overhead
    base_offset: int
    partition_leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    records: RecordColumns | None = None
    # which of the records as read compaction keeps, once it dropped some (``retain``): such a batch is rebuilt
    # (``rebuild``), never copied
    kept: np.ndarray | None = None

    entry_count = 1

    @property
    def first_position(self) -> int:
        return self.position

    def batch_columns(self) -> BatchColumns:
        return BatchColumns.one(self.position, self.size, self.last_offset, self.max_timestamp, MAGIC)

    @property
    def first_offset(self) -> int:
        """The first record's offset: a compacted batch's base offset may lie below it."""
        if self.records is not None and len(self.records):
            return int(self.records.offsets[0])
        return self.base_offset

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    def timestamp_types(self) -> np.ndarray:
        """Per record: the batch's type."""
        return np.full(len(self._decoded()), int(self.timestamp_type), np.int64)

    def rows(self) -> list[Record]:
        """Every record, row-wise, at the batch's position (slow path: tests, dump, small data)."""
        return self._decoded().rows(self.timestamp_type, self.position)

    def _decoded(self) -> RecordColumns:
        if self.records is None:
            raise ValueError("this batch was read with deep=False: its records were not decoded")
        return self.records

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None

    def accept(self, visitor: V2BatchVisitor[T]) -> T:
        return visitor.v2_batch(self)

    def record_position(self, index: int) -> int:
        """Where record ``index`` starts, as an entry: the batch's own position."""
        return self.position

    def check_offsets_within(self) -> None:
        """Nothing left to check: ``decode_records`` refused offsets that do not increase."""

    def effective_timestamps(self, v0_timestamp: int) -> np.ndarray:
        """Each record's timestamp as Kafka reads it (v2 records all have one; ``v0_timestamp`` is for v0's)."""
        return self._decoded().timestamps

    def record_attributes(self) -> np.ndarray:
        """Each record's attributes byte (KIP-87 puts the delete flag in bit 5): the decoder skips it, so walk the
        records' length prefixes once more (all ``records_count`` of them, then the ones ``kept``)."""
        body = memoryview(self._decoded().buffer).cast("B")
        out = np.zeros(self.records_count, np.uint8)
        limit = len(body)
        pos = 0
        for i in range(self.records_count):
            length, pos = decode_varint(body, pos, limit, 5)
            out[i] = body[pos]
            pos += length
        return out if self.kept is None else out[self.kept]

    def tombstones(self) -> np.ndarray:
        """Per record, whether it is a delete: a null value, or KIP-87's flag in its attributes."""
        cols = self._decoded()
        delete = cols.value_len < 0
        if len(cols):
            delete = delete | ((self.record_attributes() & KIP87_TOMBSTONE_BIT) != 0)
        return delete

    def retain(self, keep: np.ndarray) -> V2Batch:
        """The batch with only the records ``keep`` marks: to be rebuilt (``rebuild``), as Kafka's cleaner does."""
        kept = keep
        if self.kept is not None:
            kept = self.kept.copy()
            kept[np.flatnonzero(self.kept)[~keep]] = False
        return dataclasses.replace(self, records=self._decoded().subset(keep), kept=kept)

    def rebuild(self) -> tuple[bytes, RecordColumns, int]:
        """The batch holding only its ``records`` (those ``retain`` kept), as Kafka's cleaner rebuilds one that lost
        records (``MemoryRecords.buildRetainedRecordsInto``): the same base offset and last offset delta (the offset
        range and the producer's last sequence stay), codec, timestamp type, producer fields, flags and leader epoch;
        base and max timestamp from the kept records. Unlike the cleaner it keeps each record's attributes, so a
        KIP-87 delete flag survives. Returns the bytes, the records with the timestamps they read back with, and the
        batch's max timestamp."""
        kept = self._decoded()
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            timestamps = np.full(len(kept), self.max_timestamp, np.int64)
            max_ts = self.max_timestamp
        else:
            timestamps = kept.timestamps
            max_ts = max(int(timestamps.max()), NO_TIMESTAMP)
        carried = CarriedHeader(
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.is_transactional,
            self.is_control,
            self.delete_horizon_ms,
        )
        data = _assemble(
            kept,
            timestamps,
            base_offset=self.base_offset,
            last_offset_delta=self.last_offset_delta,
            attributes=self.attributes,
            max_ts=max_ts,
            carried=carried,
            partition_leader_epoch=self.partition_leader_epoch,
            record_attributes=self.record_attributes(),
        )
        return data, dataclasses.replace(kept, timestamps=timestamps), max_ts


def decode_batch(buf: bytes | bytearray | memoryview, position: int, size: int, deep: bool = True) -> V2Batch:
    """Decode and CRC-check one v2 batch; with ``deep``, decompress and decode its records too."""
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch of {size} bytes is smaller than the {RECORD_BATCH_OVERHEAD}-byte batch header",
            position=position,
        )
    (base_offset, _, ple, _, crc, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq, count) = (
        HEADER.unpack_from(buf, position)
    )
    mv = memoryview(buf)
    end = position + size
    computed = crc32c(mv[position + ATTRIBUTES_OFFSET : end])
    if computed != crc:
        raise CorruptRecordError(
            f"CRC-32C mismatch in record batch: stored {crc:#010x}, computed {computed:#010x}",
            position=position,
            offset=base_offset,
        )
    batch = V2Batch(
        position,
        size,
        base_offset,
        ple,
        crc,
        attributes & 0xFFFF,
        last_delta,
        base_ts,
        max_ts,
        pid,
        epoch,
        base_seq,
        count,
    )
    if count < 0 or last_delta < 0:
        raise CorruptRecordError(
            f"record batch with record count {count} and last offset delta {last_delta}",
            position=position,
            offset=base_offset,
        )
    if deep:
        codec = attributes & CODEC_MASK
        body = mv[position + RECORD_BATCH_OVERHEAD : end]
        try:
            if codec:
                if codec > 4:
                    raise UnsupportedFormatError(f"unknown compression codec {codec} in record batch")
                body = memoryview(codecs.decompress(codec, body, MAGIC))
            batch.records = decode_records(body, batch)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"record batch: {exc.reason}", position=position, offset=base_offset, hint=exc.hint
            ) from exc
    return batch


def decode_records(body: memoryview, batch: V2Batch) -> RecordColumns:
    """Decode ``batch.records_count`` records from an uncompressed records section."""
    n = batch.records_count
    if n > len(body) // 7:  # the smallest record takes 7 bytes; never allocate for a count the bytes cannot hold
        raise CorruptRecordError(f"record count {n} does not fit in {len(body)} bytes of records")
    offsets = np.empty(n, np.int64)
    timestamps = np.empty(n, np.int64)
    key_pos = np.zeros(n, np.int64)
    key_len = np.empty(n, np.int64)
    value_pos = np.zeros(n, np.int64)
    value_len = np.empty(n, np.int64)
    headers: list[tuple[tuple[str, bytes | None], ...]] = []
    any_headers = False
    log_append = batch.attributes & TIMESTAMP_TYPE_BIT
    limit = len(body)
    pos = 0
    for i in range(n):
        length, pos = decode_varint(body, pos, limit, 5)
        end = pos + length
        if length < 6 or end > limit:
            raise CorruptRecordError(f"record {i} of the batch has bad length {length}")
        pos += 1  # record attributes: unused
        ts_delta, pos = decode_varint(body, pos, end, 10)
        offset_delta, pos = decode_varint(body, pos, end, 5)
        offset = batch.base_offset + offset_delta
        if not -(2**63) <= offset < 2**63:
            raise CorruptRecordError(f"record {i} offset {offset} is beyond the int64 range")
        offsets[i] = offset
        # Kafka adds in Java long arithmetic: wrap to int64 as it does (a timestamp delta may have wrapped on write)
        timestamps[i] = batch.max_timestamp if log_append else (batch.base_timestamp + ts_delta + 2**63) % 2**64 - 2**63
        klen, pos = decode_varint(body, pos, end, 5)
        if klen < -1 or pos + max(klen, 0) > end:
            raise CorruptRecordError(f"record {i} key length {klen} does not fit")
        key_len[i] = klen
        key_pos[i] = pos
        pos += max(klen, 0)
        vlen, pos = decode_varint(body, pos, end, 5)
        if vlen < -1 or pos + max(vlen, 0) > end:
            raise CorruptRecordError(f"record {i} value length {vlen} does not fit")
        value_len[i] = vlen
        value_pos[i] = pos
        pos += max(vlen, 0)
        hcount, pos = decode_varint(body, pos, end, 5)
        if hcount < 0:
            raise CorruptRecordError(f"record {i} has a negative header count")
        hs = []
        for _ in range(hcount):
            hklen, pos = decode_varint(body, pos, end, 5)
            if hklen < 0 or pos + hklen > end:
                raise CorruptRecordError(f"record {i} header key length {hklen} does not fit")
            try:
                hkey = bytes(body[pos : pos + hklen]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptRecordError(f"record {i} header key is not UTF-8") from exc
            pos += hklen
            hvlen, pos = decode_varint(body, pos, end, 5)
            if hvlen < -1 or pos + max(hvlen, 0) > end:
                raise CorruptRecordError(f"record {i} header value length {hvlen} does not fit")
            hval = None if hvlen < 0 else bytes(body[pos : pos + hvlen])
            pos += max(hvlen, 0)
            hs.append((hkey, hval))
        if pos != end:
            raise CorruptRecordError(f"record {i} has {end - pos} unexplained bytes after its headers")
        headers.append(tuple(hs))
        any_headers = any_headers or bool(hs)
    if pos != limit:
        raise CorruptRecordError(f"{limit - pos} bytes after the batch's {n} records")
    if n and (offsets[-1] > batch.last_offset or offsets[0] < batch.base_offset):
        raise CorruptRecordError(
            f"record offsets {offsets[0]}..{offsets[-1]} outside the batch's {batch.base_offset}..{batch.last_offset}"
        )
    if n > 1 and (np.diff(offsets) <= 0).any():
        raise CorruptRecordError("record offsets do not strictly increase")
    return RecordColumns(
        buffer=body,
        offsets=offsets,
        timestamps=timestamps,
        key_pos=key_pos,
        key_len=key_len,
        value_pos=value_pos,
        value_len=value_len,
        headers=headers if any_headers else None,
    )


# --- writers -----------------------------------------------------------------------------------------------

# Zig-zag varints of -1 (null) .. 8191 looked up, not computed: record lengths, key and value lengths and deltas
# are almost always in that range, and the writers below make four or five per record.
_VARINT_END = 1 << 13
_VARINTS = tuple(encode_varint(v) for v in range(-1, _VARINT_END))
_NO_HEADERS = b"\x00"


def _varint(value: int) -> bytes:
    return _VARINTS[value + 1] if -1 <= value < _VARINT_END else encode_varint(value)


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | memoryview | None,
    value: bytes | memoryview | None,
    headers: tuple[tuple[str, bytes | None], ...],
    attributes: int,
) -> bytes:
    """One record, its length varint included: the only v2 record writer (``encode_batch`` and the reference of
    the single-record batches both use it)."""
    # %b takes any buffer, a memoryview key or value included (PEP 461); mypy's format check accepts only bytes
    body = b"%c%b%b%b%b%b%b%b" % (  # type: ignore[str-format]
        attributes,
        _varint(timestamp_delta),
        _varint(offset_delta),
        _varint(-1 if key is None else len(key)),
        key or b"",
        _varint(-1 if value is None else len(value)),
        value or b"",
        _encode_headers(headers) if headers else _NO_HEADERS,
    )
    return _varint(len(body)) + body


def _encode_headers(headers: tuple[tuple[str, bytes | None], ...]) -> bytes:
    parts = [_varint(len(headers))]
    for hkey, hval in headers:
        hk = hkey.encode("utf-8")
        parts += (_varint(len(hk)), hk)
        parts += (_varint(-1),) if hval is None else (_varint(len(hval)), hval)
    return b"".join(parts)


def new_record_attributes(cols: RecordColumns, tombstone_flag: bool) -> np.ndarray:
    """The attributes byte of each record a writer here creates: 0, or with ``tombstone_flag`` KIP-87's delete flag
    on a null value."""
    if tombstone_flag:
        return np.where(cols.value_len < 0, KIP87_TOMBSTONE_BIT, 0).astype(np.uint8)
    return np.zeros(len(cols), np.uint8)


def single_record_batches(
    buffer: bytes | bytearray | memoryview,
    offsets: np.ndarray,
    timestamps: np.ndarray,
    timestamp_types: np.ndarray,
    key_pos: np.ndarray,
    key_len: np.ndarray,
    value_pos: np.ndarray,
    value_len: np.ndarray,
    record_attributes: np.ndarray,
    partition_leader_epoch: int,
) -> tuple[bytes, bytes]:
    """The reference of the accelerator's ``single_record_batches``: same arguments, same bytes, same refusals.

    One uncompressed v2 batch per record: the batches, and each batch's size as native int64 bytes. The arrays are
    int64 except ``record_attributes`` (uint8); a key or value length of -1 is null; a timestamp type of 1 is
    LogAppendTime, anything else CreateTime. Raises ValueError for a key or value outside ``buffer`` or arrays of
    different lengths, OverflowError for an epoch or a batch length beyond int32.
    """
    # refusals in the accelerator's order, so both raise the same error for the same arguments
    if not -(2**31) <= partition_leader_epoch < 2**31:
        raise OverflowError(f"partition leader epoch {partition_leader_epoch} is not an int32")
    n = len(offsets)
    for name, column in [
        ("timestamps", timestamps),
        ("timestamp_types", timestamp_types),
        ("key_pos", key_pos),
        ("key_len", key_len),
        ("value_pos", value_pos),
        ("value_len", value_len),
        ("record_attributes", record_attributes),
    ]:
        if len(column) != n:
            raise ValueError(f"{name} has {len(column)} items but offsets has {n}")
    view = memoryview(buffer).cast("B")
    check_pieces(view.nbytes, key_pos, key_len, "key")
    check_pieces(view.nbytes, value_pos, value_len, "value")
    parts: list[bytes] = []
    sizes: list[int] = []
    columns = (timestamps, timestamp_types, key_pos, key_len, value_pos, value_len, record_attributes)
    for offset, ts, ts_type, kp, kl, vp, vl, attributes in zip(offsets.tolist(), *(c.tolist() for c in columns)):
        record = encode_record(
            0, 0, None if kl < 0 else view[kp : kp + kl], None if vl < 0 else view[vp : vp + vl], (), attributes
        )
        covered = _COVERED.pack(TIMESTAMP_TYPE_BIT if ts_type == 1 else 0, 0, ts, ts, -1, -1, -1, 1) + record
        size = len(covered) + ATTRIBUTES_OFFSET
        if size - 12 >= 2**31:
            raise OverflowError(f"record {len(sizes)}: a batch of {size} bytes does not fit v2's int32 length")
        parts.append(_UNCOVERED.pack(offset, size - 12, partition_leader_epoch, MAGIC, crc32c(covered)))
        parts.append(covered)
        sizes.append(size)
    return b"".join(parts), np.array(sizes, np.int64).tobytes()


_single_record_batches = accel.pick(accel.compiled("single_record_batches"), single_record_batches)


def single_record_batch_sizes(key_len: np.ndarray, value_len: np.ndarray) -> np.ndarray:
    """The size of each batch ``single_record_batches`` writes, from its record's key and value lengths alone (-1:
    null): the 61-byte header, then the record's length varint and its body (attributes, timestamp delta 0, offset
    delta 0, key, value, no headers). So a plan can tell where each legacy message's batch will start."""
    key_len = np.asarray(key_len, np.int64)
    value_len = np.asarray(value_len, np.int64)
    body = 4 + varint_sizes(key_len) + np.maximum(key_len, 0) + varint_sizes(value_len) + np.maximum(value_len, 0)
    return RECORD_BATCH_OVERHEAD + varint_sizes(body) + body


def _refuse_negative_timestamps(timestamps: np.ndarray) -> None:
    """MemoryRecordsBuilder refuses a timestamp below -1 ("Invalid negative timestamp"), so Kafka's cleaner could
    not rewrite such a record either; say which record it is."""
    below = np.flatnonzero(np.asarray(timestamps) < NO_TIMESTAMP)
    if len(below):
        i = int(below[0])
        raise UnencodableRecordError(
            f"timestamp {int(timestamps[i])} is below -1, which Kafka's record builders refuse (Invalid negative "
            "timestamp)",
            record_index=i,
        )


def encode_single_record_batches(
    cols: RecordColumns,
    timestamp_types: np.ndarray,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    tombstone_flag: bool = False,
) -> tuple[bytes, np.ndarray]:
    """One uncompressed v2 batch per record, as Kafka 4's cleaner writes uncompressed legacy messages (KAFKA-13093).

    ``cols.timestamps`` are the effective timestamps; ``timestamp_types`` per record is 0 CreateTime or
    1 LogAppendTime. Returns the bytes and each batch's size. Runs the C accelerator when it is active, else
    ``single_record_batches``.
    """
    n = len(cols)
    if cols.headers is not None:
        raise ValueError("encode_single_record_batches takes records without headers")
    if n == 0:
        return b"", np.zeros(0, np.int64)
    _refuse_negative_timestamps(cols.timestamps)
    raw, sizes = _single_record_batches(
        cols.buffer,
        int64_column(cols.offsets),
        int64_column(cols.timestamps),
        int64_column(timestamp_types),
        int64_column(cols.key_pos),
        int64_column(cols.key_len),
        int64_column(cols.value_pos),
        int64_column(cols.value_len),
        new_record_attributes(cols, tombstone_flag),
        partition_leader_epoch,
    )
    return raw, np.frombuffer(sizes, np.int64)


def _encode_records(
    cols: RecordColumns, offset_deltas: np.ndarray, timestamp_deltas: np.ndarray, attributes: np.ndarray
) -> bytes:
    view = memoryview(cols.buffer).cast("B")
    check_pieces(view.nbytes, cols.key_pos, cols.key_len, "key")
    check_pieces(view.nbytes, cols.value_pos, cols.value_len, "value")
    keys = [None if n < 0 else view[p : p + n] for p, n in zip(cols.key_pos.tolist(), cols.key_len.tolist())]
    values = [None if n < 0 else view[p : p + n] for p, n in zip(cols.value_pos.tolist(), cols.value_len.tolist())]
    headers = cols.headers if cols.headers is not None else [()] * len(cols)
    return b"".join(
        map(
            encode_record,
            offset_deltas.tolist(),
            timestamp_deltas.tolist(),
            keys,
            values,
            headers,
            attributes.tolist(),
        )
    )


@dataclass(frozen=True)
class CarriedHeader:
    """The v2 header fields a converted legacy message never has, and a rebuilt v2 batch keeps as they were: the
    producer's id, epoch and first sequence, the transactional and control flags, and the cleaner's delete horizon
    (the base timestamp, when set)."""

    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None


NOT_CARRIED = CarriedHeader()  # what a batch made from legacy messages has


def encode_batch(
    records: list[Record] | RecordColumns,
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    carried: CarriedHeader = NOT_CARRIED,
    record_attributes: np.ndarray | None = None,
) -> bytes:
    """One v2 batch holding ``records``, with every header field a migration needs to set.

    Unlike producer-side builders this sets the real base offset and leader epoch, never replaces a -1 timestamp
    with "now", and never silently drops the compression. ``record_attributes``: each record's attributes byte
    (uint8; ``new_record_attributes`` sets KIP-87's delete flag), 0 for every record when None.
    """
    cols = records if isinstance(records, RecordColumns) else RecordColumns.from_records(records)
    n = len(cols)
    if n and base_offset is None:
        base_offset = int(cols.offsets[0])
    if base_offset is None:
        raise ValueError("an empty batch needs base_offset")
    if last_offset is None:
        last_offset = int(cols.offsets[-1]) if n else base_offset
    if n and (int(cols.offsets[0]) < base_offset or int(cols.offsets[-1]) > last_offset):
        raise ValueError("record offsets fall outside base_offset..last_offset")
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime needs log_append_time")
        timestamps = np.full(n, log_append_time, np.int64)
        max_ts = log_append_time
    else:
        timestamps = cols.timestamps
        max_ts = int(timestamps.max()) if n else NO_TIMESTAMP
        max_ts = max(max_ts, NO_TIMESTAMP)
    _refuse_negative_timestamps(timestamps)
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if carried is not NOT_CARRIED:
        if carried.is_transactional:
            attributes |= TRANSACTIONAL_BIT
        if carried.is_control:
            attributes |= CONTROL_BIT
        if carried.delete_horizon_ms is not None:
            attributes |= DELETE_HORIZON_BIT
    return _assemble(
        cols,
        timestamps,
        base_offset=base_offset,
        last_offset_delta=last_offset - base_offset,
        attributes=attributes,
        max_ts=max_ts,
        carried=carried,
        partition_leader_epoch=partition_leader_epoch,
        record_attributes=np.zeros(n, np.uint8) if record_attributes is None else record_attributes,
    )


def _assemble(
    cols: RecordColumns,
    timestamps: np.ndarray,
    *,
    base_offset: int,
    last_offset_delta: int,
    attributes: int,
    max_ts: int,
    carried: CarriedHeader,
    partition_leader_epoch: int,
    record_attributes: np.ndarray,
) -> bytes:
    """The one batch writer behind ``encode_batch`` and ``V2Batch.rebuild``: records (compressed with the codec of
    ``attributes``), header and CRC. The base timestamp is the delete horizon where the batch has one, else its first
    record's."""
    horizon = carried.delete_horizon_ms
    base_ts = horizon if horizon is not None else int(timestamps[0]) if len(cols) else NO_TIMESTAMP
    # deltas in int64 arithmetic, as Kafka computes them (a timestamp delta may wrap)
    body = _encode_records(cols, cols.offsets - base_offset, timestamps - base_ts, record_attributes)
    codec = Compression(attributes & CODEC_MASK)
    if codec != Compression.NONE:
        body = codecs.compress(codec, body, MAGIC)
    covered = _COVERED.pack(
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        carried.producer_id,
        carried.producer_epoch,
        carried.base_sequence,
        len(cols),
    )
    tail = covered + body
    return _UNCOVERED.pack(base_offset, len(tail) + 9, partition_leader_epoch, MAGIC, crc32c(tail)) + tail


@dataclass(slots=True)
class V2Columns:
    """Uncompressed v2 batches decoded column-wise: per-batch header fields, and all their records."""

    positions: np.ndarray
    sizes: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    records: RecordColumns

    @property
    def entry_count(self) -> int:
        return len(self.positions)

    @property
    def first_position(self) -> int:
        return int(self.positions[0])

    def batch_columns(self) -> BatchColumns:
        magics = np.full(len(self.positions), MAGIC, np.int64)
        return BatchColumns(self.positions, self.sizes, self.last_offsets, self.max_timestamps, magics)


def decode_uncompressed_batches(buf: bytes | memoryview, positions: np.ndarray, sizes: np.ndarray) -> V2Columns | None:
    """CRC-check and decode uncompressed, header-less v2 batches at once, in one pass of the C accelerator over each
    batch; None if any batch needs ``decode_batch`` (compressed, with headers, or malformed: that path raises the
    precise error), and without the accelerator."""
    if not len(positions):
        return None
    return _decode_uncompressed(buf, positions, sizes)


def _decode_uncompressed_compiled(
    buf: bytes | memoryview, positions: np.ndarray, sizes: np.ndarray
) -> V2Columns | None:
    positions, sizes = int64_column(positions), int64_column(sizes)
    status, _, last_offsets, max_timestamps, *cols = _v2_batches(buf, positions, sizes)
    if status.count(0) != len(status):
        return None
    offsets, timestamps, key_pos, key_len, value_pos, value_len = (np.frombuffer(c, np.int64) for c in cols)
    return V2Columns(
        positions=positions,
        sizes=sizes,
        last_offsets=np.frombuffer(last_offsets, np.int64),
        max_timestamps=np.frombuffer(max_timestamps, np.int64),
        records=RecordColumns(buf, offsets, timestamps, key_pos, key_len, value_pos, value_len),
    )


def _decode_batch_by_batch(buf: bytes | memoryview, positions: np.ndarray, sizes: np.ndarray) -> None:
    """Without the accelerator there is no columnar decoder: ``decode_batch`` reads each batch."""
    return None


_v2_batches = accel.compiled("v2_batches")
_decode_uncompressed = accel.pick(_decode_uncompressed_compiled, _decode_batch_by_batch)
