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
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from migrate.codec import from_json, loads_text
from migrate.errors import MigrateError, ModelError
from migrate.model.plan_tree import PartitionPlan
from migrate.model.run_state import SegmentResult
from migrate.run import faults
from migrate.run.swap_json import SwapFile, swap_files_from_json, swap_text
from migrate.run.swap_keys import StatKey, SwapFileKey, stat_key, swap_file_keys, swap_file_keys_of
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
    database holds it, log edges)."""
    return record_text_of(plan_id, partition, ((b, swap_text(f), r, e) for b, f, r, e in segments))


def record_text_of(plan_id: str, partition: str, segments: Iterable[tuple[int, str, str, str]]) -> str:
    """``record_text`` with each segment's files as the state database holds them (``swap_text``). The text is what
    ``json.dumps(to_json(record))`` of the record gives (up to how its results spell non-ASCII text and floats:
    ``migrate.codec.dumps_compact``), spliced rather than encoded again: the swap writes 10^6 of them."""
    dumps = json.dumps
    items = ",".join(
        f'{{"base_offset":{base},"files":{files},"result":{result},"log_edges":{dumps(edges)}}}'
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


@dataclass(frozen=True)
class RecordData:
    """A swap record as read and checked: each segment's files as StatKeys (what classifying by the files needs)
    beside their JSON data; the PartitionSwapRecord (a SwapFile and two FileStats per file) is built on demand."""

    plan_id: str
    partition: str
    # (base offset, files as StatKeys, files as JSON data or text, log edges, result as JSON data or None); the
    # text (the database's swap column) is one object where its data are a dozen, at 10^6 segments in a status.
    # StatKeys None: not decoded, the partition was judged from the texts (``migrate.run.swap_status``); only
    # ``partition_truth`` reads them, of the data it reads itself
    segments: tuple[tuple[int, tuple[SwapFileKey, ...] | None, Any, str, Any], ...]
    # read as byte for byte the state database's rows (``_as_known``): its files are the database's swap files
    known: bool = False
    # each segment's base offset and log edges only (``PartitionTruth.edges_only``): no record can be built
    edges_only: bool = False

    def record(self) -> PartitionSwapRecord:
        if self.edges_only:
            raise ModelError(f"{self.partition}: a truth kept with its log edges only has no swap record to give")
        return PartitionSwapRecord(
            self.plan_id,
            self.partition,
            tuple(
                SegmentSwap(
                    base,
                    swap_files_from_json(json.loads(files) if type(files) is str else files, "swap record"),
                    edges,
                    result,
                )
                for base, _, files, edges, result in self.segments
            ),
        )

    @classmethod
    def of(cls, record: PartitionSwapRecord) -> RecordData:
        """A record already decoded (the database's copy of a swap, for runs from before swap records)."""
        data = cls(
            record.plan_id,
            record.partition,
            tuple(
                (
                    s.base_offset,
                    tuple((f.suffix, f.base_offset, stat_key(f.original), stat_key(f.output)) for f in s.files),
                    None,
                    s.log_edges,
                    None,
                )
                for s in record.segments
            ),
        )
        data.__dict__["_record"] = record
        return data


def _decode(data: Any, where: str, results: bool = True) -> RecordData:
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
        files = s["files"]
        out.append((base, swap_file_keys(files, f"{at}.files"), files, edges, result if results else None))
    return RecordData(plan_id, partition, tuple(out))


_EDGES_RE = re.compile(r"[0-9a-f]{64}")


def _as_known(
    text: str, plan_id: str, partition: str, known: list[tuple[int, str, str | None]], results: bool
) -> RecordData | None:
    """The record ``text`` where it is, byte for byte, the record the swap writes from the state database's rows
    ``known`` ((base, swap JSON, result JSON), ``StateStore.swap_texts``): ``record_text`` splices exactly those
    texts, so such a record holds exactly that data, and only the database's small swap texts are decoded, not the
    results that are most of the record. None where it is anything else: the caller then decodes the whole text."""
    dumps = json.dumps
    head = f'{{"plan_id":{dumps(plan_id)},"partition":{dumps(partition)},"segments":['
    if not known or not text.startswith(head) or not text.endswith("]}"):
        return None
    pos = len(head)
    out = []
    starts = text.startswith
    for i, (base, swap, result) in enumerate(known):
        if result is None or not (result.startswith("{") and result.endswith("}")):
            return None
        # compared in place, piece by piece: no copy of the result text, the most of each segment's bytes
        item = f'{"," if i else ""}{{"base_offset":{base},"files":'
        if not starts(item, pos):
            return None
        pos += len(item)
        if not starts(swap, pos) or not starts(',"result":', pos + len(swap)):
            return None
        pos += len(swap) + 10
        if not starts(result, pos) or not starts(',"log_edges":"', pos + len(result)):
            return None
        pos += len(result) + 14
        edges = text[pos : pos + 64]
        if not _EDGES_RE.fullmatch(edges) or not starts('"}', pos + 64):
            return None
        pos += 66
        try:
            keys = swap_file_keys_of(swap, f"swap record.segments[{i}].files")
            data = loads_text(result) if results else None
        except (ValueError, ModelError):
            return None  # the whole text is decoded, and refused as it must be
        out.append((base, keys, swap, edges, data))
    if pos + 2 != len(text):
        return None
    return RecordData(plan_id, partition, tuple(out), known=True)


def read_record(partition_dir: str | Path, plan_id: str, results: bool = True) -> PartitionSwapRecord | None:
    """The partition's record, None where no swap began; UnreadableSwapRecordError where it is torn or foreign.
    ``results=False``: without the segments' conversion results (``SegmentSwap.result`` then refuses)."""
    data = read_record_data(partition_dir, plan_id, results)
    return None if data is None else data.record()


def read_record_data(
    partition_dir: str | Path,
    plan_id: str,
    results: bool = True,
    known: list[tuple[int, str, str | None]] | None = None,
    partition: str | None = None,
) -> RecordData | None:
    """``read_record`` without building its SwapFiles; ``known`` and ``partition``: the state database's rows of the
    partition (``_as_known``), which spare decoding the results where the record is exactly what they say."""
    path = record_file(str(partition_dir), plan_id)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnreadableSwapRecordError(f"{path}: cannot be read ({exc})") from exc
    if known and partition is not None and (fast := _as_known(text, plan_id, partition, known, results)):
        return fast
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
    data: RecordData | None  # the swap record the truth was judged by, if any
    changed: tuple[str, ...] = ()  # "<path>: <what it is now>" for each live file that is neither ours nor original

    @property
    def has_record(self) -> bool:
        return self.data is not None

    @property
    def as_database_says(self) -> bool:
        """Judged by a record that is the state database's swap files exactly, and no file was changed: each of
        them is the original or the output the database names (what ``SegmentFiles.change`` asks of each)."""
        return self.data is not None and self.data.known and self.truth != FileTruth.CHANGED

    @property
    def record(self) -> PartitionSwapRecord | None:
        if self.data is None:
            return None
        cached = self.data.__dict__.get("_record")
        if cached is None:
            cached = self.data.__dict__["_record"] = self.data.record()
        return cached

    def log_edges(self) -> list[tuple[int, str]]:
        """(base offset, log edges) of every segment of the record (empty edges: a database's copy)."""
        return [] if self.data is None else [(s[0], s[3]) for s in self.data.segments]

    def edges_only(self) -> PartitionTruth:
        """The truth as a verb keeps it for later (finalize: the verdict, whether a record judged it, and each
        segment's log edges), without the files' texts and keys: about 0.2 KB a segment kept instead of 0.6."""
        data = self.data
        if data is None or data.edges_only:
            return self
        segments = tuple((s[0], None, None, s[3], None) for s in data.segments)
        return replace(self, data=RecordData(data.plan_id, data.partition, segments, data.known, edges_only=True))


def _key(path: str) -> StatKey | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _describe(st: StatKey | None) -> str:
    return "missing" if st is None else f"inode {st[0]}, {st[1]} bytes, mtime_ns {st[2]}"


def partition_truth(
    part: PartitionPlan,
    plan_id: str,
    fallback: PartitionSwapRecord | None = None,
    known: list[tuple[int, str, str | None]] | None = None,
) -> PartitionTruth:
    """Classify one planned partition from its files: its swap record if any (``fallback``: the same facts from the
    state database, for a run that began before records were written; ``known``: the database's rows of its swap,
    ``read_record_data``), else the planned sources."""
    try:
        data = read_record_data(part.dir, plan_id, results=False, known=known, partition=part.name)
    except UnreadableSwapRecordError:
        if _sources_untouched(part):
            return PartitionTruth(part.name, FileTruth.ORIGINAL, None)  # written before any rename: none happened
        raise
    if data is None and fallback is not None:
        data = RecordData.of(fallback)
    prefix = os.path.join(part.dir, "")
    if data is None:
        changed = tuple(
            f"{prefix}{s.file}: {_describe(st)}, planned {_describe(planned)}"
            for s in part.segments
            if (st := _key(prefix + s.file)) != (planned := (s.inode, s.size, s.mtime_ns))
        )
        return PartitionTruth(part.name, FileTruth.CHANGED if changed else FileTruth.ORIGINAL, None, changed)
    original = converted = 0
    changed_files = []
    for base, files, *_ in data.segments:
        for suffix, at, before, output in files:
            # a split source's later outputs name their own segment; their original is "missing"
            live = f"{prefix}{base if at is None else at:020d}{suffix}"
            current = _key(live)
            if current == output:
                converted += 1
            elif current == before:
                original += 1
            else:
                changed_files.append(
                    f"{live}: {_describe(current)}, neither the original ({_describe(before)}) nor the verified "
                    f"output ({_describe(output)})"
                )
    if changed_files:
        truth = FileTruth.CHANGED
    elif original and converted:
        truth = FileTruth.MIXED
    else:
        truth = FileTruth.CONVERTED if converted else FileTruth.ORIGINAL
    return PartitionTruth(part.name, truth, data, tuple(changed_files))


def _sources_untouched(part: PartitionPlan) -> bool:
    prefix = os.path.join(part.dir, "")
    return all(_key(prefix + s.file) == (s.inode, s.size, s.mtime_ns) for s in part.segments)
