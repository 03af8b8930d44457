"""The plan's columnar form: a plan of a million segments as one Parquet file, loaded without a million records.

The JSON form (``plan_tree.dump_plan_json``) spends about 350 bytes and a decoded record per segment; a broker of
10^6 segments would write a 350 MB plan that loads in minutes into gigabytes. This form keeps the plan's head as
JSON in the Parquet file's metadata and one row per planned segment in columns, and a loaded plan is the same
``Plan`` tree whose ``PartitionPlan.segments`` and ``TaskPlan.segments`` are lazy sequences over those columns: a
``SegmentPlan`` exists only while a stage looks at it.

    <plan>.parquet
      key-value metadata "kafka-log-migrate.plan": PlanHead as JSON (the codec's strict form): version, plan_id,
        tool, created, planned_on, options, the log dirs without their partitions, the range tasks whole, every
        task's bytes, estimates, warnings, each compacted partition's CompactionPlan, the segment table's digest
      one row per planned segment, in the plan's order (log dir, partition, base offset):
        log_dir                string, dictionary   LogDirPlan.key
        partition              string, dictionary   PartitionPlan.name
        topic                  string, dictionary   PartitionPlan.topic
        partition_id           int32                PartitionPlan.partition
        dir_mtime_ns           int64                PartitionPlan.dir_mtime_ns   (repeated per partition: run-length
        leader_epoch           int32                PartitionPlan.leader_epoch    encoded on disk, nearly free)
        partition_bytes        int64                PartitionPlan.bytes
        partition_output_bytes int64                PartitionPlan.estimated_output_bytes
        base_offset            int64                SegmentPlan.base_offset
        size                   int64                SegmentPlan.size
        mtime_ns               int64                SegmentPlan.mtime_ns
        inode                  uint64               SegmentPlan.inode
        entries_v0..v2         int64                SegmentPlan.entries_by_magic[0..2], -1 where absent
        output_bytes           int64                SegmentPlan.estimated_output_bytes
        task                   int32                the number of the task holding it (t00042 -> 42); -1: ranges
        staged                 int8                 SegmentPlan.staged: -1 None, 0 false, 1 true
        staged_record          uint64               SegmentPlan.staged_record as a number, 0 where None
        extra                  string, nullable     JSON of tail_drop, range_cuts, split where any is set

A partition's ``dir`` is not stored: ``LogDirPlan.check_paths`` requires it to be ``<log dir>/<name>``.

The plan's id in this form hashes the head (without plan_id, created and free space, like the JSON form)
and, through ``segment_digest``, every column's values: an edited row or head is refused as in the JSON form.
``Plan.form`` says which scheme made the id, so the JSON dump of a columnar plan (for review and diff) keeps its id.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

import numpy as np

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_pack import pack_columns, unpack_columns
from migrate.model.plan_tree import (
    CompactionPlan,
    ConvertOptions,
    Estimates,
    LogDirPlan,
    PartitionPlan,
    Plan,
    PlanForm,
    RangeCut,
    SegmentPlan,
    SegmentRef,
    SegmentSplit,
    TailDrop,
    TaskPlan,
    content_id,
)
from migrate.model.records import fast_new

HEAD_KEY = b"kafka-log-migrate.plan"
PARQUET_MAGIC = b"PAR1"
MAGICS = (0, 1, 2)


# --- the head ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionCompaction:
    log_dir: str
    partition: str
    compaction: CompactionPlan


@dataclass(frozen=True)
class PlanHead:
    """Everything of a columnar plan but its segment rows."""

    version: int
    plan_id: str
    tool: str
    created: str
    planned_on: str
    options: ConvertOptions
    log_dirs: tuple[LogDirPlan, ...]  # each with partitions=()
    range_tasks: tuple[TaskPlan, ...]
    task_bytes: tuple[int, ...]  # every task's bytes, by task number
    estimates: Estimates
    warnings: tuple[str, ...]
    compactions: tuple[PartitionCompaction, ...]
    segment_digest: str
    segments: int


@dataclass(frozen=True)
class SegmentExtra:
    """A segment's rare fields, kept as JSON in the ``extra`` column."""

    tail_drop: TailDrop | None = None
    range_cuts: tuple[RangeCut, ...] | None = None
    split: SegmentSplit | None = None


# --- the columns ---------------------------------------------------------------------------------------------

INT_COLUMNS: tuple[tuple[str, Any], ...] = (
    ("partition_id", np.int32),
    ("dir_mtime_ns", np.int64),
    ("leader_epoch", np.int32),
    ("partition_bytes", np.int64),
    ("partition_output_bytes", np.int64),
    ("base_offset", np.int64),
    ("size", np.int64),
    ("mtime_ns", np.int64),
    ("inode", np.uint64),
    ("entries_v0", np.int64),
    ("entries_v1", np.int64),
    ("entries_v2", np.int64),
    ("output_bytes", np.int64),
    ("task", np.int32),
    ("staged", np.int8),
    ("staged_record", np.uint64),
)
NAME_COLUMNS = ("log_dir", "partition", "topic")


@dataclass(eq=False)
class SegmentColumns:
    """Every planned segment of a plan as columns: name columns as (dictionary, int32 codes), the rest numpy."""

    names: dict[str, tuple[list[str], np.ndarray]]
    ints: dict[str, np.ndarray]
    extra: dict[int, str] = field(default_factory=dict)  # row -> SegmentExtra as JSON, where a row has any
    parquet: bytes | None = None  # these columns as Parquet (the plan file they were read from), once made
    packed: bytes | None = None  # these columns as ``plan_pack`` sends them to a worker, once made

    def __reduce__(self) -> tuple[Any, ...]:
        # a Dask scatter sends the plan to every worker: packed (about 9 bytes a segment), not as numpy arrays (about
        # 100); the driver checked them against the plan's id, a worker only unpacks them. Not as Parquet: decoding
        # that would import pyarrow into every worker, 31 MB of each worker's memory for this alone
        if self.packed is None:
            self.packed = pack_columns(self.names, self.ints, self.extra, INT_COLUMNS)
        return (_columns_from_packed, (self.packed,))

    def __len__(self) -> int:
        return len(self.ints["base_offset"])

    def name(self, column: str, row: int) -> str:
        values, codes = self.names[column]
        return values[codes[row]]

    def segment(self, row: int) -> SegmentPlan:
        c = self.ints
        counts = (int(c["entries_v0"][row]), int(c["entries_v1"][row]), int(c["entries_v2"][row]))
        staged = int(c["staged"][row])
        record = int(c["staged_record"][row])
        extra = SegmentExtra()
        if row in self.extra:
            extra = from_json(SegmentExtra, json.loads(self.extra[row]), f"plan segment row {row}")
        return SegmentPlan(
            base_offset=int(c["base_offset"][row]),
            size=int(c["size"][row]),
            mtime_ns=int(c["mtime_ns"][row]),
            inode=int(c["inode"][row]),
            entries_by_magic={m: n for m, n in zip(MAGICS, counts, strict=True) if n >= 0},
            estimated_output_bytes=int(c["output_bytes"][row]),
            tail_drop=extra.tail_drop,
            range_cuts=extra.range_cuts,
            staged=None if staged < 0 else bool(staged),
            staged_record=f"{record:016x}" if record else None,
            split=extra.split,
        )

    @cached_property
    def digest(self) -> str:
        """sha256 over every column's values in schema order: what the plan's id binds."""
        h = hashlib.sha256()
        for column in NAME_COLUMNS:
            values, codes = self.names[column]
            h.update(column.encode() + b"\0" + "\0".join(values).encode() + b"\0")
            h.update(np.ascontiguousarray(codes, dtype="<i4").tobytes())
        for column, kind in INT_COLUMNS:
            h.update(column.encode() + b"\0")
            h.update(np.ascontiguousarray(self.ints[column], dtype=np.dtype(kind).newbyteorder("<")).tobytes())
        for row in sorted(self.extra):
            h.update(f"extra {row} {self.extra[row]}\0".encode())
        return h.hexdigest()

    @classmethod
    def of(cls, plan: Plan) -> SegmentColumns:
        """The columns of a plan built in memory (``build_plan``), in the plan's order."""
        task_of: dict[tuple[str, str, int], int] = {}
        for t in plan.tasks:
            if t.byte_range is None:
                number = task_number(t.id)
                for ref in t.segments:
                    task_of[(t.log_dir, ref.partition, ref.base_offset)] = number
        builder = ColumnBuilder()
        for d in plan.log_dirs:
            for p in d.partitions:
                for s in p.segments:
                    builder.add(d.key, p, s, task_of.get((d.key, p.name, s.base_offset), -1))
        return builder.finish()


_TYPECODES = {np.int8: "b", np.int32: "i", np.int64: "q", np.uint64: "Q"}


class ColumnBuilder:
    """Segments appended as they are planned, into compact arrays (8 bytes a value, not a record a segment): the
    plan of a million segments holds its columns, not a million ``SegmentPlan``s. ``columns`` is usable while it
    grows (its arrays index like the numpy ones ``finish`` turns them into, without a copy)."""

    def __init__(self) -> None:
        self.lookup: dict[str, dict[str, int]] = {c: {} for c in NAME_COLUMNS}
        self.columns = SegmentColumns(
            names={c: ([], array.array("i")) for c in NAME_COLUMNS},  # type: ignore[misc]
            ints={c: array.array(_TYPECODES[kind]) for c, kind in INT_COLUMNS},  # type: ignore[misc]
        )

    def _code(self, column: str, value: str) -> None:
        table = self.lookup[column]
        code = table.get(value)
        values, codes = self.columns.names[column]
        if code is None:
            code = table[value] = len(table)
            values.append(value)
        codes.append(code)  # type: ignore[attr-defined]

    def add(self, log_dir: str, p: PartitionPlan, s: SegmentPlan, task: int = -1) -> None:
        unknown = set(s.entries_by_magic) - set(MAGICS)
        if unknown:
            raise ModelError(f"segment {p.name}/{s.base_offset}: entries of magic {sorted(unknown)} cannot be planned")
        ints = self.columns.ints
        row = len(ints["base_offset"])
        self._code("log_dir", log_dir)
        self._code("partition", p.name)
        self._code("topic", p.topic)
        values = (
            p.partition,
            p.dir_mtime_ns,
            p.leader_epoch,
            p.bytes,
            p.estimated_output_bytes,
            s.base_offset,
            s.size,
            s.mtime_ns,
            s.inode,
            s.entries_by_magic.get(0, -1),
            s.entries_by_magic.get(1, -1),
            s.entries_by_magic.get(2, -1),
            s.estimated_output_bytes,
            task,
            -1 if s.staged is None else int(s.staged),
            int(s.staged_record, 16) if s.staged_record else 0,
        )
        for (column, _), value in zip(INT_COLUMNS, values, strict=True):
            ints[column].append(value)  # type: ignore[attr-defined]
        if s.tail_drop is not None or s.range_cuts is not None or s.split is not None:
            extra = SegmentExtra(s.tail_drop, s.range_cuts, s.split)
            self.columns.extra[row] = json.dumps(to_json(extra), separators=(",", ":"), sort_keys=True)

    def absorb(self, log_dir: str, p: PartitionPlan) -> PartitionPlan:
        """``p`` with its segments moved into the columns (its records dropped)."""
        start = len(self.columns)
        for s in p.segments:
            self.add(log_dir, p, s)
        return replace(p, segments=SegmentRows(self.columns, range(start, len(self.columns))))

    def finish(self) -> SegmentColumns:
        """The columns as numpy arrays over the same memory; nothing may be added after."""
        c = self.columns
        for column in NAME_COLUMNS:
            values, codes = c.names[column]
            c.names[column] = (values, np.frombuffer(codes, dtype=np.int32) if len(codes) else np.zeros(0, np.int32))
        for column, kind in INT_COLUMNS:
            grown = c.ints[column]
            c.ints[column] = np.frombuffer(grown, dtype=kind) if len(grown) else np.zeros(0, dtype=kind)
        return c


def number_tasks(columns: SegmentColumns, tasks: Sequence[TaskPlan]) -> None:
    """Each row's task number, from tasks over rows of ``columns`` (range tasks keep -1)."""
    task = columns.ints["task"]
    for t in tasks:
        if t.byte_range is None and isinstance(t.segments, TaskRows):
            task[t.segments.rows] = task_number(t.id)


def task_number(task_id: str) -> int:
    if not (task_id.startswith("t") and task_id[1:].isdigit()):
        raise ModelError(f"task {task_id!r}: a columnar plan numbers its tasks t00000, t00001, ...")
    return int(task_id[1:])


def task_id(number: int) -> str:
    return f"t{number:05d}"


# --- lazy sequences over the columns -------------------------------------------------------------------------


# a run of rows (a partition's segments, a log dir's partitions) or any rows in order (a task's segments)
RowIndex = TypeVar("RowIndex", range, np.ndarray)


class _Rows(Sequence[Any], Generic[RowIndex]):
    """A read-only sequence of rows of ``SegmentColumns``, built on access; equal to any sequence of the same items."""

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: SegmentColumns, rows: RowIndex) -> None:
        self._columns = columns
        self._rows: RowIndex = rows

    def _item(self, row: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Any, ...]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self._item(int(r)) for r in self._rows[index])
        return self._item(int(self._rows[index]))

    def __iter__(self) -> Iterator[Any]:
        item = self._item
        for row in self._rows:
            yield item(int(row))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self)}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._columns, self._rows))


class SegmentRows(_Rows[range]):
    """``PartitionPlan.segments`` of a columnar plan: one partition's rows, in base offset order."""

    __slots__ = ()

    def _item(self, row: int) -> SegmentPlan:
        return self._columns.segment(row)

    @property
    def rows(self) -> range:
        return self._rows

    @property
    def columns(self) -> SegmentColumns:
        return self._columns

    def by_base(self) -> SegmentsByBase:
        return SegmentsByBase(self._columns, self._rows)

    def sizes_by_base(self) -> dict[int, int]:
        c, rows = self._columns.ints, self._rows
        return dict(zip(c["base_offset"][rows.start : rows.stop].tolist(), c["size"][rows.start : rows.stop].tolist()))

    def identities(self) -> list[tuple[int, int, int, int]]:
        c, rows = self._columns.ints, self._rows
        return list(zip(*(c[n][rows.start : rows.stop].tolist() for n in ("base_offset", "size", "mtime_ns", "inode"))))

    def unstaged_output_bytes(self) -> int:
        """The estimated output bytes of the rows not planned from pre-staging (what a run writes anew)."""
        c, rows = self._columns.ints, self._rows
        # numpy arrays, or the builder's array.array while the plan is made: both read as numpy here
        out, staged = (
            np.asarray(c["output_bytes"][rows.start : rows.stop]),
            np.asarray(c["staged"][rows.start : rows.stop]),
        )
        return int(out[staged != 1].sum())

    def staged_bases(self) -> frozenset[int]:
        c, rows = self._columns.ints, self._rows
        staged = c["staged"][rows.start : rows.stop] == 1
        return frozenset(c["base_offset"][rows.start : rows.stop][staged].tolist())


class SegmentsByBase(Mapping[int, SegmentPlan]):
    """``PartitionPlan.segment_by_base`` of a columnar plan: a binary search in the partition's base offsets, a dict of
    them from the second lookup on."""

    __slots__ = ("_asked", "_columns", "_index", "_rows")

    def __init__(self, columns: SegmentColumns, rows: range) -> None:
        self._columns = columns
        self._rows = rows
        self._index: dict[int, int] | None = None  # base offset -> row, from the second lookup on
        self._asked = 0

    def _row(self, base_offset: object) -> int | None:
        if not isinstance(base_offset, int) or not len(self._rows):
            return None
        if self._index is not None:
            return self._index.get(base_offset)
        bases = self._columns.ints["base_offset"][self._rows.start : self._rows.stop]
        self._asked += 1
        if self._asked > 1:
            # a task asks for each of its partition's segments in turn: one dict of the partition's rows (a few us
            # for 100 segments) instead of a binary search through numpy per segment (about 10 us each)
            self._index = dict(zip(bases.tolist(), self._rows))
            return self._index.get(base_offset)
        at = int(np.searchsorted(bases, base_offset))
        return self._rows.start + at if at < len(bases) and int(bases[at]) == base_offset else None

    def __getitem__(self, base_offset: int) -> SegmentPlan:
        row = self._row(base_offset)
        if row is None:
            raise KeyError(base_offset)
        return self._columns.segment(row)

    def __contains__(self, base_offset: object) -> bool:
        return self._row(base_offset) is not None

    def __iter__(self) -> Iterator[int]:
        return iter(self._columns.ints["base_offset"][self._rows.start : self._rows.stop].tolist())

    def __len__(self) -> int:
        return len(self._rows)


class PartitionRows(_Rows[range]):
    """``LogDirPlan.partitions`` of a columnar plan: a partition is built when it is looked at, so 10^5 partitions
    cost their columns, not 10^5 records."""

    __slots__ = ("_compactions", "_log_dir", "_names", "_prefix", "_starts", "_stops", "_topics")

    def __init__(
        self,
        columns: SegmentColumns,
        log_dir: LogDirPlan,
        starts: np.ndarray,
        stops: np.ndarray,
        compactions: Mapping[str, CompactionPlan],
    ) -> None:
        super().__init__(columns, range(len(starts)))
        self._log_dir = log_dir
        self._prefix = os.path.join(log_dir.log_dir, "")  # a name is one path component (check_paths)
        self._starts = starts
        self._stops = stops
        self._compactions = dict(compactions)
        values, codes = columns.names["partition"]
        self._names: list[str] = [values[c] for c in codes[starts].tolist()]
        self._topics = columns.names["topic"][1][starts]
        if len(set(self._names)) != len(self._names):
            raise ModelError(f"plan segment rows: a partition of {log_dir.label} appears twice")

    def _item(self, index: int) -> PartitionPlan:
        c = self._columns.ints
        start, stop = int(self._starts[index]), int(self._stops[index])
        name = self._names[index]
        return fast_new(
            PartitionPlan,
            name=name,
            topic=self._columns.names["topic"][0][int(self._topics[index])],
            partition=int(c["partition_id"][start]),
            dir=self._prefix + name,
            dir_mtime_ns=int(c["dir_mtime_ns"][start]),
            leader_epoch=int(c["leader_epoch"][start]),
            bytes=int(c["partition_bytes"][start]),
            estimated_output_bytes=int(c["partition_output_bytes"][start]),
            segments=SegmentRows(self._columns, range(start, stop)),
            compaction=self._compactions.get(name),
        )

    def names(self) -> list[str]:
        return self._names

    def by_name(self) -> PartitionsByName:
        return PartitionsByName(self)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled (a Dask scatter) as its boundaries over the shared columns, never partition by partition
        return (PartitionRows, (self._columns, self._log_dir, self._starts, self._stops, self._compactions))


class PartitionsByName(Mapping[str, PartitionPlan]):
    """``LogDirPlan.partition_by_name`` of a columnar plan."""

    def __init__(self, rows: PartitionRows) -> None:
        self._rows = rows
        self._index = {name: i for i, name in enumerate(rows.names())}

    def __getitem__(self, name: str) -> PartitionPlan:
        return self._rows[self._index[name]]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


class TaskRows(_Rows[np.ndarray]):
    """``TaskPlan.segments`` of a columnar plan."""

    __slots__ = ()

    @property
    def rows(self) -> np.ndarray:
        return self._rows

    def _item(self, row: int) -> SegmentRef:
        return SegmentRef(self._columns.name("partition", row), int(self._columns.ints["base_offset"][row]))


# --- plan <-> head and columns -------------------------------------------------------------------------------


def head_of(plan: Plan, columns: SegmentColumns) -> PlanHead:
    numbers = [task_number(t.id) for t in plan.tasks]
    if numbers != list(range(len(numbers))):
        raise ModelError("a columnar plan numbers its tasks t00000, t00001, ... in order")
    return PlanHead(
        version=plan.version,
        plan_id=plan.plan_id,
        tool=plan.tool,
        created=plan.created,
        planned_on=plan.planned_on,
        options=plan.options,
        log_dirs=tuple(replace(d, partitions=()) for d in plan.log_dirs),
        range_tasks=tuple(t for t in plan.tasks if t.byte_range is not None),
        task_bytes=tuple(t.bytes for t in plan.tasks),
        estimates=plan.estimates,
        warnings=plan.warnings,
        compactions=tuple(
            PartitionCompaction(d.key, p.name, p.compaction)
            for d in plan.log_dirs
            for p in d.partitions
            if p.compaction is not None
        ),
        segment_digest=columns.digest,
        segments=len(columns),
    )


def columnar_content_id(head: PlanHead, seal_host: bool = True) -> str:
    """``seal_host`` False: the scheme of plans written before ``planned_on`` was part of the id."""
    body = to_json(head)
    for name in ("plan_id", "created", *(() if seal_host else ("planned_on",))):
        body.pop(name)
    for d in body["log_dirs"]:
        d["filesystems"] = [{k: v for k, v in fs.items() if k != "free_bytes"} for fs in d["filesystems"]]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(b"columnar\0" + text.encode()).hexdigest()[:16]


def plan_id_of(plan: Plan, seal_host: bool = True) -> str:
    """The id ``plan`` deserves under its form's scheme: the columnar one here, the JSON form's otherwise."""
    if plan.form != PlanForm.COLUMNAR:
        return content_id(plan, seal_host)
    return columnar_content_id(head_of(plan, columns_of(plan)), seal_host)


def plan_of(head: PlanHead, columns: SegmentColumns) -> Plan:
    """The plan tree over ``columns``: partitions and tasks are built here, segments on access."""
    if len(columns) != head.segments:
        raise ModelError(f"the plan's head counts {head.segments} segments; its table holds {len(columns)}")
    log_dir_codes, log_dir_names = columns.names["log_dir"][1], columns.names["log_dir"][0]
    _part_values, part_codes = columns.names["partition"]
    _topic_values, _topic_codes = columns.names["topic"]
    n = len(columns)
    if n:
        change = (log_dir_codes[1:] != log_dir_codes[:-1]) | (part_codes[1:] != part_codes[:-1])
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    else:
        starts = np.zeros(0, dtype=np.int64)
    stops = np.append(starts[1:], n)
    if n > 1:
        later = np.ones(n, dtype=bool)
        later[starts] = False
        if not np.all(columns.ints["base_offset"][1:][later[1:]] > columns.ints["base_offset"][:-1][later[1:]]):
            raise ModelError("plan segment rows: a partition's base offsets are not ascending")
    compactions = {(x.log_dir, x.partition): x.compaction for x in head.compactions}
    known = {d.key for d in head.log_dirs}
    spans: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    firsts = log_dir_codes[starts] if n else np.zeros(0, dtype=np.int32)
    for code in np.unique(firsts).tolist():
        key = log_dir_names[code]
        mine = np.flatnonzero(firsts == code)
        if key not in known or (len(mine) and mine[-1] - mine[0] + 1 != len(mine)):
            raise ModelError(f"plan segment rows: log dir {key!r} is not in the plan's head, or its rows are apart")
        spans[key] = (starts[mine], stops[mine])
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    log_dirs = tuple(
        replace(
            d,
            partitions=PartitionRows(
                columns,
                d,
                *spans.get(d.key, empty),
                {name: c for (key, name), c in compactions.items() if key == d.key},
            ),
        )
        for d in head.log_dirs
    )
    return Plan(
        version=head.version,
        plan_id=head.plan_id,
        tool=head.tool,
        created=head.created,
        planned_on=head.planned_on,
        options=head.options,
        log_dirs=log_dirs,
        tasks=_tasks(head, columns),
        estimates=head.estimates,
        warnings=head.warnings,
        form=PlanForm.COLUMNAR,
    )


def _tasks(head: PlanHead, columns: SegmentColumns) -> tuple[TaskPlan, ...]:
    task = columns.ints["task"]
    count = len(head.task_bytes)
    if len(task) and (task.max(initial=-1) >= count or task.min(initial=0) < -1):
        raise ModelError(f"plan segment rows name tasks outside 0..{count - 1}")
    order = np.argsort(task, kind="stable")
    ordered = task[order]
    first = int(np.searchsorted(ordered, 0))
    order, ordered = order[first:], ordered[first:]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    groups = dict(
        zip(
            ordered[np.concatenate(([0], bounds))].tolist() if len(ordered) else [],
            np.split(order, bounds),
            strict=False,
        )
    )
    ranges = {task_number(t.id): t for t in head.range_tasks}
    log_dir_values, log_dir_codes = columns.names["log_dir"]
    tasks = []
    for number in range(count):
        if number in ranges:
            tasks.append(ranges[number])
            continue
        rows = groups.get(number)
        if rows is None:
            raise ModelError(f"task {task_id(number)} holds no segment of the plan")
        keys = np.unique(log_dir_codes[rows])
        if len(keys) != 1:
            raise ModelError(f"task {task_id(number)} holds segments of more than one log dir")
        tasks.append(
            TaskPlan(task_id(number), log_dir_values[int(keys[0])], TaskRows(columns, rows), head.task_bytes[number])
        )
    return tuple(tasks)


# --- the file ------------------------------------------------------------------------------------------------


def columns_of(plan: Plan) -> SegmentColumns:
    """The plan's columns: those it was loaded over, else built from its records."""
    for d in plan.log_dirs:
        for p in d.partitions:
            if isinstance(p.segments, SegmentRows):
                return p.segments._columns
    return SegmentColumns.of(plan)


def staged_totals(plan: Plan) -> tuple[int, int]:
    """(segments, bytes) of the plan's segments planned from pre-staging, from the columns."""
    c = columns_of(plan).ints
    staged = c["staged"] == 1
    return int(staged.sum()), int(c["size"][staged].sum())


def _columns_from_packed(packed: bytes) -> SegmentColumns:
    names, ints, extra = unpack_columns(packed, INT_COLUMNS)
    return SegmentColumns(names, ints, extra, packed=packed)
