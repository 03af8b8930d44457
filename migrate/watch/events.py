"""The events a run publishes while it runs, as typed records, and the topics of Dask's event log they travel on.

Workers publish finished segments in batches (``SEGMENTS_TOPIC``: one message per ``SegmentBatcher`` batch, not one
per segment, so a task of 256 tiny segments does not send 256 messages through the scheduler) and, after each stage
call, what the scheduler cannot see otherwise (segments an earlier run did, partitions swapped in or rolled back:
``STAGE_TOPIC``); the client publishes the plan's partitions once (``PLAN_TOPIC``); workers forward their warnings to
the client (``LOG_TOPIC``). On the wire an event is the plain JSON data of its record (Dask's event log carries
msgpack-able data), a batch of segments as columns (its schema is below); ``encode`` writes it and
``decode_run_event``/``decode_worker_log`` read it back, checked as the project's strict codec checks, once, where
it arrives, so nothing past that point reads a dict by key.

A low layer: stages emit through ``migrate.watch.progress``, and this module imports only the model and the codec.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from migrate.codec import enum_member, from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_tree import ConvertOptions, Plan
from migrate.model.records import fast_replace
from migrate.model.run_state import (
    LogDirStatus,
    Outcome,
    PartitionState,
    Problem,
    RangeProgress,
    SegmentOutcome,
    Stage,
)
from migrate.model.stage_reports import PartitionProblem, RollbackReport, SwapReport

PLAN_TOPIC = "kafka-log-migrate-plan"
SEGMENTS_TOPIC = "kafka-log-migrate-segments"
STAGE_TOPIC = "kafka-log-migrate-stage"
LOG_TOPIC = "kafka-log-migrate-log"


# --- the plan, announced once by the client -----------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedPartition:
    name: str
    topic: str
    segments: int
    bytes: int


@dataclass(frozen=True)
class PlannedLogDir:
    log_dir: str  # the key outcomes carry: the path on a one-host plan
    host: str | None
    broker_id: int | None
    partitions: tuple[PlannedPartition, ...]


@dataclass(frozen=True)
class PlanAnnounced:
    """The plan as the dashboard needs it: per partition, its topic and what was planned."""

    plan_id: str
    tool: str
    options: ConvertOptions
    log_dirs: tuple[PlannedLogDir, ...]


def plan_event(plan: Plan) -> PlanAnnounced:
    return PlanAnnounced(
        plan.plan_id,
        plan.tool,
        plan.options,
        tuple(
            PlannedLogDir(
                d.key,
                d.host,
                d.broker_id,
                tuple(PlannedPartition(p.name, p.topic, len(p.segments), p.bytes) for p in d.partitions),
            )
            for d in plan.log_dirs
        ),
    )


# --- a finished segment, or a finished range of one, from the worker that did it ----------------------------------


@dataclass(frozen=True)
class SegmentFinished:
    """One finished segment (its conversion result travels back with the task's value, not here), or one finished
    range of a segment converted in ranges (progress only)."""

    plan_id: str | None
    progress: SegmentOutcome | RangeProgress
    planned_bytes: int = 0
    converted: bool = False  # conversion finished (even if verification then refused it)
    mtime_timestamped_records: int = 0


@dataclass(frozen=True)
class SegmentsFinished:
    """The segments one worker finished since its last batch. ``origin``: the client that published the batch for
    calls it ran itself (``DaskEngine``), which told its own progress line of them already; empty from a worker."""

    events: tuple[SegmentFinished, ...]
    origin: str = ""


# a batch goes out once it holds this many segments or is this old: live progress without a message per segment
BATCH_SEGMENTS = 256
BATCH_SECONDS = 0.25


class SegmentBatcher:
    """Finished segments gathered into ``SegmentsFinished`` batches, each ready to publish when full or old enough."""

    def __init__(self, clock: Any = None) -> None:
        import time

        self._clock = clock or time.monotonic
        self._held: list[SegmentFinished] = []
        self._since = self._clock()

    def add(self, event: SegmentFinished) -> dict[str, Any] | None:
        """Hold ``event``; the encoded batch when it is due now."""
        if not self._held:
            self._since = self._clock()
        self._held.append(event)
        if len(self._held) >= BATCH_SEGMENTS or self._clock() - self._since >= BATCH_SECONDS:
            return self.flush()
        return None

    def flush(self) -> dict[str, Any] | None:
        """The encoded batch of what is held, if anything."""
        if not self._held:
            return None
        batch, self._held = SegmentsFinished(tuple(self._held)), []
        return encode(batch)


# the sizes of the partition the last event was of: a run's events come a partition at a time, and each asked the
# plan for its partition and segment again (38 us of a columnar plan's lookups, twice per segment at 10^6)
_last_sizes: tuple[tuple[str, str, str], dict[int, int]] | None = None


def planned_size(plan: Plan | None, log_dir: str, partition: str, base_offset: int) -> int:
    global _last_sizes
    if plan is None:
        return 0
    key = (plan.plan_id, log_dir, partition)
    last = _last_sizes  # one read: another thread may replace it meanwhile, never change it
    if last is None or last[0] != key:
        try:
            last = _last_sizes = (key, plan.partition(log_dir, partition).sizes_by_base())
        except (KeyError, ValueError):
            return 0
    return last[1].get(base_offset, 0)


def segment_event(outcome: SegmentOutcome | RangeProgress, plan: Plan | None = None) -> SegmentFinished:
    plan_id = plan.plan_id if plan is not None else None
    if isinstance(outcome, RangeProgress):
        return SegmentFinished(plan_id, outcome)
    result = outcome.result
    converted = result is not None or outcome.result_text is not None
    if converted:  # one per segment of a run
        outcome = fast_replace(outcome, result=None, result_text=None, mtime_timestamped_records=0)
    return SegmentFinished(
        plan_id,
        outcome,
        planned_size(plan, outcome.log_dir, outcome.partition, outcome.base_offset),
        converted=converted,
        mtime_timestamped_records=(
            result.mtime_timestamped_records if result is not None else outcome.mtime_timestamped_records
        ),
    )


# --- what a finished stage call changed that no segment event says ------------------------------------------------


class StageChange(str, enum.Enum):
    SKIPPED = "skipped"  # segments done by an earlier run, or not attempted
    SWAP = "swap"  # partitions swapped in, or refused at the swap
    ROLLBACK = "rollback"  # partitions whose originals were put back
    STATUS = "status"  # the state store's word, which also knows what earlier runs did


@dataclass(frozen=True)
class SkippedSegment:
    partition: str
    base_offset: int
    planned_bytes: int


@dataclass(frozen=True)
class SegmentsSkipped:
    plan_id: str
    log_dir: str
    segments: tuple[SkippedSegment, ...]
    kind: StageChange = StageChange.SKIPPED


@dataclass(frozen=True)
class PartitionsSwapped:
    plan_id: str
    log_dir: str
    migrated: tuple[str, ...]
    failed: tuple[PartitionProblem, ...]
    kind: StageChange = StageChange.SWAP


@dataclass(frozen=True)
class PartitionsRolledBack:
    plan_id: str
    log_dir: str
    restored: tuple[str, ...]
    kind: StageChange = StageChange.ROLLBACK


@dataclass(frozen=True)
class PartitionStateSeen:
    partition: str
    state: PartitionState


@dataclass(frozen=True)
class PartitionStates:
    plan_id: str
    log_dir: str
    partitions: tuple[PartitionStateSeen, ...]
    kind: StageChange = StageChange.STATUS


StageEvent = SegmentsSkipped | PartitionsSwapped | PartitionsRolledBack | PartitionStates
STAGE_EVENTS: dict[StageChange, type[StageEvent]] = {
    StageChange.SKIPPED: SegmentsSkipped,
    StageChange.SWAP: PartitionsSwapped,
    StageChange.ROLLBACK: PartitionsRolledBack,
    StageChange.STATUS: PartitionStates,
}


def stage_event(plan: Plan, stage: Stage, value: Any) -> StageEvent | None:
    """What a ``stage`` call that returned ``value`` changed that no segment event says, or None. Each stage returns
    one record type (the engine seam), so the stage says what ``value`` is."""
    if stage in (Stage.CONVERT, Stage.JOIN):
        outcomes: tuple[SegmentOutcome, ...] = value.outcomes
        skipped = tuple(
            SkippedSegment(o.partition, o.base_offset, planned_size(plan, o.log_dir, o.partition, o.base_offset))
            for o in outcomes
            if o.outcome == Outcome.SKIPPED
        )
        return SegmentsSkipped(plan.plan_id, outcomes[0].log_dir, skipped) if skipped else None
    if stage == Stage.SWAP:
        swapped: SwapReport = value
        return PartitionsSwapped(plan.plan_id, swapped.log_dir, swapped.migrated, swapped.failed)
    if stage == Stage.ROLLBACK:
        rolled_back: RollbackReport = value
        return PartitionsRolledBack(plan.plan_id, rolled_back.log_dir, rolled_back.restored)
    if stage == Stage.STATUS and value is not None:  # None: a log dir this plan has not started on
        status: LogDirStatus = value
        return PartitionStates(
            plan.plan_id, status.log_dir, tuple(PartitionStateSeen(p.partition, p.state) for p in status.partitions)
        )
    return None


# --- a worker's log record, forwarded to the client ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkerLogRecord:
    name: str  # the logger's
    levelno: int
    levelname: str
    msg: str  # formatted on the worker
    created: float
    worker: str  # its address


# --- the wire -----------------------------------------------------------------------------------------------------

RunEvent = PlanAnnounced | SegmentsFinished | StageEvent


def encode(event: RunEvent | WorkerLogRecord) -> dict[str, Any]:
    """The event as Dask's event log carries it: plain JSON data (a batch of segments as columns)."""
    if isinstance(event, SegmentsFinished):
        return _segment_columns(event)
    return to_json(event)


def _as_sent(msg: Any, top: bool = True) -> Any:
    """``msg`` as ``encode`` wrote it. Dask's comms unpack msgpack arrays as tuples (``use_list=False``), which the
    codec's JSON types do not take, and the scheduler adds the sending worker's address to every dict a worker logs
    (``Scheduler.log_worker_event`` sets its "worker" key): Dask's, not the event's."""
    if isinstance(msg, dict):
        return {k: _as_sent(v, False) for k, v in msg.items() if not (top and k == "worker")}
    if isinstance(msg, (list, tuple)):
        return [_as_sent(v, False) for v in msg]
    return msg


def decode_run_event(topic: str, msg: Any) -> RunEvent | None:
    """The record an event of ``topic`` carries; None for a topic that is not a run's. A ModelError names the key
    that does not fit (a worker of another version of the tool)."""
    where = f"event on {topic}"
    if topic == PLAN_TOPIC:
        return from_json(PlanAnnounced, _as_sent(msg), where)
    if topic == SEGMENTS_TOPIC:
        return _segments_of_columns(msg, where)
    if topic == STAGE_TOPIC:
        if not isinstance(msg, dict):
            raise ModelError(f"{where}: expected an object, found {type(msg).__name__}")
        kind = enum_member(StageChange, msg.get("kind"), f"{where}.kind")
        return from_json(STAGE_EVENTS[kind], _as_sent(msg), where)
    return None


def decode_segments(msg: Any, skip_origin: str = "") -> list[SegmentOutcome | RangeProgress]:
    """What a client subscribed to ``SEGMENTS_TOPIC`` hands to its progress line, segment by segment; nothing for a
    batch whose origin is ``skip_origin`` (the client's own, told already), which is not decoded at all."""
    if skip_origin and isinstance(msg, dict) and msg.get("origin") == skip_origin:
        return []
    return [e.progress for e in _segments_of_columns(msg, f"event on {SEGMENTS_TOPIC}").events]


# --- a batch of finished segments on the wire ---------------------------------------------------------------------
#
# Every segment of a run passes the scheduler and the client once or twice (10^6 on a big broker), so a batch
# travels as columns, not as a dict per segment (about 320 B and 12 us to decode each, twice, on the driver):
#
#   {"origin": str,                      SegmentsFinished.origin
#    "strings": [str, ...],              every distinct string of the batch once; the code columns index it
#    "kind": [0 | 1, ...],               0: a segment's SegmentOutcome, 1: a RangeProgress
#    "plan": [code | -1, ...],           SegmentFinished.plan_id (-1: None)
#    "log_dir", "partition": [code, ...]
#    "base_offset": [int, ...]
#    "outcome": [code, ...],             Outcome's value (a range: the code of "")
#    "source_bytes", "output_bytes", "records", "planned_bytes", "mtime_timestamped_records": [int, ...]
#    "converted": [0 | 1, ...]
#    "convert_seconds", "verify_seconds", "finished_at": [number, ...]
#    "staged_seconds": [number | None, ...]
#    "staged_fallback": [code, ...]
#    "index", "count": [int, ...],       a range's (0 for a segment)
#    "problems": [[row, Problem as JSON], ...]}   the few segments that have one
#
# Every column has one entry per event, in the order they happened (a range before its segment's outcome: the fold
# counts the range's bytes once). A segment's ``result`` never travels here (None).

_INT_COLUMNS = (
    "kind", "plan", "log_dir", "partition", "base_offset", "outcome", "source_bytes", "output_bytes", "records",
    "planned_bytes", "mtime_timestamped_records", "converted", "staged_fallback", "index", "count",
)  # fmt: skip
_FLOAT_COLUMNS = ("convert_seconds", "verify_seconds", "finished_at")


def _segment_columns(batch: SegmentsFinished) -> dict[str, Any]:
    codes: dict[str, int] = {}

    def code(text: str) -> int:
        found = codes.get(text)
        if found is None:
            found = codes[text] = len(codes)
        return found

    cols: dict[str, list[Any]] = {name: [] for name in (*_INT_COLUMNS, *_FLOAT_COLUMNS, "staged_seconds")}
    problems: list[list[Any]] = []
    for row, e in enumerate(batch.events):
        p = e.progress
        cols["plan"].append(-1 if e.plan_id is None else code(e.plan_id))
        cols["log_dir"].append(code(p.log_dir))
        cols["partition"].append(code(p.partition))
        cols["base_offset"].append(p.base_offset)
        cols["planned_bytes"].append(e.planned_bytes)
        cols["converted"].append(1 if e.converted else 0)
        cols["mtime_timestamped_records"].append(e.mtime_timestamped_records)
        if isinstance(p, RangeProgress):
            values: tuple[Any, ...] = (1, code(""), p.source_bytes, 0, 0, code(""), p.index, p.count, 0.0, 0.0, 0.0)
            staged = None
        else:
            values = (
                0, code(p.outcome.value), p.source_bytes, p.output_bytes, p.records, code(p.staged_fallback), 0, 0,
                p.convert_seconds, p.verify_seconds, p.finished_at,
            )  # fmt: skip
            staged = p.staged_seconds
            if p.problem is not None:
                problems.append([row, to_json(p.problem)])
        for name, value in zip(_ROW_ORDER, values):
            cols[name].append(value)
        cols["staged_seconds"].append(staged)
    return {"origin": batch.origin, "strings": list(codes), **cols, "problems": problems}


_ROW_ORDER = (
    "kind", "outcome", "source_bytes", "output_bytes", "records", "staged_fallback", "index", "count",
    "convert_seconds", "verify_seconds", "finished_at",
)  # fmt: skip
_OUTCOMES = {o.value: o for o in Outcome}


def _segments_of_columns(msg: Any, where: str) -> SegmentsFinished:
    """``_segment_columns``'s batch back, every column checked (a worker of another version of the tool): a
    ModelError names the column."""
    if not isinstance(msg, dict):
        raise ModelError(f"{where}: expected an object, found {type(msg).__name__}")
    strings = msg.get("strings")
    if not isinstance(strings, (list, tuple)) or not all(type(t) is str for t in strings):
        raise ModelError(f"{where}.strings: expected a list of strings")
    origin = msg.get("origin", "")
    if type(origin) is not str:
        raise ModelError(f"{where}.origin: expected a string, found {type(origin).__name__}")
    kinds = msg.get("kind")
    n = len(kinds) if isinstance(kinds, (list, tuple)) else -1
    cols: dict[str, Any] = {}
    for name in (*_INT_COLUMNS, *_FLOAT_COLUMNS, "staged_seconds"):
        col = msg.get(name)
        if not isinstance(col, (list, tuple)) or len(col) != n:
            raise ModelError(f"{where}.{name}: expected a list of {max(n, 0)} values")
        if name in _INT_COLUMNS:
            ok = all(type(v) is int for v in col)
        elif name in _FLOAT_COLUMNS:
            ok = all(type(v) in (int, float) for v in col)
        else:
            ok = all(v is None or type(v) in (int, float) for v in col)
        if not ok:
            raise ModelError(f"{where}.{name}: expected {'integers' if name in _INT_COLUMNS else 'numbers'}")
        cols[name] = col
    for name in ("plan", "log_dir", "partition", "outcome", "staged_fallback"):
        low = -1 if name == "plan" else 0
        if any(not low <= v < len(strings) for v in cols[name]):
            raise ModelError(f"{where}.{name}: a code outside the batch's {len(strings)} strings")
    problems: dict[int, Problem] = {}
    raw_problems = msg.get("problems", ())
    if not isinstance(raw_problems, (list, tuple)):
        raise ModelError(f"{where}.problems: expected a list")
    for entry in raw_problems:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and type(entry[0]) is int and 0 <= entry[0] < n):
            raise ModelError(f"{where}.problems: expected [row, problem] pairs with a row below {n}")
        problems[entry[0]] = from_json(Problem, _as_sent(entry[1]), f"{where}.problems[{entry[0]}]")
    events = []
    for row in range(n):
        log_dir, partition = strings[cols["log_dir"][row]], strings[cols["partition"][row]]
        base_offset, kind = cols["base_offset"][row], cols["kind"][row]
        if kind == 1:
            progress: SegmentOutcome | RangeProgress = RangeProgress(
                log_dir, partition, base_offset, cols["index"][row], cols["count"][row], cols["source_bytes"][row]
            )
        elif kind == 0:
            outcome = _OUTCOMES.get(strings[cols["outcome"][row]])
            if outcome is None:
                raise ModelError(f"{where}.outcome: {strings[cols['outcome'][row]]!r} is not an outcome")
            progress = SegmentOutcome(
                log_dir,
                partition,
                base_offset,
                outcome,
                source_bytes=cols["source_bytes"][row],
                output_bytes=cols["output_bytes"][row],
                records=cols["records"][row],
                convert_seconds=float(cols["convert_seconds"][row]),
                verify_seconds=float(cols["verify_seconds"][row]),
                problem=problems.get(row),
                finished_at=float(cols["finished_at"][row]),
                staged_seconds=None if cols["staged_seconds"][row] is None else float(cols["staged_seconds"][row]),
                staged_fallback=strings[cols["staged_fallback"][row]],
            )
        else:
            raise ModelError(f"{where}.kind: {kind!r} is not 0 (a segment) or 1 (a range)")
        plan = cols["plan"][row]
        events.append(
            SegmentFinished(
                None if plan == -1 else strings[plan],
                progress,
                cols["planned_bytes"][row],
                bool(cols["converted"][row]),
                cols["mtime_timestamped_records"][row],
            )
        )
    return SegmentsFinished(tuple(events), origin)


def decode_worker_log(msg: Any) -> WorkerLogRecord:
    return from_json(WorkerLogRecord, msg, f"event on {LOG_TOPIC}")  # its "worker" is its own, the same address
