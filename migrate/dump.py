"""What ``kafka-log-migrate dump`` prints: pure functions from decoded log entries to output lines.

One view per log entry (``EntryView``), rendered two ways:

- text with the field names and order of Kafka's ``kafka-dump-log.sh`` (``DumpLogSegments``, Kafka 3.3+), so an
  operator reads our output the way they read Kafka's;
- JSON objects with the keys of the Kafka oracle's ``dump`` (``batch``, ``record``, ``trailing``, ``error`` lines),
  so our view of a file and Kafka's can be diffed line by line.

Every uncompressed legacy message is its own log entry (Kafka's FileLogInputStream yields one batch per message),
although the reader groups consecutive ones into a ``LegacyRun``; ``entry_views`` splits them again.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath
from typing import Any

import numpy as np

from migrate.errors import CorruptRecordError
from migrate.format import legacy
from migrate.format.batch import V2Batch
from migrate.format.checksums import crc32
from migrate.format.entries import Entry, Tail, read_entries
from migrate.format.records import Compression, Header, RecordColumns, TimestampType

NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
RECORD_INDENT = "|"

# TimestampType.toString() in Kafka's Java client, which DumpLogSegments prints as the timestamp's label
TIMESTAMP_LABELS = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}

# Kafka's ControlRecordType ids (the type int16 in a control record's key)
CONTROL_RECORD_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VOTERS",
    6: "KRAFT_VERSION",
}
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_UINT32 = struct.Struct(">I")
_TIMESTAMP_TYPES = {t.value: t for t in TimestampType}


@dataclass(frozen=True, slots=True)
class RecordView:
    """One record as Kafka's deep iteration reports it (absolute offset, effective timestamp)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE  # v2: base sequence + offset delta, -1 without an idempotent producer
    crc: int | None = None  # legacy: the (inner) message's own CRC-32; None for v2


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is twice as slow, and there is one per entry
class EntryView:
    """One log entry (a v2 batch, a legacy compressed wrapper or an uncompressed legacy message) with the fields
    DumpLogSegments and the oracle print; ``records`` decodes its records on demand (only deep iteration needs
    them)."""

    position: int
    base_offset: int
    last_offset: int
    magic: int
    compression: Compression
    timestamp_type: TimestampType
    max_timestamp: int
    size: int  # including the 12-byte offset+size prefix
    crc: int
    count: int
    records: Callable[[], Iterator[RecordView]]
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    partition_leader_epoch: int = -1
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset - self.base_offset)


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """What the reader made of a segment's bytes: the complete entries up to the first corrupt one (if any)."""

    entries: list[Entry]
    tail: Tail | None  # a partial last entry (crash residue)
    error: CorruptRecordError | None  # the first corrupt entry; ``entries`` stops before it


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: producer sequences wrap from 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def read_segment_bytes(buf: bytes | memoryview) -> SegmentRead:
    """Decode ``buf`` (a whole segment, from byte 0), keeping every entry before the first corrupt one.

    ``read_entries`` raises for the whole buffer, so on an error the bytes before the reported entry are read
    again; the loop finds the earliest error when a vectorized check reported a later one first.
    """
    view = memoryview(buf)
    end = len(view)
    error: CorruptRecordError | None = None
    while True:
        try:
            entries = read_entries(view[:end], final=error is None)
        except CorruptRecordError as exc:
            error = exc
            # every error read_entries raises names the start of the entry; the guard only prevents a loop
            end = exc.position if exc.position is not None and exc.position < end else 0
            continue
        return SegmentRead(entries.items, entries.tail, error)


def entry_views(items: Iterable[Entry]) -> Iterator[EntryView]:
    """One view per log entry, in file order (positions as in the decoded buffer)."""
    for item in items:
        if isinstance(item, legacy.LegacyRun):
            yield from _run_views(item)
        elif isinstance(item, legacy.LegacyWrapper):
            yield _wrapper_view(item)
        else:
            yield _batch_view(item)


def _run_views(run: legacy.LegacyRun) -> Iterator[EntryView]:
    cols = run.records
    # plain lists: indexing numpy arrays element by element costs more than the rest of a shallow dump
    positions, sizes, magics, crcs = (a.tolist() for a in (run.positions, run.sizes, run.magics, run.crcs))
    offsets, timestamps = cols.offsets.tolist(), cols.timestamps.tolist()
    types = [_TIMESTAMP_TYPES[t] for t in run.timestamp_types().tolist()]
    for j in range(len(positions)):
        yield EntryView(
            position=positions[j],
            base_offset=offsets[j],
            last_offset=offsets[j],
            magic=magics[j],
            compression=Compression.NONE,
            timestamp_type=types[j],
            max_timestamp=timestamps[j],
            size=sizes[j],
            crc=crcs[j],
            count=1,
            records=partial(_run_record, run, j),
        )


def _run_record(run: legacy.LegacyRun, j: int) -> Iterator[RecordView]:
    cols = run.records
    yield RecordView(int(cols.offsets[j]), int(cols.timestamps[j]), cols.key(j), cols.value(j), crc=int(run.crcs[j]))


def _wrapper_view(wrapper: legacy.LegacyWrapper) -> EntryView:
    return EntryView(
        position=wrapper.position,
        base_offset=int(wrapper.records.offsets[0]),
        last_offset=wrapper.offset,
        magic=wrapper.magic,
        compression=wrapper.compression,
        timestamp_type=wrapper.timestamp_type,
        max_timestamp=wrapper.timestamp,
        size=wrapper.size,
        crc=wrapper.crc,
        count=len(wrapper.records),
        records=partial(_wrapper_records, wrapper),
    )


def _wrapper_records(wrapper: legacy.LegacyWrapper) -> Iterator[RecordView]:
    cols = wrapper.records
    for i in range(len(cols)):
        crc = inner_message_crc(cols, i, wrapper.magic)
        yield RecordView(int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i), crc=crc)


def inner_message_crc(cols: RecordColumns, i: int, wrapper_magic: int) -> int | None:
    """The stored CRC-32 of a wrapper's ``i``-th inner message (Kafka prints it per record).

    The reader keeps no inner CRCs, so the message start is found back from where its key length sits (its offset
    from the start depends on the inner magic, normally the wrapper's); the candidate whose CRC checks is the one.
    """
    buf = cols.buffer
    key_length_at = int(cols.key_pos[i]) - 4
    message_end = int(cols.value_pos[i]) + max(int(cols.value_len[i]), 0)
    for magic in (wrapper_magic, 1 - wrapper_magic):
        start = key_length_at - legacy.KEY_LENGTH_OFFSET[magic]
        if start < 0 or buf[start + legacy.MAGIC_OFFSET] != magic:
            continue
        (stored,) = _UINT32.unpack_from(buf, start + legacy.CRC_OFFSET)
        if crc32(memoryview(buf)[start + legacy.MAGIC_OFFSET : message_end]) == stored:
            return int(stored)
    return None


def _batch_view(batch: V2Batch) -> EntryView:
    return EntryView(
        position=batch.position,
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        magic=2,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        max_timestamp=batch.max_timestamp,
        size=batch.size,
        crc=batch.crc,
        count=batch.records_count,
        records=partial(_batch_records, batch),
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        delete_horizon_ms=batch.delete_horizon_ms,
    )


def _batch_records(batch: V2Batch) -> Iterator[RecordView]:
    cols = batch.records
    if cols is None:
        raise ValueError("the batch was read with deep=False")  # a caller bug: dump always reads deep
    headers = cols.headers
    base_sequence = batch.base_sequence
    for i in range(len(cols)):
        offset = int(cols.offsets[i])
        sequence = NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, offset - batch.base_offset)
        yield RecordView(
            offset,
            int(cols.timestamps[i]),
            cols.key(i),
            cols.value(i),
            headers[i] if headers is not None else (),
            sequence,
        )


# --- text: kafka-dump-log.sh -----------------------------------------------------------------------------------


def segment_base_offset(file_name: str) -> int | None:
    """The base offset in a segment's file name (``00000000000000000100.log`` -> 100), None for other names."""
    stem = file_name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def header_lines(path: str) -> list[str]:
    """DumpLogSegments' lines before the entries of one file."""
    lines = [f"Dumping {path}"]
    base = segment_base_offset(PurePath(path).name)
    if base is not None:
        lines.append(f"Log starting offset: {base}")
    return lines


def text_lines(entries: Iterable[Entry], deep: bool = False, print_data: bool = False) -> Iterator[str]:
    """The entry lines of ``kafka-dump-log.sh --files F [--deep-iteration] [--print-data-log]`` (every entry the
    reader returns is valid, hence ``isvalid: true``)."""
    deep = deep or print_data  # as in Kafka: printing data implies deep iteration
    for entry in entry_views(entries):
        yield entry_text(entry)
        if deep:
            for record in entry.records():
                yield record_text(entry, record, print_data)


def entry_text(entry: EntryView) -> str:
    if entry.magic >= 2:
        head = (
            f"baseOffset: {entry.base_offset} lastOffset: {entry.last_offset} count: {entry.count} "
            f"baseSequence: {entry.base_sequence} lastSequence: {entry.last_sequence} "
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"partitionLeaderEpoch: {entry.partition_leader_epoch} isTransactional: {_java(entry.is_transactional)} "
            f"isControl: {_java(entry.is_control)} deleteHorizonMs: {_optional_long(entry.delete_horizon_ms)}"
        )
    else:
        head = f"offset: {entry.last_offset}"
    return (
        f"{head} position: {entry.position} {TIMESTAMP_LABELS[entry.timestamp_type]}: {entry.max_timestamp} "
        f"size: {entry.size} magic: {entry.magic} compresscodec: {entry.compression.label} crc: {entry.crc} "
        "isvalid: true"
    )


def record_text(entry: EntryView, record: RecordView, print_data: bool = False) -> str:
    line = (
        f"{RECORD_INDENT} offset: {record.offset} {TIMESTAMP_LABELS[entry.timestamp_type]}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)}"
    )
    if entry.magic >= 2:
        line += f" sequence: {record.sequence} headerKeys: [{','.join(name for name, _ in record.headers)}]"
    else:
        # Kafka 3.x prints a stray "}" after the crc here (a typo in DumpLogSegments); it is left out
        line += f" isValid: true crc: {record.crc}"
    if entry.is_control:
        line += control_record_text(record)
    elif print_data:
        # Kafka's default StringDecoder: UTF-8, malformed bytes replaced
        if record.key is not None:
            line += f" key: {record.key.decode('utf-8', 'replace')}"
        if record.value is not None:
            line += f" payload: {record.value.decode('utf-8', 'replace')}"
    return line


def control_record_text(record: RecordView) -> str:
    """A control record as DumpLogSegments describes it (snapshot header/footer are not decoded further)."""
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return f" controlType: UNKNOWN(key of {len(key)} bytes)"
    _, type_id = _CONTROL_KEY.unpack_from(key)
    name = CONTROL_RECORD_TYPES.get(type_id, "UNKNOWN")
    value = record.value or b""
    if type_id in (0, 1) and len(value) >= _END_TXN_VALUE.size:
        _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {name}({type_id})"


def trailing_text(tail: Tail, file_name: str) -> str:
    return f"Found {tail.size} invalid bytes at the end of {file_name}"


def offset_gaps(entries: Iterable[Entry]) -> list[tuple[int, int]]:
    """(previous, next) for every record whose offset is not the previous one + 1: what DumpLogSegments reports as
    "Non-consecutive offsets" under deep iteration (compaction leaves such gaps; they are not damage)."""
    columns = [item.records.offsets for item in entries if item.records is not None]
    if not columns:
        return []
    offsets = np.concatenate(columns)
    at = np.flatnonzero(np.diff(offsets) != 1)
    return list(zip(offsets[at].tolist(), offsets[at + 1].tolist()))


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _optional_long(value: int | None) -> str:
    """java.util.OptionalLong.toString(), which is how Kafka prints deleteHorizonMs."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


# --- JSON: the Kafka oracle's dump schema ------------------------------------------------------------------------


def json_lines(entries: Iterable[Entry], deep: bool = True, with_data: bool = False) -> Iterator[dict[str, Any]]:
    """``batch`` lines (each followed by its ``record`` lines when ``deep``) in the oracle's key order;
    ``with_data`` adds the oracle's ``--hex`` fields (``key_hex``, ``value_hex``, header values in hex)."""
    for entry in entry_views(entries):
        yield batch_json(entry)
        if deep or with_data:
            for record in entry.records():
                yield record_json(record, with_data)


def batch_json(entry: EntryView) -> dict[str, Any]:
    return {
        "type": "batch",
        "position": entry.position,
        "baseOffset": entry.base_offset,
        "lastOffset": entry.last_offset,
        "magic": entry.magic,
        "compression": entry.compression.label,
        "timestampType": entry.timestamp_type.name,
        "maxTimestamp": entry.max_timestamp,
        "sizeInBytes": entry.size,
        "crc": entry.crc,
        "records": entry.count,
        "producerId": entry.producer_id,
        "producerEpoch": entry.producer_epoch,
        "baseSequence": entry.base_sequence,
        "isTransactional": entry.is_transactional,
        "isControl": entry.is_control,
        "partitionLeaderEpoch": entry.partition_leader_epoch,
        "valid": True,
        "error": None,
    }


def record_json(record: RecordView, with_data: bool = False) -> dict[str, Any]:
    headers: list[list[str | None]] = []
    for name, value in record.headers:
        pair = [name, _sha256(value)]
        if with_data:
            pair.append(None if value is None else value.hex())
        headers.append(pair)
    line: dict[str, Any] = {
        "type": "record",
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keyNull": record.key is None,
        "keySize": _size(record.key),
        "key_sha256": _sha256(record.key),
        "valueNull": record.value is None,
        "valueSize": _size(record.value),
        "value_sha256": _sha256(record.value),
        "headers": headers,
        "valid": True,
    }
    if with_data:
        line["key_hex"] = None if record.key is None else record.key.hex()
        line["value_hex"] = None if record.value is None else record.value.hex()
    return line


def trailing_json(tail: Tail) -> dict[str, Any]:
    return {"type": "trailing", "position": tail.position, "bytes": tail.size, "valid": False, "error": tail.reason}


def error_json(error: CorruptRecordError, file_size: int) -> dict[str, Any]:
    """Where reading stopped and why; like the oracle's message, it does not name the file (the position does)."""
    position = error.position or 0
    reason = error.reason if error.offset is None else f"{error.reason} (offset {error.offset})"
    return {"type": "error", "position": position, "bytes": file_size - position, "valid": False, "error": reason}


def file_json(path: str, file_size: int) -> dict[str, Any]:
    return {"type": "file", "path": path, "bytes": file_size}


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()
