"""The events a run publishes while it runs, as typed records, and the topics of Dask's event log they travel on.

Workers publish finished segments in batches (``SEGMENTS_TOPIC``: one message per ``SegmentBatcher`` batch, not one
per segment, so a task of 256 tiny segments does not send 256 messages through the scheduler) and, after each stage
call, what the scheduler cannot see otherwise (segments an earlier run did, partitions swapped in or rolled back:
``STAGE_TOPIC``); the client publishes the plan's partitions once (``PLAN_TOPIC``); workers forward their warnings to
the client (``LOG_TOPIC``). On the wire an event is the plain JSON data of its record (Dask's event log carries
msgpack-able data); ``encode`` writes it and ``decode_run_event``/``decode_worker_log`` read it back with the
project's strict codec, once, where it arrives, so nothing past that point reads a dict by key.

A low layer: stages emit through ``migrate.watch.progress``, and this module imports only the model and the codec.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from migrate.codec import enum_member, from_json, to_json
from migrate.errors import ModelError
from migrate.model.plan_tree import ConvertOptions, Plan
from migrate.model.run_state import LogDirStatus, Outcome, PartitionState, RangeProgress, SegmentOutcome, Stage
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
    """The segments one worker finished since its last batch."""

    events: tuple[SegmentFinished, ...]


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
    return SegmentFinished(
        plan_id,
        dataclasses.replace(outcome, result=None),
        planned_size(plan, outcome.log_dir, outcome.partition, outcome.base_offset),
        converted=result is not None,
        mtime_timestamped_records=result.mtime_timestamped_records if result is not None else 0,
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
    """The event as Dask's event log carries it: plain JSON data."""
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
        return from_json(SegmentsFinished, _as_sent(msg), where)
    if topic == STAGE_TOPIC:
        if not isinstance(msg, dict):
            raise ModelError(f"{where}: expected an object, found {type(msg).__name__}")
        kind = enum_member(StageChange, msg.get("kind"), f"{where}.kind")
        return from_json(STAGE_EVENTS[kind], _as_sent(msg), where)
    return None


def decode_segments(msg: Any) -> list[SegmentOutcome | RangeProgress]:
    """What a client subscribed to ``SEGMENTS_TOPIC`` hands to its progress line, segment by segment."""
    batch = from_json(SegmentsFinished, _as_sent(msg), f"event on {SEGMENTS_TOPIC}")
    return [e.progress for e in batch.events]


def decode_worker_log(msg: Any) -> WorkerLogRecord:
    return from_json(WorkerLogRecord, msg, f"event on {LOG_TOPIC}")  # its "worker" is its own, the same address
