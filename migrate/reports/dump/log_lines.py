"""The lines ``dump`` prints for a log segment, from its ``LogRead``: text or JSON objects.

- text with the field names and order of Kafka's ``kafka-dump-log.sh`` (``DumpLogSegments``, Kafka 3.3+), so an
  operator reads our output the way they read Kafka's;
- JSON objects with the keys of the Kafka oracle's ``dump`` (``batch``, ``record``, ``trailing``, ``error`` lines),
  so our view of a file and Kafka's can be diffed line by line.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from pathlib import PurePath
from typing import Any

from migrate.format.entries import Tail
from migrate.format.records import Compression, TimestampType
from migrate.reports.dump.log_read import LogRead, ReadError, segment_base_offset
from migrate.reports.dump.views import EntryView, RecordView

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


# --- text: kafka-dump-log.sh -----------------------------------------------------------------------------------


def starting_offset_lines(path: str) -> list[str]:
    """DumpLogSegments' line between "Dumping FILE" and the entries of a ``.log`` named by its base offset."""
    name = PurePath(path).name
    base = segment_base_offset(name)
    return [f"Log starting offset: {base}"] if base is not None and name.endswith(".log") else []


def entry_text(entry: EntryView, valid: bool = True) -> str:
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
        f"size: {entry.size} magic: {entry.magic} compresscodec: {_label(entry.compression)} crc: {entry.crc} "
        f"isvalid: {_java(valid)}"
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
        line += f" isValid: {_java(record.valid)} crc: {record.crc}"
    if entry.is_control:
        line += control_record_text(record)
    elif print_data:
        line += data_text(record)
    return line


def data_text(record: RecordView) -> str:
    """`` key: K payload: V`` as DumpLogSegments prints them with its default StringDecoder (UTF-8, malformed
    bytes replaced); a null key or value is left out, an empty one is printed empty."""
    text = ""
    if record.key is not None:
        text += f" key: {record.key.decode('utf-8', 'replace')}"
    if record.value is not None:
        text += f" payload: {record.value.decode('utf-8', 'replace')}"
    return text


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


def _label(compression: Compression | None) -> str:
    return "unknown" if compression is None else compression.label


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _optional_long(value: int | None) -> str:
    """java.util.OptionalLong.toString(), which is how Kafka prints deleteHorizonMs."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


# --- JSON: the Kafka oracle's dump schema ------------------------------------------------------------------------


def json_lines(read: LogRead, deep: bool = True, with_data: bool = False) -> Iterator[dict[str, Any]]:
    """``batch`` lines (each followed by its ``record`` lines when ``deep``) in the oracle's key order;
    ``with_data`` adds the oracle's ``--hex`` fields (``key_hex``, ``value_hex``, header values in hex)."""
    for entry, error in read.views():
        yield batch_json(entry, error)
        if deep or with_data:
            for record in entry.records():
                yield record_json(record, with_data)


def batch_json(entry: EntryView, error: ReadError | None = None) -> dict[str, Any]:
    return {
        "type": "batch",
        "position": entry.position,
        "baseOffset": entry.base_offset,
        "lastOffset": entry.last_offset,
        "magic": entry.magic,
        "compression": None if entry.compression is None else entry.compression.label,
        "timestampType": entry.timestamp_type.name,
        "maxTimestamp": entry.max_timestamp,
        "sizeInBytes": entry.size,
        "crc": entry.crc,
        "records": entry.count if entry.decoded else 0,  # the oracle counts the records Kafka could iterate
        "producerId": entry.producer_id,
        "producerEpoch": entry.producer_epoch,
        "baseSequence": entry.base_sequence,
        "isTransactional": entry.is_transactional,
        "isControl": entry.is_control,
        "partitionLeaderEpoch": entry.partition_leader_epoch,
        "valid": error is None,
        "error": None if error is None else error.reason,
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
        "valid": record.valid,
    }
    if with_data:
        line["key_hex"] = None if record.key is None else record.key.hex()
        line["value_hex"] = None if record.value is None else record.value.hex()
    return line


def trailing_json(tail: Tail) -> dict[str, Any]:
    return {"type": "trailing", "position": tail.position, "bytes": tail.size, "valid": False, "error": tail.reason}


def error_json(error: ReadError, file_size: int) -> dict[str, Any]:
    """Where reading stopped and why; like the oracle's message, it does not name the file (the position does)."""
    position = error.position or 0
    reason = error.reason if error.offset is None else f"{error.reason} (offset {error.offset})"
    return {"type": "error", "position": position, "bytes": file_size - position, "valid": False, "error": reason}


def file_json(path: str, file_size: int) -> dict[str, Any]:
    return {"type": "file", "path": path, "bytes": file_size}


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()
