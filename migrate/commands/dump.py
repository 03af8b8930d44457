"""``dump``: print a segment the way kafka-dump-log.sh does (DumpLogSegments field names), or as JSON lines.

The JSON lines have the keys of the Kafka oracle's dump (``batch``, ``record``, ``trailing`` lines), so our view
and Kafka's can be diffed directly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from migrate.errors import CorruptRecordError
from migrate.format import legacy
from migrate.format.records import Compression, TimestampType
from migrate.segment.reader import read_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dump", help="print segments like kafka-dump-log.sh")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--deep-iteration", action="store_true", help="print every record")
    p.add_argument("--print-data-log", action="store_true", help="print keys and values (implies --deep-iteration)")
    p.add_argument("--json", action="store_true", help="JSON lines with the oracle's dump schema")
    p.set_defaults(handler=run)


def _sha(b: bytes | None) -> str | None:
    return None if b is None else hashlib.sha256(b).hexdigest()


def _entries(item: Any, position: int) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(batch line, record lines) per log entry, in the oracle's schema."""
    if isinstance(item, legacy.LegacyRun):
        types = item.timestamp_types()
        for j in range(len(item)):
            cols = item.records
            ts_type = TimestampType(int(types[j]))
            batch = _batch_line(
                position + int(item.positions[j]),
                int(cols.offsets[j]),
                int(cols.offsets[j]),
                int(item.magics[j]),
                Compression.NONE,
                ts_type,
                int(cols.timestamps[j]),
                int(item.sizes[j]),
                int(item.crcs[j]),
                1,
            )
            rec = _record_line(int(cols.offsets[j]), int(cols.timestamps[j]), cols.key(j), cols.value(j), ())
            yield batch, [rec]
        return
    cols = item.records
    rows = cols.rows() if cols is not None else []
    if isinstance(item, legacy.LegacyWrapper):
        batch = _batch_line(
            position + item.position,
            int(cols.offsets[0]),
            item.offset,
            item.magic,
            item.compression,
            item.timestamp_type,
            item.timestamp,
            item.size,
            item.crc,
            len(rows),
        )
    else:
        batch = _batch_line(
            position + item.position,
            item.base_offset,
            item.last_offset,
            2,
            item.compression,
            item.timestamp_type,
            item.max_timestamp,
            item.size,
            item.crc,
            item.records_count,
        )
        batch.update(
            producerId=item.producer_id,
            producerEpoch=item.producer_epoch,
            baseSequence=item.base_sequence,
            isTransactional=item.is_transactional,
            isControl=item.is_control,
            partitionLeaderEpoch=item.partition_leader_epoch,
        )
    yield batch, [_record_line(r.offset, r.timestamp, r.key, r.value, r.headers) for r in rows]


def _batch_line(
    position: int,
    base: int,
    last: int,
    magic: int,
    codec: Compression,
    ts_type: TimestampType,
    max_ts: int,
    size: int,
    crc: int,
    count: int,
) -> dict[str, Any]:
    return {
        "type": "batch",
        "position": position,
        "baseOffset": base,
        "lastOffset": last,
        "magic": magic,
        "compression": codec.label,
        "timestampType": ts_type.name,
        "maxTimestamp": max_ts,
        "sizeInBytes": size,
        "crc": crc,
        "records": count,
        "producerId": -1,
        "producerEpoch": -1,
        "baseSequence": -1,
        "isTransactional": False,
        "isControl": False,
        "partitionLeaderEpoch": -1,
        "valid": True,
        "error": None,
    }


def _record_line(offset: int, ts: int, key: bytes | None, value: bytes | None, headers: tuple) -> dict[str, Any]:
    return {
        "type": "record",
        "offset": offset,
        "timestamp": ts,
        "keyNull": key is None,
        "keySize": -1 if key is None else len(key),
        "key_sha256": _sha(key),
        "valueNull": value is None,
        "valueSize": -1 if value is None else len(value),
        "value_sha256": _sha(value),
        "headers": [[k, _sha(v)] for k, v in headers],
        "valid": True,
    }


def _text(batch: dict[str, Any], records: list[dict[str, Any]], deep: bool, rows: list | None) -> list[str]:
    ts_name = {"CREATE_TIME": "CreateTime", "LOG_APPEND_TIME": "LogAppendTime"}.get(
        batch["timestampType"], "NoTimestampType"
    )
    if batch["magic"] >= 2:
        line = (
            f"baseOffset: {batch['baseOffset']} lastOffset: {batch['lastOffset']} count: {batch['records']} "
            f"baseSequence: {batch['baseSequence']} producerId: {batch['producerId']} producerEpoch: "
            f"{batch['producerEpoch']} partitionLeaderEpoch: {batch['partitionLeaderEpoch']} isTransactional: "
            f"{str(batch['isTransactional']).lower()} isControl: {str(batch['isControl']).lower()} "
        )
    else:
        line = f"offset: {batch['lastOffset']} "
    line += (
        f"position: {batch['position']} {ts_name}: {batch['maxTimestamp']} size: {batch['sizeInBytes']} "
        f"magic: {batch['magic']} compresscodec: {batch['compression']} crc: {batch['crc']} isvalid: true"
    )
    out = [line]
    if deep:
        for r in records:
            out.append(
                f"| offset: {r['offset']} {ts_name}: {r['timestamp']} keySize: {r['keySize']} "
                f"valueSize: {r['valueSize']}"
            )
    return out


def run(args: argparse.Namespace) -> int:
    deep = args.deep_iteration or args.print_data_log
    status = 0
    for name in args.files:
        if not args.json:
            print(f"Dumping {name}")
        else:
            print(json.dumps({"type": "file", "path": name, "bytes": Path(name).stat().st_size}))
        try:
            for chunk in read_file(name):
                for item in chunk.entries.items:
                    for batch, records in _entries(item, chunk.position):
                        if args.json:
                            print(json.dumps(batch))
                            for r in records:
                                print(json.dumps(r))
                        else:
                            print("\n".join(_text(batch, records, deep, None)))
                tail = chunk.entries.tail
                if tail is not None:
                    status = 1
                    if args.json:
                        print(
                            json.dumps(
                                {
                                    "type": "trailing",
                                    "position": chunk.position + tail.position,
                                    "bytes": tail.size,
                                    "valid": False,
                                    "error": tail.reason,
                                }
                            )
                        )
                    else:
                        print(f"Found {tail.size} invalid bytes at the end of {Path(name).name}")
        except CorruptRecordError as exc:
            status = 1
            if args.json:
                print(json.dumps({"type": "error", "position": exc.position, "valid": False, "error": str(exc)}))
            else:
                print(f"kafka-log-migrate: error: {exc}")
    return status
