"""The record of one partition's swap: the one grammar, its one writer and its one reader.

    <new directory>/.kafka-log-migrate-<plan id>/exchange.json
    {"version": 1, "plan_id": str, "partition": str, "method": "exchange" | "renames",
     "original": DirIdentity,            the directory at the live path before the swap (device, inode, mode,
                                         owner, mtime: what a rollback must find again and put back)
     "new": DirIdentity,                 the new directory (device and inode)
     "linked": [LinkedFile, ...],        the original's files the new directory holds as they are (hard links)
     "segments": [{"base_offset": int, "result": SegmentResult}, ...]}
                                         the converted segments: their outputs' identities and edges, their
                                         sources' identities, the digests a verify checks them against

The state database is a record of the files, not their truth: it can lose its last commits, be restored from an
older copy, be truncated or deleted. This file is written into the new directory before it moves, durable before the
first rename, and travels with that directory, so the directories alone say where a partition stands and what its
swap did: the state database is rebuilt from it. It is removed with the new directory's work dir at finalize, or
with the new directory itself at rollback. Each result is spliced in as the state database stores it (the swap
writes 10^6 of them; decoding and encoding again would cost more than the swap), and read back by ``read_record``
with the codec's strict decoder; ``moves.write_record_in`` writes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from migrate.codec import from_json, to_json
from migrate.errors import MigrateError, ModelError
from migrate.model.run_state import DirIdentity, ExchangeMethod, SegmentResult

RECORD_VERSION = 1


@dataclass(frozen=True)
class LinkedFile:
    """A file of the original directory that the new one holds as it is: the same inode under the same name."""

    name: str
    inode: int
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class ConvertedSegment:
    base_offset: int
    result: SegmentResult


@dataclass(frozen=True)
class ExchangeRecord:
    version: int
    plan_id: str
    partition: str
    method: ExchangeMethod
    original: DirIdentity
    new: DirIdentity
    linked: tuple[LinkedFile, ...]
    segments: tuple[ConvertedSegment, ...]


class UnreadableRecordError(MigrateError):
    """A swap record exists and cannot be read: where the partition stands is not guessed."""


def record_text(
    plan_id: str,
    partition: str,
    method: ExchangeMethod,
    original: DirIdentity,
    new: DirIdentity,
    linked: list[LinkedFile],
    segments: list[tuple[int, str]],
) -> str:
    """The record as written: ``segments`` are (base offset, the result's JSON text as the state database holds
    it), spliced in as they are."""
    head = {
        "version": RECORD_VERSION,
        "plan_id": plan_id,
        "partition": partition,
        "method": method.value,
        "original": to_json(original),
        "new": to_json(new),
        "linked": [to_json(f) for f in linked],
    }
    items = ",".join(f'{{"base_offset":{base},"result":{result}}}' for base, result in segments)
    return json.dumps(head, separators=(",", ":"))[:-1] + f',"segments":[{items}]}}'


def read_record(path: str, plan_id: str) -> ExchangeRecord | None:
    """The record at ``path``; None where there is none; UnreadableRecordError where it is torn or foreign."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise UnreadableRecordError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        record = from_json(ExchangeRecord, json.loads(data), "swap record")
    except (ValueError, ModelError) as exc:
        raise UnreadableRecordError(f"{path}: not a swap record of this tool ({exc})") from exc
    if record.version != RECORD_VERSION or record.plan_id != plan_id:
        raise UnreadableRecordError(
            f"{path}: the swap record of plan {record.plan_id} (version {record.version}), not of plan {plan_id}"
        )
    return record
