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

import struct
from dataclasses import dataclass

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import codecs
from migrate.format._bytes import as_u8, gather_be, gather_pieces, varint_matrix
from migrate.format.checksums import crc32c, crc32c_ranges
from migrate.format.records import NO_TIMESTAMP, Compression, Record, RecordColumns, TimestampType
from migrate.format.varint import decode_varint, varint, varint_sizes

try:
    from migrate.format import _speedups
except ImportError:  # not built: the numpy path below writes the same bytes, slower
    _speedups = None

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

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_DTYPE = np.dtype(
    [
        ("base_offset", ">i8"),
        ("batch_length", ">i4"),
        ("partition_leader_epoch", ">i4"),
        ("magic", "i1"),
        ("crc", ">u4"),
        ("attributes", ">i2"),
        ("last_offset_delta", ">i4"),
        ("base_timestamp", ">i8"),
        ("max_timestamp", ">i8"),
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("base_sequence", ">i4"),
        ("records_count", ">i4"),
    ]
)
assert HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD


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

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & DELETE_HORIZON_BIT else None


def decode_batch(buf: bytes | memoryview, position: int, size: int, deep: bool = True) -> V2Batch:
    """Decode and CRC-check one v2 batch; with ``deep``, decompress and decode its records too."""
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(
            f"record batch of {size} bytes is smaller than the {RECORD_BATCH_OVERHEAD}-byte batch header",
            position=position,
        )
    (base_offset, _, ple, _, crc, attributes, last_delta, base_ts, max_ts, pid, epoch, base_seq, count) = (
        _HEADER.unpack_from(buf, position)
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


def _record_pieces(
    cols: RecordColumns,
    offset_deltas: np.ndarray,
    timestamp_deltas: np.ndarray,
    record_attributes: np.ndarray,
    prefix: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Encode header-less records as pieces over one combined source; gather them into output bytes.

    ``prefix`` (n x k uint8) is put before each record: a 61-byte batch header for single-record batches.
    Returns (output bytes, per-record output size).
    """
    n = len(cols)
    kl = cols.key_len
    vl = cols.value_len
    klp = np.maximum(kl, 0)
    vlp = np.maximum(vl, 0)
    s_ts = varint_sizes(timestamp_deltas)
    s_od = varint_sizes(offset_deltas)
    s_kl = varint_sizes(kl)
    s_vl = varint_sizes(vl)
    body_len = 1 + s_ts + s_od + s_kl + klp + s_vl + vlp + 1
    s_len = varint_sizes(body_len)
    k = 0 if prefix is None else prefix.shape[1]
    width_a = k + 5 + 1 + 10 + 5 + 5
    a = np.zeros((n, width_a), np.uint8)
    if prefix is not None:
        a[:, :k] = prefix
    rows = np.arange(n)
    cursor = np.full(n, k, np.int64)

    def put_varints(values: np.ndarray, sizes: np.ndarray) -> None:
        vm = varint_matrix(values, sizes)
        for j in range(vm.shape[1]):
            m = sizes > j
            a[rows[m], cursor[m] + j] = vm[m, j]
        cursor[:] += sizes

    put_varints(body_len, s_len)
    a[rows, cursor] = record_attributes
    cursor += 1
    put_varints(timestamp_deltas, s_ts)
    put_varints(offset_deltas, s_od)
    put_varints(kl, s_kl)
    b = varint_matrix(vl, s_vl)
    width_b = b.shape[1]
    source = as_u8(cols.buffer)
    a_flat = a.ravel()
    combined = np.concatenate([a_flat, b.ravel(), np.zeros(1, np.uint8), source])
    b_base = len(a_flat)
    zero_at = b_base + b.size
    src_base = zero_at + 1
    starts = np.stack(
        [
            rows * width_a,
            src_base + cols.key_pos,
            b_base + rows * width_b,
            src_base + cols.value_pos,
            np.full(n, zero_at),
        ],
        axis=1,
    ).ravel()
    lengths = np.stack([cursor, klp, s_vl, vlp, np.ones(n, np.int64)], axis=1).ravel()
    out = gather_pieces(combined, starts, lengths)
    return out, cursor + klp + s_vl + vlp + 1


def _header_rows(n: int) -> np.ndarray:
    h = np.zeros(n, HEADER_DTYPE)
    h["magic"] = MAGIC
    h["producer_id"] = -1
    h["producer_epoch"] = -1
    h["base_sequence"] = -1
    return h


def _record_attributes(cols: RecordColumns, tombstone_flag: bool) -> np.ndarray:
    if tombstone_flag:
        return np.where(cols.value_len < 0, KIP87_TOMBSTONE_BIT, 0).astype(np.uint8)
    return np.zeros(len(cols), np.uint8)


def encode_single_record_batches(
    cols: RecordColumns,
    timestamp_types: np.ndarray,
    *,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    tombstone_flag: bool = False,
) -> tuple[bytes, np.ndarray]:
    """One uncompressed v2 batch per record, as Kafka 4's cleaner writes uncompressed legacy messages (KAFKA-13093).

    ``cols.timestamps`` are the effective timestamps; ``timestamp_types`` per record is 0 CreateTime or
    1 LogAppendTime. Returns the bytes and each batch's size.
    """
    n = len(cols)
    if cols.headers is not None:
        raise ValueError("encode_single_record_batches takes records without headers")
    if n == 0:
        return b"", np.zeros(0, np.int64)
    if _speedups is not None:
        raw, sizes = _speedups.single_record_batches(
            cols.buffer,
            cols.offsets.astype(np.int64),
            cols.timestamps.astype(np.int64),
            timestamp_types.astype(np.int64),
            cols.key_pos.astype(np.int64),
            cols.key_len.astype(np.int64),
            cols.value_pos.astype(np.int64),
            cols.value_len.astype(np.int64),
            _record_attributes(cols, tombstone_flag),
            partition_leader_epoch,
        )
        return raw, np.frombuffer(sizes, np.int64)
    h = _header_rows(n)
    h["base_offset"] = cols.offsets
    h["partition_leader_epoch"] = partition_leader_epoch
    h["attributes"] = np.where(timestamp_types == TimestampType.LOG_APPEND_TIME, TIMESTAMP_TYPE_BIT, 0)
    h["base_timestamp"] = cols.timestamps
    h["max_timestamp"] = cols.timestamps
    h["records_count"] = 1
    zeros = np.zeros(n, np.int64)
    # batch_length depends on the record size, so encode once with a placeholder and patch it in after
    out, sizes = _record_pieces(
        cols, zeros, zeros, _record_attributes(cols, tombstone_flag), h.view(np.uint8).reshape(n, -1)
    )
    starts = np.cumsum(sizes) - sizes
    _patch_int32(out, starts + 8, sizes - 12)
    crcs = crc32c_ranges(out, starts + ATTRIBUTES_OFFSET, starts + sizes)
    _patch_int32(out, starts + CRC_OFFSET, crcs)
    return out.tobytes(), sizes


def _patch_int32(out: np.ndarray, at: np.ndarray, values: np.ndarray) -> None:
    be = values.astype(">u4").view(np.uint8).reshape(-1, 4)
    out[at[:, None] + np.arange(4)] = be


def encode_batch(
    records: list[Record] | RecordColumns,
    *,
    base_offset: int | None = None,
    last_offset: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon_ms: int | None = None,
    tombstone_flag: bool = False,
) -> bytes:
    """One v2 batch holding ``records``, with every header field a migration needs to set.

    Unlike producer-side builders this sets the real base offset and leader epoch, never replaces a -1 timestamp
    with "now", and never silently drops the compression.
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
    if n and ((timestamps < NO_TIMESTAMP).any()):
        raise ValueError("timestamps below -1 are invalid in Kafka (Invalid negative timestamp)")
    base_ts = int(timestamps[0]) if n else NO_TIMESTAMP
    if delete_horizon_ms is not None:
        base_ts = delete_horizon_ms
    if cols.headers is None:
        body, _ = _record_pieces(
            cols, cols.offsets - base_offset, timestamps - base_ts, _record_attributes(cols, tombstone_flag), None
        )
        body_bytes = body.tobytes()
    else:
        # deltas in int64 arithmetic, as the path above and Kafka compute them (a timestamp delta may wrap)
        offset_deltas = (cols.offsets - base_offset).tolist()
        timestamp_deltas = (timestamps - base_ts).tolist()
        body_bytes = b"".join(
            _encode_record(
                offset_deltas[i],
                timestamp_deltas[i],
                r.key,
                r.value,
                r.headers,
                KIP87_TOMBSTONE_BIT if (tombstone_flag and r.value is None) else 0,
            )
            for i, r in enumerate(cols.rows())
        )
    if compression != Compression.NONE:
        body_bytes = codecs.compress(compression, body_bytes, MAGIC)
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_BIT
    tail = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset - base_offset,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            n,
        )
        + body_bytes
    )
    crc = crc32c(tail)
    return struct.pack(">qiibI", base_offset, len(tail) + 9, partition_leader_epoch, MAGIC, crc) + tail


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    attributes: int,
) -> bytes:
    parts = [bytes([attributes]), varint(timestamp_delta), varint(offset_delta)]
    for field in (key, value):
        if field is None:
            parts.append(varint(-1))
        else:
            parts.append(varint(len(field)))
            parts.append(field)
    parts.append(varint(len(headers)))
    for hkey, hval in headers:
        hk = hkey.encode("utf-8")
        parts.append(varint(len(hk)))
        parts.append(hk)
        if hval is None:
            parts.append(varint(-1))
        else:
            parts.append(varint(len(hval)))
            parts.append(hval)
    body = b"".join(parts)
    return varint(len(body)) + body


@dataclass(slots=True)
class V2Columns:
    """Uncompressed v2 batches decoded column-wise: per-batch header fields, and all their records."""

    positions: np.ndarray
    sizes: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    records: RecordColumns


def decode_uncompressed_batches(buf: bytes | memoryview, positions: np.ndarray, sizes: np.ndarray) -> V2Columns | None:
    """CRC-check and decode uncompressed, header-less v2 batches at once; None if any batch needs ``decode_batch``
    (compressed, with headers, or malformed: that path raises the precise error). Needs the C accelerator."""
    if _speedups is None or not len(positions):
        return None
    u8 = np.frombuffer(buf, np.uint8)
    if (sizes < RECORD_BATCH_OVERHEAD).any():
        return None
    stored = gather_be(u8, positions + CRC_OFFSET, 4, signed=False)
    if (crc32c_ranges(buf, positions + ATTRIBUTES_OFFSET, positions + sizes) != stored).any():
        return None
    status, counts, *cols = _speedups.v2_records(buf, positions.astype(np.int64), sizes.astype(np.int64))
    if any(status):
        return None
    counts = np.frombuffer(counts, np.int64)
    if (counts != gather_be(u8, positions + 57, 4)).any():
        return None
    offsets, timestamps, key_pos, key_len, value_pos, value_len = (np.frombuffer(c, np.int64) for c in cols)
    last_offsets = gather_be(u8, positions, 8) + gather_be(u8, positions + 23, 4)
    return V2Columns(
        positions=positions,
        sizes=sizes,
        last_offsets=last_offsets,
        max_timestamps=gather_be(u8, positions + 35, 8),
        records=RecordColumns(buf, offsets, timestamps, key_pos, key_len, value_pos, value_len),
    )
