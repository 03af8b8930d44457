"""Watching a migration live on the Dask dashboard server: a scheduler plugin fed by the workers' events, its page,
its JSON and its Prometheus collector.

Shaped as distributed's own diagnostics:

- workers publish each finished segment to the scheduler's event log as it completes (``Worker.log_event``, topic
  ``kafka-log-migrate-segment``), and after each stage call what the scheduler cannot see otherwise (segments an
  earlier run did, partitions swapped in or rolled back: ``kafka-log-migrate-stage``); the client publishes the plan's
  partitions once (``kafka-log-migrate-plan``). ``migrate.engines.dask`` does the publishing;
- ``MigrationPlugin``, a ``SchedulerPlugin``, folds those events in ``log_event`` into a ``RunProgress`` per plan:
  per log dir and per topic-partition, segments and bytes planned, converted, verified, swapped, failed; MB/s over
  time; an ETA; every failure with its file and byte position. ``transition`` counts tasks per stage;
- ``routes`` (add ``migrate.monitor`` to ``distributed.scheduler.http.routes``) serve ``/migration``, a page that
  refreshes itself, and ``/migration/status.json``;
- ``MigrationCollector`` is a Prometheus collector built from the plugin's state at scrape time, as distributed's
  collectors are (``distributed.http.scheduler.prometheus``): the plugin registers it in the default registry, which
  the scheduler's ``/metrics`` serves, when it starts, and unregisters it when it closes. Counters of segments,
  source and output bytes and records by log dir, stage and outcome; gauges of partitions by state, of what was
  planned, of the current rate and the ETA.

A scheduler started by hand gets all of it with ``dask scheduler --preload migrate.monitor``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin
from distributed.http.utils import RequestHandler

from migrate import __version__
from migrate.codec import from_json, to_json
from migrate.model import (
    ConvertTaskResult,
    LogDirStatus,
    Outcome,
    Plan,
    Problem,
    RangeProgress,
    RollbackReport,
    SegmentOutcome,
    SwapReport,
)

logger = logging.getLogger(__name__)

PLUGIN_NAME = "kafka-log-migrate"
PLAN_TOPIC = "kafka-log-migrate-plan"
SEGMENT_TOPIC = "kafka-log-migrate-segment"
STAGE_TOPIC = "kafka-log-migrate-stage"
LOG_TOPIC = "kafka-log-migrate-log"
EVENT_TOPIC = SEGMENT_TOPIC  # the name earlier versions used
STAGES = ("prepare", "convert", "join", "verify", "swap", "rollback", "finalize", "status", "report")
RATE_WINDOW_SECONDS = 30.0  # the ETA follows the rate of the last half minute, not the whole run's average
MAX_SERIES_POINTS = 120


# --- events: what workers and the client publish ------------------------------------------------------------------


def plan_event(plan: Plan) -> dict[str, Any]:
    """The plan as the monitor needs it: per partition, its topic and what was planned (msgpack-able)."""
    return {
        "plan_id": plan.plan_id,
        "tool": plan.tool,
        "options": to_json(plan.options),
        "log_dirs": [
            {
                "log_dir": d.key,  # the key outcomes carry: the path on a one-host plan
                "host": d.host,
                "broker_id": d.broker_id,
                "partitions": [[p.name, p.topic, len(p.segments), p.bytes] for p in d.partitions],
            }
            for d in plan.log_dirs
        ],
    }


def planned_size(plan: Plan | None, log_dir: str, partition: str, base_offset: int) -> int:
    if plan is None:
        return 0
    try:
        return plan.partition(log_dir, partition).segment_by_base[base_offset].size
    except (KeyError, ValueError):
        return 0


def segment_event(outcome: SegmentOutcome | RangeProgress, plan: Plan | None = None) -> dict[str, Any]:
    """One finished segment, or one finished range of a segment converted in ranges (progress only). The full
    conversion result travels back with the task's return value, not here."""
    if isinstance(outcome, RangeProgress):
        return {"plan_id": plan.plan_id if plan is not None else None, "range": to_json(outcome)}
    body = to_json(outcome)
    body.pop("result", None)
    result = outcome.result
    return {
        "plan_id": plan.plan_id if plan is not None else None,
        "outcome": body,
        "planned_bytes": planned_size(plan, outcome.log_dir, outcome.partition, outcome.base_offset),
        "converted": result is not None,  # conversion finished (even if verification then refused it)
        "mtime_timestamped_records": result.mtime_timestamped_records if result is not None else 0,
    }


def outcome_of(event: dict[str, Any]) -> SegmentOutcome | RangeProgress:
    if "range" in event:
        return from_json(RangeProgress, event["range"], "event.range")
    return from_json(SegmentOutcome, event["outcome"], "event.outcome")


def stage_event(plan: Plan, value: Any) -> dict[str, Any] | None:
    """What a finished stage call changed that no segment event says: segments skipped (done by an earlier run, or
    not attempted), partitions swapped in or refused at the swap, partitions rolled back."""
    outcomes = value.outcomes if isinstance(value, ConvertTaskResult) else ()  # a convert task's or a join's
    if outcomes:
        skipped = [
            [o.partition, o.base_offset, planned_size(plan, o.log_dir, o.partition, o.base_offset)]
            for o in outcomes
            if o.outcome == Outcome.SKIPPED
        ]
        if skipped:
            return {"kind": "skipped", "plan_id": plan.plan_id, "log_dir": outcomes[0].log_dir, "segments": skipped}
        return None
    if isinstance(value, SwapReport):
        return {
            "kind": "swap",
            "plan_id": plan.plan_id,
            "log_dir": value.log_dir,
            "migrated": list(value.migrated),
            "failed": [[f.partition, to_json(f.problem)] for f in value.failed],
        }
    if isinstance(value, RollbackReport):
        return {"kind": "rollback", "plan_id": plan.plan_id, "log_dir": value.log_dir, "restored": list(value.restored)}
    if isinstance(value, LogDirStatus):  # the state store's word, which also knows what earlier runs did
        return {
            "kind": "status",
            "plan_id": plan.plan_id,
            "log_dir": value.log_dir,
            "partitions": [[p.partition, p.state.value] for p in value.partitions],
        }
    return None


# --- the state the plugin keeps ---------------------------------------------------------------------------------


@dataclass
class Tally:
    segments: int = 0
    bytes: int = 0

    def add(self, segments: int, nbytes: int) -> None:
        self.segments += segments
        self.bytes += nbytes

    def json(self) -> dict[str, int]:
        return {"segments": self.segments, "bytes": self.bytes}


COLUMNS = ("planned", "converted", "verified", "swapped", "failed", "skipped")


@dataclass
class PartitionProgress:
    log_dir: str
    name: str
    topic: str
    tallies: dict[str, Tally] = field(default_factory=lambda: {c: Tally() for c in COLUMNS})
    output_bytes: int = 0
    records: int = 0
    mtime_timestamped_records: int = 0
    rolled_back: bool = False
    stored_state: str | None = None  # what the state store said last (status stage), until an event changes it
    ranged: dict[int, int] = field(default_factory=dict)  # base offset -> bytes its ranges reported before its join

    @property
    def state(self) -> str:
        t = self.tallies
        if self.stored_state is not None:
            return self.stored_state
        if self.rolled_back:
            return "rolled-back"
        if t["swapped"].segments:
            return "migrated"
        if t["failed"].segments:
            return "failed"
        if not (t["verified"].segments or t["skipped"].segments):
            return "converting" if self.ranged else "planned"
        if t["verified"].segments + t["skipped"].segments >= t["planned"].segments:
            return "ready"
        return "converting"

    def json(self) -> dict[str, Any]:
        return {
            "log_dir": self.log_dir,
            "partition": self.name,
            "topic": self.topic,
            "state": self.state,
            **{c: self.tallies[c].json() for c in COLUMNS},
            "output_bytes": self.output_bytes,
            "records": self.records,
            "mtime_timestamped_records": self.mtime_timestamped_records,
        }


@dataclass
class Figures:
    """Counters of one (log dir, stage, outcome): what Prometheus exports."""

    segments: int = 0
    source_bytes: int = 0
    output_bytes: int = 0
    records: int = 0


class RunProgress:
    """Everything the monitor knows about the run of one plan, folded from events; JSON-able by ``status()``."""

    def __init__(self, plan_id: str, clock: Callable[[], float] = time.time) -> None:
        self.plan_id = plan_id
        self.clock = clock
        self.started = clock()
        self.updated = self.started
        self.options: dict[str, Any] = {}
        self.tool = ""
        self.hosts: dict[str, dict[str, Any]] = {}  # log dir -> host, broker id
        self.partitions: dict[tuple[str, str], PartitionProgress] = {}
        self.figures: dict[tuple[str, str, str], Figures] = {}
        self.failures: list[dict[str, Any]] = []
        self.per_second: dict[int, int] = {}  # second -> source bytes converted in it (work done, not skips)
        self.first_work: float | None = None
        self.last_work: float | None = None

    # folding events

    def plan(self, event: dict[str, Any]) -> None:
        self.options = event.get("options", {})
        self.tool = event.get("tool", "")
        for d in event["log_dirs"]:
            self.hosts[d["log_dir"]] = {"host": d.get("host"), "broker_id": d.get("broker_id")}
            for name, topic, segments, nbytes in d["partitions"]:
                part = self._partition(d["log_dir"], name, topic)
                part.tallies["planned"] = Tally(segments, nbytes)

    def _partition(self, log_dir: str, name: str, topic: str | None = None) -> PartitionProgress:
        key = (log_dir, name)
        part = self.partitions.get(key)
        if part is None:
            part = self.partitions[key] = PartitionProgress(log_dir, name, topic or name.rpartition("-")[0])
            self.hosts.setdefault(log_dir, {"host": None, "broker_id": None})
        return part

    def _figures(self, log_dir: str, stage: str, outcome: str) -> Figures:
        return self.figures.setdefault((log_dir, stage, outcome), Figures())

    def segment(self, event: dict[str, Any]) -> None:
        now = self.clock()
        self.updated = now
        if "range" in event:
            self._range(event["range"], now)
            return
        o = event["outcome"]
        outcome = o["outcome"]
        nbytes = o["source_bytes"] or event.get("planned_bytes", 0)
        part = self._partition(o["log_dir"], o["partition"])
        part.stored_state = None
        # bytes its ranges reported already count once: the segment adds what they did not
        ranged = part.ranged.pop(o["base_offset"], 0)
        if event.get("converted"):
            part.tallies["converted"].add(1, max(nbytes - ranged, 0))
        elif ranged:
            part.tallies["converted"].add(0, -ranged)  # reported by ranges, then not converted after all
        if outcome in (Outcome.VERIFIED.value, Outcome.UNCHANGED.value):
            part.tallies["verified"].add(1, nbytes)
            part.output_bytes += o["output_bytes"]
            part.records += o["records"]
            part.mtime_timestamped_records += event.get("mtime_timestamped_records", 0)
        elif outcome in (Outcome.REFUSED.value, Outcome.FAILED.value):
            part.tallies["failed"].add(1, nbytes)
            self._failure("convert", o["log_dir"], o["partition"], o["base_offset"], o.get("problem"), outcome)
        elif outcome == Outcome.SKIPPED.value:
            part.tallies["skipped"].add(1, nbytes)
        f = self._figures(o["log_dir"], "convert", outcome)
        f.segments += 1
        f.source_bytes += nbytes
        f.output_bytes += o["output_bytes"]
        f.records += o["records"]
        if outcome != Outcome.SKIPPED.value:
            self._worked(now, max(nbytes - ranged, 0))

    def _range(self, r: dict[str, Any], now: float) -> None:
        """A range of a segment converted in ranges: its bytes count as converted work now (rate, ETA), the segment
        when its join reports it."""
        part = self._partition(r["log_dir"], r["partition"])
        part.stored_state = None
        part.ranged[r["base_offset"]] = part.ranged.get(r["base_offset"], 0) + r["source_bytes"]
        part.tallies["converted"].add(0, r["source_bytes"])
        self._worked(now, r["source_bytes"])

    def _worked(self, now: float, nbytes: int) -> None:
        second = int(now)
        self.per_second[second] = self.per_second.get(second, 0) + nbytes
        self.first_work = now if self.first_work is None else self.first_work
        self.last_work = now

    def stage(self, event: dict[str, Any]) -> None:
        self.updated = self.clock()
        log_dir = event["log_dir"]
        if event["kind"] == "skipped":
            for name, _, nbytes in event["segments"]:
                self._partition(log_dir, name).tallies["skipped"].add(1, nbytes)
                f = self._figures(log_dir, "convert", Outcome.SKIPPED.value)
                f.segments += 1
                f.source_bytes += nbytes
        elif event["kind"] == "swap":
            for name in event["migrated"]:
                part = self._partition(log_dir, name)
                part.stored_state = None
                planned = part.tallies["planned"]
                part.tallies["swapped"] = Tally(planned.segments, planned.bytes)
                f = self._figures(log_dir, "swap", "swapped")
                f.segments += planned.segments
                f.source_bytes += planned.bytes
                f.output_bytes += part.output_bytes
                f.records += part.records
            for name, problem in event["failed"]:
                part = self._partition(log_dir, name)
                part.stored_state = None
                planned = part.tallies["planned"]
                part.tallies["failed"].add(planned.segments, planned.bytes)
                f = self._figures(log_dir, "swap", "failed")
                f.segments += planned.segments
                f.source_bytes += planned.bytes
                self._failure("swap", log_dir, name, None, problem, "failed")
        elif event["kind"] == "rollback":
            for name in event["restored"]:
                part = self._partition(log_dir, name)
                part.rolled_back, part.stored_state = True, None
        elif event["kind"] == "status":
            for name, state in event["partitions"]:
                part = self._partition(log_dir, name)
                part.stored_state = state
                planned = part.tallies["planned"]
                if state == "migrated" and not part.tallies["swapped"].segments:  # by an earlier run
                    part.tallies["swapped"] = Tally(planned.segments, planned.bytes)

    def task_failed(self, stage: str, key: str, message: str) -> None:
        self.updated = self.clock()
        self.failures.append(
            {"stage": stage, "task": key, "outcome": "erred", "log_dir": None, "partition": None, "message": message}
        )

    def _failure(self, stage: str, log_dir: str, partition: str, base: int | None, problem: Any, outcome: str) -> None:
        p = from_json(Problem, problem) if isinstance(problem, dict) else None
        self.failures.append(
            {
                "stage": stage,
                "outcome": outcome,
                "log_dir": log_dir,
                "partition": partition,
                "base_offset": base,
                "file": p.path if p else None,
                "position": p.position if p else None,
                "offset": p.offset if p else None,
                "kind": p.kind if p else None,
                "message": p.message.split("\n", 1)[0] if p else "",  # a bug's traceback belongs in the run log
            }
        )

    # what it adds up to

    def totals(self, parts: list[PartitionProgress] | None = None) -> dict[str, Any]:
        parts = list(self.partitions.values()) if parts is None else parts
        out: dict[str, Any] = {c: Tally() for c in COLUMNS}
        for p in parts:
            for c in COLUMNS:
                out[c].add(p.tallies[c].segments, p.tallies[c].bytes)
        in_ranges = sum(sum(p.ranged.values()) for p in parts)  # converted ranges of segments not yet joined
        pending = Tally(
            max(
                0, out["planned"].segments - out["verified"].segments - out["failed"].segments - out["skipped"].segments
            ),
            max(
                0, out["planned"].bytes - out["verified"].bytes - out["failed"].bytes - out["skipped"].bytes - in_ranges
            ),
        )
        body = {c: out[c].json() for c in COLUMNS}
        body["pending"] = pending.json()
        body["output_bytes"] = sum(p.output_bytes for p in parts)
        body["records"] = sum(p.records for p in parts)
        states: dict[str, int] = {}
        for p in parts:
            states[p.state] = states.get(p.state, 0) + 1
        body["partitions"] = dict(sorted(states.items()))
        return body

    def rate(self, now: float | None = None) -> float:
        """Bytes per second over the last ``RATE_WINDOW_SECONDS`` of work (or since the work began)."""
        if self.first_work is None:
            return 0.0
        now = self.clock() if now is None else now
        since = max(self.first_work, now - RATE_WINDOW_SECONDS)
        done = sum(b for s, b in self.per_second.items() if s >= int(since))
        span = max(now - since, 1.0)
        return done / span

    def eta_seconds(self, now: float | None = None) -> float | None:
        pending = self.totals()["pending"]["bytes"]
        if pending == 0:
            return 0.0 if self.partitions else None
        rate = self.rate(now)
        return round(pending / rate, 1) if rate > 0 else None

    def series(self) -> list[list[float]]:
        """[seconds since the run began, MB/s] in at most ``MAX_SERIES_POINTS`` buckets."""
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
            [round(max(0.0, start + b * width - self.started), 1), round(buckets.get(b, 0) / width / 1e6, 6)]
            for b in range(last + 1)
        ]

    def status(self, partition_limit: int | None = None) -> dict[str, Any]:
        now = self.clock()
        parts = sorted(self.partitions.values(), key=_attention)
        by_dir: dict[str, list[PartitionProgress]] = {}
        for p in self.partitions.values():
            by_dir.setdefault(p.log_dir, []).append(p)
        totals = self.totals()
        rate = self.rate(now)
        return {
            "plan": {
                "plan_id": self.plan_id,
                "tool": self.tool,
                "options": self.options,
                "partitions": len(self.partitions),
                "segments": totals["planned"]["segments"],
                "bytes": totals["planned"]["bytes"],
            },
            "started": self.started,
            "updated": self.updated,
            "elapsed_seconds": round(now - self.started, 1),
            "totals": totals,
            "rate": {
                "bytes_per_s": round(rate),
                "mb_per_s": round(rate / 1e6, 3),
                "average_mb_per_s": round(_average(self) / 1e6, 3),
                "eta_seconds": self.eta_seconds(now),
                "series": self.series(),
            },
            "log_dirs": [
                {"log_dir": d, **self.hosts.get(d, {}), **self.totals(ps)} for d, ps in sorted(by_dir.items())
            ],
            "partitions": [p.json() for p in (parts if partition_limit is None else parts[:partition_limit])],
            "failures": self.failures,
        }


def _average(run: RunProgress) -> float:
    if run.first_work is None or run.last_work is None:
        return 0.0
    return sum(run.per_second.values()) / max(run.last_work - run.first_work, 1.0)


_ATTENTION = {"failed": 0, "converting": 1, "ready": 2, "planned": 3, "migrated": 4, "rolled-back": 5}


def _attention(p: PartitionProgress) -> tuple[int, str, str]:
    """Partitions that need a look first: failed, then in progress, then the rest."""
    return (_ATTENTION.get(p.state, 9), p.log_dir, p.name)


# --- the scheduler plugin ----------------------------------------------------------------------------------------


def stage_of(key: Any) -> str | None:
    name = key if isinstance(key, str) else str(key)
    stage = name.split("-", 1)[0]
    return stage if stage in STAGES else None


class MigrationPlugin(SchedulerPlugin):
    """Folds the workers' segment events into per-plan progress; counts tasks per stage; serves the collector."""

    name = PLUGIN_NAME
    idempotent = True  # a scheduler that already watches (a preload, an earlier run) keeps what it has seen

    def __init__(self) -> None:
        self.runs: dict[str, RunProgress] = {}
        self.current: str | None = None
        self.tasks: dict[str, dict[str, int]] = {s: {"done": 0, "erred": 0} for s in STAGES}
        self.scheduler: Any = None
        self.collector: MigrationCollector | None = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.collector = register_collector(self)
        link_from_dask_pages(scheduler)

    async def close(self) -> None:
        if self.collector is not None:
            unregister_collector(self.collector)
            self.collector = None

    def run(self, plan_id: str | None) -> RunProgress:
        plan_id = plan_id or self.current or "unknown"
        run = self.runs.get(plan_id)
        if run is None:
            run = self.runs[plan_id] = RunProgress(plan_id)
        self.current = plan_id
        return run

    def log_event(self, topic: str, msg: Any) -> None:
        if topic == SEGMENT_TOPIC:
            self.run(msg.get("plan_id")).segment(msg)
        elif topic == STAGE_TOPIC:
            self.run(msg.get("plan_id")).stage(msg)
        elif topic == PLAN_TOPIC:
            self.run(msg["plan_id"]).plan(msg)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        stage = stage_of(key)
        if stage is None or finish not in ("memory", "erred"):
            return
        state = "done" if finish == "memory" else "erred"
        self.tasks[stage][state] += 1
        if state == "erred" and self.current is not None:
            text = kwargs.get("exception_text") or ""
            self.run(self.current).task_failed(stage, str(key), str(text))

    def pending(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self.scheduler is None:
            return out
        for key, ts in self.scheduler.tasks.items():
            stage = stage_of(key)
            if stage and ts.state not in ("memory", "erred", "forgotten", "released"):
                out[stage] = out.get(stage, 0) + 1
        return out

    def status(self, partition_limit: int | None = None) -> dict[str, Any]:
        run = self.runs.get(self.current) if self.current else None
        body: dict[str, Any] = run.status(partition_limit) if run else {"plan": None}
        pending = self.pending()
        body["stages"] = {s: {**c, "pending": pending.get(s, 0)} for s, c in self.tasks.items()}
        body["stage"] = next((s for s in STAGES if pending.get(s)), None)
        body["workers"] = len(self.scheduler.workers) if self.scheduler is not None else 0
        body["tool_version"] = __version__
        return body


def plugin_of(scheduler: Any) -> MigrationPlugin | None:
    plugin = scheduler.plugins.get(PLUGIN_NAME)
    return plugin if isinstance(plugin, MigrationPlugin) else None


def link_from_dask_pages(scheduler: Any) -> None:
    """Put "Migration" in the navigation bar of Dask's own pages (/status, /workers ...). Dask has no API for this:
    its bokeh pages take their links from a list built once per scheduler, which we extend; if a Dask version builds
    it differently, the pages just lack the link (the /migration page links back to /status either way)."""
    try:
        from distributed.dashboard.scheduler import template_variables

        pages = template_variables(scheduler)["pages"]
        if "migration" not in pages:
            pages.append("migration")
    except Exception as exc:  # no bokeh, or another Dask: a missing link is not worth failing a migration
        logger.debug("no link to /migration on Dask's pages: %s", exc)


# --- Prometheus -------------------------------------------------------------------------------------------------


class MigrationCollector:
    """Prometheus metrics built from the plugin's state at each scrape (no counter lives between scrapes)."""

    def __init__(self, plugin: MigrationPlugin) -> None:
        self.plugin = plugin

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["log_dir", "stage", "outcome"]
        segments = CounterMetricFamily(
            "kafka_log_migrate_segments", "Segments finished, by log dir, stage and outcome", labels=labels
        )
        source = CounterMetricFamily(
            "kafka_log_migrate_source_bytes",
            "Bytes of the legacy source segments finished, by log dir, stage and outcome",
            labels=labels,
        )
        output = CounterMetricFamily(
            "kafka_log_migrate_output_bytes",
            "Bytes of the converted segments written, by log dir, stage and outcome",
            labels=labels,
        )
        records = CounterMetricFamily(
            "kafka_log_migrate_records",
            "Records of the segments finished, by log dir, stage and outcome",
            labels=labels,
        )
        summed: dict[tuple[str, str, str], Figures] = {}
        for run in self.plugin.runs.values():  # every run this scheduler watched: counters never go down
            for key, f in run.figures.items():
                s = summed.setdefault(key, Figures())
                s.segments += f.segments
                s.source_bytes += f.source_bytes
                s.output_bytes += f.output_bytes
                s.records += f.records
        for key, f in sorted(summed.items()):
            segments.add_metric(list(key), f.segments)
            source.add_metric(list(key), f.source_bytes)
            output.add_metric(list(key), f.output_bytes)
            records.add_metric(list(key), f.records)
        yield from (segments, source, output, records)

        tasks = CounterMetricFamily(
            "kafka_log_migrate_tasks", "Engine tasks finished, by stage and final state", labels=["stage", "state"]
        )
        for stage, counts in self.plugin.tasks.items():
            for state, n in counts.items():
                tasks.add_metric([stage, state], n)
        yield tasks

        run = self.plugin.runs.get(self.plugin.current) if self.plugin.current else None
        partitions = GaugeMetricFamily(
            "kafka_log_migrate_partitions",
            "Planned partitions of the current plan, by log dir and state",
            labels=["log_dir", "state"],
        )
        planned_segments = GaugeMetricFamily(
            "kafka_log_migrate_planned_segments", "Segments the current plan converts, by log dir", labels=["log_dir"]
        )
        planned_bytes = GaugeMetricFamily(
            "kafka_log_migrate_planned_bytes", "Source bytes the current plan converts, by log dir", labels=["log_dir"]
        )
        info = GaugeMetricFamily(
            "kafka_log_migrate_plan_info", "The plan being watched (always 1)", labels=["plan_id", "version"]
        )
        rate = GaugeMetricFamily(
            "kafka_log_migrate_throughput_bytes_per_second",
            f"Source bytes converted per second over the last {RATE_WINDOW_SECONDS:.0f} s of work",
        )
        eta = GaugeMetricFamily(
            "kafka_log_migrate_eta_seconds", "Seconds until every planned segment is converted, at the current rate"
        )
        if run is not None:
            info.add_metric([run.plan_id, __version__], 1)
            by_dir: dict[str, list[PartitionProgress]] = {}
            for p in run.partitions.values():
                by_dir.setdefault(p.log_dir, []).append(p)
            for log_dir, parts in sorted(by_dir.items()):
                counts: dict[str, int] = {}
                for p in parts:
                    counts[p.state] = counts.get(p.state, 0) + 1
                for state, n in sorted(counts.items()):
                    partitions.add_metric([log_dir, state], n)
                planned_segments.add_metric([log_dir], sum(p.tallies["planned"].segments for p in parts))
                planned_bytes.add_metric([log_dir], sum(p.tallies["planned"].bytes for p in parts))
            rate.add_metric([], run.rate())
            remaining = run.eta_seconds()
            if remaining is not None:
                eta.add_metric([], remaining)
        yield from (partitions, planned_segments, planned_bytes, info, rate, eta)


def register_collector(plugin: MigrationPlugin) -> MigrationCollector | None:
    try:
        from prometheus_client import REGISTRY
    except ImportError:  # /metrics then says Prometheus is not available; /migration still works
        return None
    collector = MigrationCollector(plugin)
    try:
        REGISTRY.register(collector)
    except ValueError:  # another scheduler of this process already exports its migration (a test's second cluster)
        logger.info("kafka-log-migrate metrics are exported by another scheduler of this process")
        return None
    return collector


def unregister_collector(collector: MigrationCollector) -> None:
    from prometheus_client import REGISTRY

    with contextlib.suppress(KeyError):  # unregistered already
        REGISTRY.unregister(collector)


# --- worker logs to the client ----------------------------------------------------------------------------------

FORWARDED_LOGGERS = ("distributed", "migrate")


class _EventLogHandler(logging.Handler):
    """Publishes each record as an event the client subscribes to (the worker's stderr is not the operator's)."""

    def __init__(self, worker: Any) -> None:
        super().__init__(logging.WARNING)
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.worker.log_event(
                LOG_TOPIC,
                {
                    "name": record.name,
                    "levelno": record.levelno,
                    "levelname": record.levelname,
                    "msg": self.format(record),
                    "created": record.created,
                    "worker": str(self.worker.address),
                },
            )
        except Exception:
            self.handleError(record)


class ForwardWorkerLogs(WorkerPlugin):
    """Warnings and errors of worker processes (Dask's "Compute Failed" included) go to the client as events,
    where the run log takes them, instead of to a LocalCluster's terminal. ``silence``: also stop printing them on
    the worker's own stderr (a LocalCluster's, which is the operator's terminal; a remote worker keeps its log)."""

    name = "kafka-log-migrate-logs"

    def __init__(self, silence: bool) -> None:
        self.silence = silence
        self.client = (os.getpid(), socket.gethostname())
        self.handler: _EventLogHandler | None = None
        self.saved: dict[str, tuple[list[logging.Handler], bool]] = {}

    def setup(self, worker: Any) -> None:
        if (os.getpid(), socket.gethostname()) == self.client:
            return  # a worker thread of the client's own process: its records reach the run log directly
        self.handler = _EventLogHandler(worker)
        for name in FORWARDED_LOGGERS:
            log = logging.getLogger(name)
            self.saved[name] = (list(log.handlers), log.propagate)
            if self.silence:
                for h in list(log.handlers):
                    if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                        log.removeHandler(h)
                log.propagate = False
            log.addHandler(self.handler)

    def teardown(self, worker: Any) -> None:
        for name, (handlers, propagate) in self.saved.items():
            log = logging.getLogger(name)
            for h in list(log.handlers):
                log.removeHandler(h)
            if self.silence:
                # a LocalCluster's worker is closing with the run: its last heartbeats fail against the closed
                # scheduler, and those tracebacks must not land on the operator's terminal after the report (a
                # logger with no handler at all would print them through logging's last resort)
                log.addHandler(logging.NullHandler())
                continue
            for h in handlers:
                log.addHandler(h)
            log.propagate = propagate
        self.saved.clear()


def reemit_worker_log(event: tuple[float, dict[str, Any]]) -> None:
    """Client side of ``ForwardWorkerLogs``: the record goes to the logger of the same name in this process."""
    _, msg = event
    record = logging.makeLogRecord(
        {
            "name": msg["name"],
            "levelno": msg["levelno"],
            "levelname": msg["levelname"],
            "msg": f"[worker {msg.get('worker', '?')}] {msg['msg']}",
            "args": None,
            "created": msg.get("created", time.time()),
        }
    )
    logging.getLogger(msg["name"]).handle(record)


# --- HTTP: /migration and /migration/status.json ----------------------------------------------------------------


class StatusJSON(RequestHandler):
    def get(self) -> None:
        plugin = plugin_of(self.server)
        limit = self.get_argument("partitions", None)
        body = plugin.status(int(limit) if limit else None) if plugin else {"plan": None, "error": "no plugin"}
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))


class StatusPage(RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE)


routes: list[tuple] = [("/migration/status.json", StatusJSON, {}), ("/migration", StatusPage, {})]


def dask_setup(scheduler: Any) -> None:
    """``dask scheduler --preload migrate.monitor``: the plugin, and the routes unless the config has them."""
    import dask
    from distributed.http.utils import get_handlers

    scheduler.add_plugin(MigrationPlugin(), name=PLUGIN_NAME, idempotent=True)
    if __name__ not in dask.config.get("distributed.scheduler.http.routes"):
        prefix = dask.config.get("distributed.scheduler.http.prefix", default="") or ""
        scheduler.http_application.add_handlers(r".*", get_handlers(scheduler, [__name__], prefix))


PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kafka-log-migrate: migration</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em 2em;color:#222}
h1{font-size:20px;margin:0 0 .3em}h2{font-size:16px;margin:1.4em 0 .4em}
table{border-collapse:collapse}td,th{padding:3px 10px;text-align:left;border-bottom:1px solid #eee}
th{background:#f3f3f3}.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#eee;height:18px;width:640px;border-radius:3px;overflow:hidden}
.bar div{background:#3b7ddd;height:100%}.failed{color:#b00020}.muted{color:#777}
nav a{margin-right:1em}
</style></head>
<body>
<nav><a href="status">Dask dashboard</a><a href="migration/status.json">status.json</a>
<a href="metrics">metrics</a></nav>
<h1>kafka-log-migrate migration</h1>
<p id="plan" class="muted">waiting for a plan&hellip;</p>
<div class="bar"><div id="done" style="width:0"></div></div>
<p id="line"></p>
<h2>Throughput (MB/s)</h2><svg id="chart" width="640" height="140" role="img" aria-label="MB/s over time"></svg>
<h2>Tasks by stage</h2><table id="stages"></table>
<h2>Log dirs</h2><table id="dirs"></table>
<h2>Partitions</h2><p class="muted">failed and unfinished first; the first 300</p><table id="parts"></table>
<h2>Failures</h2><table id="failures"></table>
<script>
"use strict";
const COLS = ["planned", "converted", "verified", "swapped", "failed", "skipped", "pending"];
const $ = (id) => document.getElementById(id);
function mb(n) {  // as the command line prints bytes: B, KB, MB, GB, TB (powers of 1000)
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return i ? n.toFixed(1) + " " + units[i] : n + " B";
}
const esc = (s) => String(s == null ? "" : s).replace(/[&<>"]/g, (c) => "&#" + c.charCodeAt(0) + ";");
const isNum = (c) => /^[\d.,\s\/]+(B|KB|MB|GB|TB)?$/.test(String(c));
const cell = (tag, c) => `<${tag}${isNum(c) ? ' class="num"' : ""}>${c}</${tag}>`;
const row = (tag, cells) => "<tr>" + cells.map((c) => cell(tag, c)).join("") + "</tr>";
function eta(s) {
  if (s == null) return "unknown";
  s = Math.round(s);
  if (s >= 3600) return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  return s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s";
}
const figures = (t) => COLS.map((c) => (t[c] ? `${t[c].segments} / ${mb(t[c].bytes)}` : ""));
const heads = COLS.map((c) => `${c}<br><span class="muted">segments / bytes</span>`);
function pendingOf(p) {
  const left = (k) => p.planned[k] - p.verified[k] - p.failed[k] - p.skipped[k];
  return { ...p, pending: { segments: left("segments"), bytes: left("bytes") } };
}
function chart(series) {
  const svg = $("chart"), W = 640, H = 140;
  if (!series.length) { svg.innerHTML = '<text x="10" y="70" fill="#777">no segment converted yet</text>'; return; }
  const maxT = Math.max(1, series[series.length - 1][0]), maxV = Math.max(...series.map((p) => p[1]), 0.001);
  const xy = (p) => (30 + (p[0] / maxT) * (W - 40)).toFixed(1) + "," + (H - 20 - (p[1] / maxV) * (H - 35)).toFixed(1);
  svg.innerHTML = `<polyline fill="none" stroke="#3b7ddd" stroke-width="2" points="${series.map(xy).join(" ")}"/>` +
    `<text x="2" y="14" font-size="11">${maxV.toFixed(1)}</text><text x="2" y="${H - 20}" font-size="11">0</text>` +
    `<text x="${W - 60}" y="${H - 4}" font-size="11">${maxT.toFixed(0)} s</text>`;
}
async function refresh() {
  let s;
  try { s = await (await fetch("migration/status.json?partitions=300", { cache: "no-store" })).json(); }
  catch (e) { $("line").textContent = "the scheduler does not answer (the run ended?): " + e; return; }
  if (!s.plan) return;
  const t = s.totals, planned = t.planned.bytes, done = planned - t.pending.bytes;
  const pct = planned ? (100 * done) / planned : 0;
  $("plan").textContent = `plan ${s.plan.plan_id}: ${s.plan.partitions} partitions, ${s.plan.segments} segments, ` +
    `${mb(planned)} | stage: ${s.stage || (t.pending.segments ? "idle" : "done")} | workers: ${s.workers} | ` +
    `kafka-log-migrate ${s.tool_version}`;
  $("done").style.width = pct.toFixed(1) + "%";
  $("line").innerHTML = `${mb(done)} of ${mb(planned)} (${pct.toFixed(0)}%), ${mb(s.rate.bytes_per_s)}/s, ` +
    `ETA ${eta(s.rate.eta_seconds)}, <span class="${s.failures.length ? "failed" : ""}">` +
    `${s.failures.length} failed</span>, output ${mb(t.output_bytes)}, ${t.records} records`;
  chart(s.rate.series);
  const stages = Object.entries(s.stages).filter(([, v]) => v.done || v.pending || v.erred);
  $("stages").innerHTML = row("th", ["stage", "done", "pending", "erred"]) +
    stages.map(([k, v]) => row("td", [k, v.done, v.pending, v.erred])).join("");
  $("dirs").innerHTML = row("th", ["log dir", ...heads]) +
    s.log_dirs.map((d) => row("td", [esc(d.log_dir) + (d.host ? " @ " + esc(d.host) : ""), ...figures(d)])).join("");
  $("parts").innerHTML = row("th", ["partition", "state", ...heads]) + s.partitions.map((p) =>
    row("td", [`${esc(p.partition)} <span class="muted">${esc(p.log_dir)}</span>`, p.state, ...figures(pendingOf(p))])
  ).join("");
  $("failures").innerHTML = !s.failures.length ? row("td", ["none"]) :
    row("th", ["file", "byte position", "partition", "stage", "kind", "message"]) + s.failures.map((f) =>
      row("td", [esc(f.file || f.task), f.position == null ? "" : f.position, esc(f.partition), esc(f.stage),
        esc(f.kind || f.outcome), esc(f.message)])
    ).join("");
  document.body.dataset.plan = s.plan.plan_id;
}
refresh();
setInterval(refresh, 2000);
</script></body></html>"""
