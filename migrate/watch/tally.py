"""The one fold of a run's events: segments and bytes per partition and log dir, the rate, the ETA.

``RunProgress`` adds up the typed events of ``migrate.watch.events`` for one plan: per topic-partition, segments and
bytes planned, converted, verified, swapped, failed and skipped; the partition's state; every failure with its file
and byte position; counters per (log dir, stage, outcome) for Prometheus. ``Throughput`` is the work over time: MB/s
over the last ``RATE_WINDOW_SECONDS``, the ETA of what is left, the series the page draws. The scheduler's plugin folds
the workers' events into one (the /migration page, status.json, /metrics); the command line's progress line folds
the segments it is fed into another, so both say the same bytes, rate and ETA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migrate.codec import to_json
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import Outcome, PartitionState, Problem, RangeProgress, Stage
from migrate.watch.events import (
    PartitionsRolledBack,
    PartitionsSwapped,
    PartitionStates,
    PlanAnnounced,
    SegmentFinished,
    SegmentsSkipped,
    StageEvent,
)

RATE_WINDOW_SECONDS = 30.0  # the ETA follows the rate of the last half minute, not the whole run's average
MAX_SERIES_POINTS = 120


class Throughput:
    """Bytes of work per second of the clock: the rate over the last ``RATE_WINDOW_SECONDS``, the average, a series.

    The rate counts from ``begin`` (the command line: when the conversion starts, not the engine's start-up) or,
    without it, from the first work."""

    def __init__(self) -> None:
        self.per_second: dict[int, int] = {}  # second -> source bytes converted in it (work done, not skips)
        self.counting_from: float | None = None
        self.first_work: float | None = None
        self.last_work: float | None = None

    def begin(self, now: float) -> None:
        self.counting_from = now

    def worked(self, now: float, nbytes: int) -> None:
        second = int(now)
        self.per_second[second] = self.per_second.get(second, 0) + nbytes
        self.first_work = now if self.first_work is None else self.first_work
        self.last_work = now

    def rate(self, now: float) -> float:
        """Bytes per second over the last ``RATE_WINDOW_SECONDS`` of work (or since the counting began)."""
        start = self.counting_from if self.counting_from is not None else self.first_work
        if start is None or self.first_work is None:
            return 0.0
        since = max(start, now - RATE_WINDOW_SECONDS)
        done = sum(self.per_second.get(s, 0) for s in range(int(since), int(now) + 1))
        return done / max(now - since, 1.0)

    def average(self) -> float:
        if self.first_work is None or self.last_work is None:
            return 0.0
        return sum(self.per_second.values()) / max(self.last_work - self.first_work, 1.0)

    def series(self, started: float) -> list[list[float]]:
        """[seconds since ``started``, MB/s] in at most ``MAX_SERIES_POINTS`` buckets."""
        if not self.per_second or self.first_work is None:
            return []
        start, end = int(self.first_work), max(self.per_second)
        width = max(1, -(-(end - start + 1) // MAX_SERIES_POINTS))
        buckets: dict[int, int] = {}
        for second, nbytes in self.per_second.items():
            b = (second - start) // width
            buckets[b] = buckets.get(b, 0) + nbytes
        last = (end - start) // width
        return [
            [round(max(0.0, start + b * width - started), 1), round(buckets.get(b, 0) / width / 1e6, 6)]
            for b in range(last + 1)
        ]


@dataclass
class Tally:
    segments: int = 0
    bytes: int = 0

    def add(self, segments: int, nbytes: int) -> None:
        self.segments += segments
        self.bytes += nbytes

    def json(self) -> dict[str, int]:
        return {"segments": self.segments, "bytes": self.bytes}


@dataclass
class PartitionProgress:
    log_dir: str
    name: str
    topic: str
    planned: Tally = field(default_factory=Tally)
    converted: Tally = field(default_factory=Tally)
    verified: Tally = field(default_factory=Tally)
    swapped: Tally = field(default_factory=Tally)
    failed: Tally = field(default_factory=Tally)
    skipped: Tally = field(default_factory=Tally)
    output_bytes: int = 0
    records: int = 0
    mtime_timestamped_records: int = 0
    rolled_back: bool = False
    stored_state: PartitionState | None = None  # what the state store said last (status stage), until an event
    ranged: dict[int, int] = field(default_factory=dict)  # base offset -> bytes its ranges reported before its join

    @property
    def state(self) -> PartitionState:
        if self.stored_state is not None:
            return self.stored_state
        if self.rolled_back:
            return PartitionState.ROLLED_BACK
        if self.swapped.segments:
            return PartitionState.MIGRATED
        if self.failed.segments:
            return PartitionState.FAILED
        if not (self.verified.segments or self.skipped.segments):
            return PartitionState.CONVERTING if self.ranged else PartitionState.PLANNED
        if self.verified.segments + self.skipped.segments >= self.planned.segments:
            return PartitionState.READY
        return PartitionState.CONVERTING

    def json(self) -> dict[str, Any]:
        return {
            "log_dir": self.log_dir,
            "partition": self.name,
            "topic": self.topic,
            "state": self.state.value,
            **_columns(self),
            "output_bytes": self.output_bytes,
            "records": self.records,
            "mtime_timestamped_records": self.mtime_timestamped_records,
        }


@dataclass
class Totals:
    """The sum over some partitions (a log dir's, the run's), and what of their planned bytes is still to do."""

    planned: Tally = field(default_factory=Tally)
    converted: Tally = field(default_factory=Tally)
    verified: Tally = field(default_factory=Tally)
    swapped: Tally = field(default_factory=Tally)
    failed: Tally = field(default_factory=Tally)
    skipped: Tally = field(default_factory=Tally)
    in_ranges: int = 0  # converted ranges of segments not yet joined
    output_bytes: int = 0
    records: int = 0
    states: dict[PartitionState, int] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: list[PartitionProgress]) -> Totals:
        out = cls()
        for p in parts:
            for mine, theirs in zip(_tallies(out), _tallies(p)):
                mine.add(theirs.segments, theirs.bytes)
            out.in_ranges += sum(p.ranged.values())
            out.output_bytes += p.output_bytes
            out.records += p.records
            out.states[p.state] = out.states.get(p.state, 0) + 1
        return out

    @property
    def finished(self) -> Tally:
        """Segments verified, failed or skipped, and their bytes with those of converted ranges."""
        return Tally(
            self.verified.segments + self.failed.segments + self.skipped.segments,
            self.verified.bytes + self.failed.bytes + self.skipped.bytes + self.in_ranges,
        )

    @property
    def pending(self) -> Tally:
        finished = self.finished
        return Tally(max(0, self.planned.segments - finished.segments), max(0, self.planned.bytes - finished.bytes))

    def json(self) -> dict[str, Any]:
        return {
            **_columns(self),
            "pending": self.pending.json(),
            "output_bytes": self.output_bytes,
            "records": self.records,
            "partitions": {s.value: n for s, n in sorted(self.states.items(), key=lambda item: item[0].value)},
        }


def _tallies(x: PartitionProgress | Totals) -> tuple[Tally, ...]:
    return (x.planned, x.converted, x.verified, x.swapped, x.failed, x.skipped)


def _columns(x: PartitionProgress | Totals) -> dict[str, dict[str, int]]:
    names = ("planned", "converted", "verified", "swapped", "failed", "skipped")
    return {name: t.json() for name, t in zip(names, _tallies(x))}


@dataclass
class Figures:
    """Counters of one (log dir, stage, outcome): what Prometheus exports."""

    segments: int = 0
    source_bytes: int = 0
    output_bytes: int = 0
    records: int = 0

    def add(self, other: Figures) -> None:
        self.segments += other.segments
        self.source_bytes += other.source_bytes
        self.output_bytes += other.output_bytes
        self.records += other.records


@dataclass(frozen=True)
class LogDirHost:
    host: str | None = None
    broker_id: int | None = None


@dataclass(frozen=True)
class SegmentFailure:
    """A segment refused or failed, or a partition refused at the swap: where, in the operator's terms."""

    stage: Stage
    outcome: str
    log_dir: str
    partition: str
    base_offset: int | None
    file: str | None
    position: int | None
    offset: int | None
    kind: str | None
    message: str

    @classmethod
    def of(
        cls, stage: Stage, outcome: str, log_dir: str, partition: str, base: int | None, problem: Problem | None
    ) -> SegmentFailure:
        if problem is None:
            return cls(stage, outcome, log_dir, partition, base, None, None, None, None, "")
        first_line = problem.message.split("\n", 1)[0]  # a bug's traceback belongs in the run log
        where = (problem.path, problem.position, problem.offset)
        return cls(stage, outcome, log_dir, partition, base, *where, problem.kind, first_line)


@dataclass(frozen=True)
class TaskFailure:
    """An engine task that erred (the scheduler saw it; no segment event says where)."""

    stage: Stage
    task: str
    outcome: str
    log_dir: str | None
    partition: str | None
    message: str


class RunProgress:
    """Everything known about the run of one plan, folded from its events; JSON-able by ``status()``."""

    def __init__(self, plan_id: str, clock: Callable[[], float] = time.time) -> None:
        self.plan_id = plan_id
        self.clock = clock
        self.started = clock()
        self.updated = self.started
        self.options: ConvertOptions | None = None
        self.tool = ""
        self.hosts: dict[str, LogDirHost] = {}
        self.partitions: dict[tuple[str, str], PartitionProgress] = {}
        self.figures: dict[tuple[str, str, str], Figures] = {}  # (log dir, stage, outcome)
        self.failures: list[SegmentFailure | TaskFailure] = []
        self.throughput = Throughput()

    # folding events

    def plan(self, event: PlanAnnounced) -> None:
        self.options = event.options
        self.tool = event.tool
        for d in event.log_dirs:
            self.hosts[d.log_dir] = LogDirHost(d.host, d.broker_id)
            for p in d.partitions:
                self._partition(d.log_dir, p.name, p.topic).planned = Tally(p.segments, p.bytes)

    def _partition(self, log_dir: str, name: str, topic: str | None = None) -> PartitionProgress:
        key = (log_dir, name)
        part = self.partitions.get(key)
        if part is None:
            part = self.partitions[key] = PartitionProgress(log_dir, name, topic or name.rpartition("-")[0])
            self.hosts.setdefault(log_dir, LogDirHost())
        return part

    def _figures(self, log_dir: str, stage: Stage, outcome: str) -> Figures:
        return self.figures.setdefault((log_dir, stage.value, outcome), Figures())

    def segment(self, event: SegmentFinished) -> None:
        now = self.clock()
        self.updated = now
        if isinstance(event.progress, RangeProgress):
            self._range(event.progress, now)
            return
        o = event.progress
        nbytes = o.source_bytes or event.planned_bytes
        part = self._partition(o.log_dir, o.partition)
        part.stored_state = None
        # bytes its ranges reported already count once: the segment adds what they did not
        ranged = part.ranged.pop(o.base_offset, 0)
        if event.converted:
            part.converted.add(1, max(nbytes - ranged, 0))
        elif ranged:
            part.converted.add(0, -ranged)  # reported by ranges, then not converted after all
        if o.outcome in (Outcome.VERIFIED, Outcome.UNCHANGED):
            part.verified.add(1, nbytes)
            part.output_bytes += o.output_bytes
            part.records += o.records
            part.mtime_timestamped_records += event.mtime_timestamped_records
        elif o.outcome in (Outcome.REFUSED, Outcome.FAILED):
            part.failed.add(1, nbytes)
            self.failures.append(
                SegmentFailure.of(Stage.CONVERT, o.outcome.value, o.log_dir, o.partition, o.base_offset, o.problem)
            )
        elif o.outcome == Outcome.SKIPPED:
            part.skipped.add(1, nbytes)
        self._figures(o.log_dir, Stage.CONVERT, o.outcome.value).add(Figures(1, nbytes, o.output_bytes, o.records))
        # a segment taken from pre-staging was renamed into place, not converted: done, but not the run's rate
        if o.outcome != Outcome.SKIPPED and o.staged_seconds is None:
            self.throughput.worked(now, max(nbytes - ranged, 0))

    def _range(self, r: RangeProgress, now: float) -> None:
        """A range of a segment converted in ranges: its bytes count as converted work now (rate, ETA), the segment
        when its join reports it."""
        part = self._partition(r.log_dir, r.partition)
        part.stored_state = None
        part.ranged[r.base_offset] = part.ranged.get(r.base_offset, 0) + r.source_bytes
        part.converted.add(0, r.source_bytes)
        self.throughput.worked(now, r.source_bytes)

    def stage(self, event: StageEvent) -> None:
        self.updated = self.clock()
        log_dir = event.log_dir
        if isinstance(event, SegmentsSkipped):
            for s in event.segments:
                self._partition(log_dir, s.partition).skipped.add(1, s.planned_bytes)
                self._figures(log_dir, Stage.CONVERT, Outcome.SKIPPED.value).add(Figures(1, s.planned_bytes))
        elif isinstance(event, PartitionsSwapped):
            for name in event.migrated:
                part = self._partition(log_dir, name)
                part.stored_state = None
                part.swapped = Tally(part.planned.segments, part.planned.bytes)
                self._figures(log_dir, Stage.SWAP, "swapped").add(
                    Figures(part.planned.segments, part.planned.bytes, part.output_bytes, part.records)
                )
            for failed in event.failed:
                part = self._partition(log_dir, failed.partition)
                part.stored_state = None
                part.failed.add(part.planned.segments, part.planned.bytes)
                self._figures(log_dir, Stage.SWAP, "failed").add(Figures(part.planned.segments, part.planned.bytes))
                self.failures.append(
                    SegmentFailure.of(Stage.SWAP, "failed", log_dir, failed.partition, None, failed.problem)
                )
        elif isinstance(event, PartitionsRolledBack):
            for name in event.restored:
                part = self._partition(log_dir, name)
                part.rolled_back, part.stored_state = True, None
        elif isinstance(event, PartitionStates):
            for seen in event.partitions:
                part = self._partition(log_dir, seen.partition)
                part.stored_state = seen.state
                if seen.state == PartitionState.MIGRATED and not part.swapped.segments:  # by an earlier run
                    part.swapped = Tally(part.planned.segments, part.planned.bytes)

    def task_failed(self, stage: Stage, key: str, message: str) -> None:
        self.updated = self.clock()
        self.failures.append(TaskFailure(stage, key, "erred", None, None, message))

    # what it adds up to

    def sum(self, parts: list[PartitionProgress] | None = None) -> Totals:
        return Totals.of(list(self.partitions.values()) if parts is None else parts)

    def totals(self, parts: list[PartitionProgress] | None = None) -> dict[str, Any]:
        return self.sum(parts).json()

    def by_log_dir(self) -> dict[str, list[PartitionProgress]]:
        by_dir: dict[str, list[PartitionProgress]] = {}
        for p in self.partitions.values():
            by_dir.setdefault(p.log_dir, []).append(p)
        return dict(sorted(by_dir.items()))

    def rate(self, now: float | None = None) -> float:
        return self.throughput.rate(self.clock() if now is None else now)

    def eta(self, now: float | None = None) -> float | None:
        """Seconds until every planned segment is finished at the current rate: 0 when none is left, None when
        nothing was planned or nothing moves."""
        pending = self.sum().pending.bytes
        if pending == 0:
            return 0.0 if self.partitions else None
        rate = self.rate(now)
        return pending / rate if rate > 0 else None

    def eta_seconds(self, now: float | None = None) -> float | None:
        eta = self.eta(now)
        return round(eta, 1) if eta is not None else None

    def series(self) -> list[list[float]]:
        return self.throughput.series(self.started)

    def stage_at_work(self) -> Stage | None:
        """What the run is doing where no Dask task shows it: a LocalCluster's driver converts its share itself (all
        of it before any worker is up, and a plan too small for workers on its own), so a partition converting
        means the convert stage, whatever the scheduler's task list says."""
        converting = any(p.state == PartitionState.CONVERTING for p in self.partitions.values())
        return Stage.CONVERT if converting else None

    def status(self, partition_limit: int | None = None) -> dict[str, Any]:
        now = self.clock()
        parts = sorted(self.partitions.values(), key=_attention)
        totals = self.sum()
        rate = self.rate(now)
        return {
            "plan": {
                "plan_id": self.plan_id,
                "tool": self.tool,
                "options": to_json(self.options) if self.options is not None else {},
                "partitions": len(self.partitions),
                "segments": totals.planned.segments,
                "bytes": totals.planned.bytes,
            },
            "started": self.started,
            "updated": self.updated,
            "elapsed_seconds": round(now - self.started, 1),
            "totals": totals.json(),
            "rate": {
                "bytes_per_s": round(rate),
                "mb_per_s": round(rate / 1e6, 3),
                "average_mb_per_s": round(self.throughput.average() / 1e6, 3),
                "eta_seconds": self.eta_seconds(now),
                "series": self.series(),
            },
            "log_dirs": [
                {"log_dir": d, **to_json(self.hosts.get(d, LogDirHost())), **self.totals(ps)}
                for d, ps in self.by_log_dir().items()
            ],
            "partitions": [p.json() for p in (parts if partition_limit is None else parts[:partition_limit])],
            "failures": [to_json(f) for f in self.failures],
        }


_ATTENTION = {
    PartitionState.FAILED: 0,
    PartitionState.CONVERTING: 1,
    PartitionState.READY: 2,
    PartitionState.PLANNED: 3,
    PartitionState.MIGRATED: 4,
    PartitionState.ROLLED_BACK: 5,
}


def _attention(p: PartitionProgress) -> tuple[int, str, str]:
    """Partitions that need a look first: failed, then in progress, then the rest."""
    return (_ATTENTION.get(p.state, 9), p.log_dir, p.name)


@dataclass
class TaskCounts:
    done: int = 0
    erred: int = 0
