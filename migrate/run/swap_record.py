"""A partition's swap record: on disk beside the backups, what its swap renames, so that the files alone say where it
stands.

The state database is a record of the files, not their truth: it can lose its last commits (its ``-wal`` gone after a
crash, a backup restore, a disk that lied about fsync), be truncated or be deleted. So before the first rename of a
partition, its swap record ``<partition>/.kafka-log-migrate-<plan id>/swap.json`` holds, for every file the swap
replaces, the identity of the original and of the verified output (inode, size, mtime, and a digest of the output's
first and last bytes). It is durable before any rename (the batch's records, then one syncfs, then the renames) and
removed only after the partition is wholly original again (rollback) or its originals are deleted (finalize). With
it and the live files, every partition is provably one of:

- wholly original: every live file is the planned source (no record, or a record whose renames were all undone);
- wholly converted: every live file is the verified output named in the record;
- mixed: some of each (a swap or a rollback stopped half way): the fence stays up, execute or rollback finishes it;
- changed: some live file is neither (a broker wrote to it), which no recovery overwrites without ``--force``.

A record that cannot be read is never guessed at: where the live files are the planned sources it is only a swap
that never began (the record is written before any rename); otherwise the verb stops and names it.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from migrate.codec import from_json, to_json
from migrate.errors import MigrateError, ModelError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import PartitionPlan
from migrate.model.run_state import FileStat, SegmentResult
from migrate.run import faults
from migrate.run.state import SwapFile
from migrate.run.workspace import work_dir

RECORD_FILE = "swap.json"


class UnreadableSwapRecordError(MigrateError):
    """A swap record exists and cannot be read: the partition's state is not guessed."""


@dataclass(frozen=True)
class SegmentSwap:
    base_offset: int
    files: tuple[SwapFile, ...]
    result: SegmentResult  # the conversion as verified: what a rebuilt state needs to verify and report it
    log_edges: str  # migrate.segment.identity.edges_digest of the output .log: a same-size rewrite of it shows


@dataclass(frozen=True)
class PartitionSwapRecord:
    plan_id: str
    partition: str
    segments: tuple[SegmentSwap, ...]

    def files(self) -> Iterable[tuple[int, SwapFile]]:
        for s in self.segments:
            for f in s.files:
                yield s.base_offset, f


def record_path(partition_dir: str | Path, plan_id: str) -> Path:
    return work_dir(partition_dir, plan_id) / RECORD_FILE


def write_records(records: list[tuple[str, PartitionSwapRecord]]) -> None:
    """Each partition's record, written whole and renamed into place; not yet durable: the caller syncs the
    filesystem once for the whole batch before its first rename of a live file (one syncfs, not one fsync per
    partition: at 10^4 partitions per log dir every per-partition sync counts)."""
    faults.point("before:swap-record")
    for partition_dir, record in records:
        target = record_path(partition_dir, record.plan_id)
        partial = target.with_name(target.name + ".partial")
        with open(partial, "w") as f:
            f.write(json.dumps(to_json(record), separators=(",", ":")))
        os.replace(partial, target)
    faults.point("after:swap-record")


def read_record(partition_dir: str | Path, plan_id: str) -> PartitionSwapRecord | None:
    """The partition's record, None where no swap began; UnreadableSwapRecordError where it is torn or foreign."""
    path = record_path(partition_dir, plan_id)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableSwapRecordError(f"{path}: cannot be read ({exc})") from exc
    try:
        record = from_json(PartitionSwapRecord, json.loads(text))
    except (ValueError, ModelError) as exc:
        raise UnreadableSwapRecordError(f"{path}: not a swap record ({exc})") from exc
    if record.plan_id != plan_id:
        raise UnreadableSwapRecordError(f"{path}: the record of plan {record.plan_id}, not of plan {plan_id}")
    return record


def remove_record(partition_dir: str | Path, plan_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(partition_dir, plan_id))


# --- what the files say ----------------------------------------------------------------------------------------


class FileTruth(str, enum.Enum):
    """Where a partition stands by its live files alone."""

    ORIGINAL = "original"
    CONVERTED = "converted"
    MIXED = "mixed"
    CHANGED = "changed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PartitionTruth:
    partition: str
    truth: FileTruth
    record: PartitionSwapRecord | None
    changed: tuple[str, ...] = ()  # "<path>: <what it is now>" for each live file that is neither ours nor original


def _stat(path: str) -> FileStat | None:
    try:
        return FileStat.of(os.stat(path))
    except FileNotFoundError:
        return None


def _describe(st: FileStat | None) -> str:
    return "missing" if st is None else f"inode {st.inode}, {st.size} bytes, mtime_ns {st.mtime_ns}"


def partition_truth(part: PartitionPlan, plan_id: str, fallback: PartitionSwapRecord | None = None) -> PartitionTruth:
    """Classify one planned partition from its files: its swap record if any (``fallback``: the same facts from the
    state database, for a run that began before records were written), else the planned sources."""
    try:
        record = read_record(part.dir, plan_id) or fallback
    except UnreadableSwapRecordError:
        if _sources_untouched(part):
            return PartitionTruth(part.name, FileTruth.ORIGINAL, None)  # written before any rename: none happened
        raise
    if record is None:
        changed = tuple(
            f"{os.path.join(part.dir, s.file)}: {_describe(st)}, planned {_describe(planned)}"
            for s in part.segments
            if (st := _stat(os.path.join(part.dir, s.file))) != (planned := FileStat(s.inode, s.size, s.mtime_ns))
        )
        return PartitionTruth(part.name, FileTruth.CHANGED if changed else FileTruth.ORIGINAL, None, changed)
    original = converted = 0
    changed_files = []
    for base, f in record.files():
        # a split source's later outputs name their own segment; their original is "missing"
        live = os.path.join(part.dir, segment_name(base if f.base_offset is None else f.base_offset, f.suffix))
        current = _stat(live)
        if current == f.output:
            converted += 1
        elif current == f.original:
            original += 1
        else:
            changed_files.append(
                f"{live}: {_describe(current)}, neither the original ({_describe(f.original)}) nor the verified "
                f"output ({_describe(f.output)})"
            )
    if changed_files:
        truth = FileTruth.CHANGED
    elif original and converted:
        truth = FileTruth.MIXED
    else:
        truth = FileTruth.CONVERTED if converted else FileTruth.ORIGINAL
    return PartitionTruth(part.name, truth, record, tuple(changed_files))


def _sources_untouched(part: PartitionPlan) -> bool:
    return all(_stat(os.path.join(part.dir, s.file)) == FileStat(s.inode, s.size, s.mtime_ns) for s in part.segments)
