"""The records a consumer must read from a log dir, as Kafka's own reader holds them: every record of every valid
batch, control batches aside (consumers never hand those over), up to the first damaged or incomplete entry of a
partition.

Two sources, the same records: Apache Kafka's reader (``oracle dump --hex``, kafka-clients' ``FileRecords``, which
the tests use and the rehearsal prefers), and this project's own reader (``migrate.format``, for a host without
Java; ``verify`` and the tests hold it to the oracle on every fixture).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

from migrate.consumers.records import RecordFacts
from migrate.errors import LocatedError
from migrate.format import batch as v2
from migrate.format.entries import iter_records
from migrate.kafka.layout import list_segments
from migrate.kafka.names import parse_partition_dir_name
from migrate.segment.reader import read_file

Expected = dict[tuple[str, int], dict[int, RecordFacts]]
ORACLE_CHUNK = 200  # partition dirs per oracle call (ARG_MAX)


class ReaderFailed(Exception):
    """The reference reader could not read the log dir (the message says why)."""


def _key(partition_dir: Path) -> tuple[str, int]:
    parsed = parse_partition_dir_name(partition_dir.name)
    if parsed is None:
        raise ReaderFailed(f"{partition_dir}: not a topic-partition directory")
    return parsed.topic, parsed.partition


def expected_from_oracle(oracle: str | Path, partition_dirs: Iterable[Path]) -> Expected:
    """Apache Kafka's reader of each partition dir (``oracle dump --hex``)."""
    dirs = sorted(partition_dirs)
    out: Expected = {_key(d): {} for d in dirs}
    by_name = {d.name: _key(d) for d in dirs}
    for i in range(0, len(dirs), ORACLE_CHUNK):
        chunk = dirs[i : i + ORACLE_CHUNK]
        # one file per partition dir: its *.log in name order (20-digit names: offset order)
        files = [str(s.path) for d in chunk for s in list_segments(d)[0] if s.size]
        if not files:
            continue
        proc = subprocess.Popen([str(oracle), "dump", "--hex", *files], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        current: dict[int, RecordFacts] | None = None
        batch: dict[str, object] = {}
        stopped: set[tuple[str, int]] = set()
        key: tuple[str, int] = ("", -1)
        for line in proc.stdout:
            d = json.loads(line)
            kind = d["type"]
            if kind == "file":
                key = by_name[Path(d["path"]).parent.name]
                current = None if key in stopped else out[key]
            elif kind in ("trailing", "error"):
                stopped.add(key)  # Kafka's reader stops at the first entry it cannot read, in every later file too
                current = None
            elif kind == "batch":
                batch = d
                if not d["valid"]:
                    stopped.add(key)
                    current = None
            elif kind == "record" and current is not None and not batch.get("isControl") and d["valid"]:
                headers = tuple((h[0], None if h[2] is None else bytes.fromhex(h[2])) for h in d["headers"])
                current[int(d["offset"])] = RecordFacts.of(
                    None if d["keyNull"] else bytes.fromhex(d["key_hex"]),
                    None if d["valueNull"] else bytes.fromhex(d["value_hex"]),
                    headers,
                    int(d["timestamp"]),
                    str(batch.get("compression", "")),
                )
        if proc.wait() not in (0, 1):
            raise ReaderFailed(f"the oracle failed (exit {proc.returncode}) reading {chunk[0]} and the rest")
    return out


def expected_from_reader(partition_dirs: Iterable[Path]) -> Expected:
    """This project's reader of each partition dir (``migrate.format``)."""
    out: Expected = {}
    for d in sorted(partition_dirs):
        records: dict[int, RecordFacts] = {}
        out[_key(d)] = records
        try:
            for segment in list_segments(d)[0]:
                if not segment.size:
                    continue
                for chunk in read_file(segment.path):
                    for item in chunk.entries.items:
                        if isinstance(item, v2.V2Batch) and item.is_control:
                            continue
                        codec = item.compression.label
                        for r in iter_records([item]):
                            records[r.offset] = RecordFacts.of(r.key, r.value, r.headers, r.timestamp, codec)
        except LocatedError:
            continue  # damage: Kafka's reader stops there too, and so does this partition's reference
    return out
