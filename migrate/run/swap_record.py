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
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from migrate.codec import from_json
from migrate.errors import MigrateError, ModelError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import PartitionPlan
from migrate.model.run_state import FileStat, SegmentResult
from migrate.run import faults
from migrate.run.state import SwapFile, swap_files_from_json, swap_files_json
from migrate.run.workspace import WORK_DIR_NAME, work_dir

RECORD_FILE = "swap.json"


class UnreadableSwapRecordError(MigrateError):
    """A swap record exists and cannot be read: the partition's state is not guessed."""


@dataclass(frozen=True)
class SegmentSwap:
    base_offset: int
    files: tuple[SwapFile, ...]
    log_edges: str  # migrate.segment.identity.edges_digest of the output .log: a same-size rewrite of it shows
    # the conversion as verified (what a rebuilt state needs to verify and report it), as JSON data: decoded by
    # ``result`` only where it is needed, since classifying a partition by its files needs ``files`` alone
    result_data: Any = field(repr=False, compare=False)

    @cached_property
    def result(self) -> SegmentResult:
        if self.result_data is None:  # a bug: the record was read with ``results=False``
            raise MigrateError(f"the swap record of segment {self.base_offset} was read without its results")
        return from_json(SegmentResult, self.result_data, f"swap record of segment {self.base_offset}: result")

    @property
    def has_result(self) -> bool:
        """False where the record was read with ``results=False``."""
        return self.result_data is not None or "result" in self.__dict__

    @classmethod
    def of(cls, base_offset: int, files: tuple[SwapFile, ...], result: SegmentResult, log_edges: str) -> SegmentSwap:
        swap = cls(base_offset, files, log_edges, None)
        swap.__dict__["result"] = result  # already decoded: the cached_property's slot
        return swap


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


def record_file(partition_dir: str, plan_id: str) -> str:
    """``record_path`` as a plain string: asked once per partition by every reconciliation."""
    return os.path.join(partition_dir, f"{WORK_DIR_NAME}-{plan_id}", RECORD_FILE)


def record_text(plan_id: str, partition: str, segments: Iterable[tuple[int, tuple[SwapFile, ...], str, str]]) -> str:
    """A partition's record as written: ``segments`` are (base offset, files, the result's JSON text as the state
    database holds it, log edges). The text is what ``json.dumps(to_json(record))`` of the record gives, spliced
    rather than encoded again: the swap writes 10^6 of them."""
    dumps = json.dumps
    items = ",".join(
        f'{{"base_offset":{base},"files":{_dumps(swap_files_json(files))},"result":{result},"log_edges":{dumps(edges)}}}'
        for base, files, result, edges in segments
    )
    return f'{{"plan_id":{dumps(plan_id)},"partition":{dumps(partition)},"segments":[{items}]}}'


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


def write_records(records: list[tuple[str, str, str]]) -> None:
    """Each partition's record ((partition dir, plan id, ``record_text``)), written whole and renamed into place;
    not yet durable: the caller syncs the filesystem once for the whole batch before its first rename of a live
    file (one syncfs, not one fsync per partition: at 10^4 partitions per log dir every per-partition sync counts)."""
    faults.point("before:swap-record")
    for partition_dir, plan_id, text in records:
        target = record_file(partition_dir, plan_id)
        partial = target + ".partial"
        with open(partial, "w") as f:
            f.write(text)
        os.replace(partial, target)
    faults.point("after:swap-record")


_RECORD_KEYS = frozenset(("plan_id", "partition", "segments"))
_SEGMENT_KEYS = frozenset(("base_offset", "files", "result", "log_edges"))


def _decode(data: Any, where: str, results: bool = True) -> PartitionSwapRecord:
    """As strict as ``from_json(PartitionSwapRecord, data)`` on everything but the results, which ``result`` checks
    when it decodes one; ``results=False`` keeps none of them (what the files say needs none, and a reconciliation
    keeps every partition's truth: their results would be most of its memory)."""
    if type(data) is not dict or data.keys() != _RECORD_KEYS:
        raise ModelError(f"{where}: expected an object of plan_id, partition and segments")
    plan_id, partition, segments = data["plan_id"], data["partition"], data["segments"]
    if type(plan_id) is not str or type(partition) is not str or type(segments) is not list:
        raise ModelError(f"{where}: plan_id and partition must be strings and segments a list")
    out = []
    for i, s in enumerate(segments):
        at = f"{where}.segments[{i}]"
        if type(s) is not dict or s.keys() != _SEGMENT_KEYS:
            raise ModelError(f"{at}: expected an object of {', '.join(sorted(_SEGMENT_KEYS))}")
        base, edges, result = s["base_offset"], s["log_edges"], s["result"]
        if type(base) is not int or type(edges) is not str or type(result) is not dict:
            raise ModelError(f"{at}: base_offset must be an integer, log_edges a string and result an object")
        out.append(
            SegmentSwap(base, swap_files_from_json(s["files"], f"{at}.files"), edges, result if results else None)
        )
    return PartitionSwapRecord(plan_id, partition, tuple(out))


def read_record(partition_dir: str | Path, plan_id: str, results: bool = True) -> PartitionSwapRecord | None:
    """The partition's record, None where no swap began; UnreadableSwapRecordError where it is torn or foreign.
    ``results=False``: without the segments' conversion results (``SegmentSwap.result`` then refuses)."""
    path = record_file(str(partition_dir), plan_id)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableSwapRecordError(f"{path}: cannot be read ({exc})") from exc
    try:
        record = _decode(json.loads(text), "swap record", results)
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
        record = read_record(part.dir, plan_id, results=False) or fallback
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
