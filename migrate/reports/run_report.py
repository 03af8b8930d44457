"""The report of a run, for the audit afterwards: one row per planned segment as an Arrow table (written as Parquet,
for pandas, DuckDB or Spark) and its summary; ``migrate.reports.report_page`` renders the HTML page from that table.

The rows come from the run's state (``migrate.run.state``): in each log dir while a run has state there, else from the
copy archived beside the plan by finalize or rollback. A log dir on another host is read where it lives, by a stage
function on the engine, as ``status`` does. The summary (segments, bytes before and after, growth, duration,
throughput, failures) is computed from the table, so the page, the Parquet file and ``execute``'s last lines agree.

When each segment finished: the state commits a task's outcomes together, so a segment's own finish time is the
commit time less the seconds of the segments the same task did after it (a task runs its segments in plan order).
The run's duration is the union, over log dirs, of each run's span (its start to its end, or to its last recorded
outcome if it crashed).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from migrate import __version__
from migrate.codec import from_json, to_json
from migrate.engines import Engine, StageCall
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import Plan
from migrate.model.run_state import EventKind, Problem, SegmentState, Stage
from migrate.model.stage_reports import CutoverReport
from migrate.run.state import ResultColumns, StateHealth, StateStore
from migrate.run.workspace import durable_file
from migrate.units import human_bytes, human_rate, human_seconds

SEGMENT_EVENTS = (
    EventKind.SEGMENT_VERIFIED,
    EventKind.SEGMENT_UNCHANGED,
    EventKind.SEGMENT_REFUSED,
    EventKind.SEGMENT_FAILED,
)
RUN_EVENTS = (EventKind.RUN_STARTED, EventKind.RUN_ENDED)
NOT_CONVERTED = (SegmentState.PLANNED.value, SegmentState.REFUSED.value, SegmentState.FAILED.value)

SCHEMA = pa.schema(
    [
        ("plan_id", pa.string()),
        ("log_dir", pa.string()),
        ("host", pa.string()),
        ("broker_id", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("partition_dir", pa.string()),
        ("partition_state", pa.string()),
        ("base_offset", pa.int64()),
        ("file", pa.string()),
        ("state", pa.string()),
        ("converted", pa.bool_()),
        ("planned_bytes", pa.int64()),
        ("source_bytes", pa.int64()),
        ("output_bytes", pa.int64()),
        ("records", pa.int64()),
        ("batches_out", pa.int64()),
        ("entries_v0", pa.int64()),
        ("entries_v1", pa.int64()),
        ("entries_v2", pa.int64()),
        ("first_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("timestamps_policy", pa.string()),
        ("mtime_timestamped_records", pa.int64()),
        ("truncated_tail_bytes", pa.int64()),
        ("convert_seconds", pa.float64()),
        ("verify_seconds", pa.float64()),
        ("seconds", pa.float64()),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
        ("problem_kind", pa.string()),
        ("problem_message", pa.string()),
        ("problem_file", pa.string()),
        ("problem_position", pa.int64()),
        ("problem_offset", pa.int64()),
        ("output_segments", pa.int32()),  # a split source became several; null where not converted
    ]
)


# --- reading the state ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StateRows:
    """What the state of one log dir holds for the report (plain data: it travels back from a worker)."""

    log_dir: str
    segments: list[tuple[Any, ...]]
    partitions: list[tuple[str, str, str | None]]
    segment_events: list[tuple[float, str, str | None, int | None]]
    run_events: list[tuple[float, str, str | None, int | None]]

    @classmethod
    def of(cls, store: StateStore, log_dir: str) -> StateRows:
        return cls(
            log_dir,
            store.segment_records(),
            store.partition_records(),
            store.event_records(SEGMENT_EVENTS),
            store.event_records(RUN_EVENTS),
        )


def state_rows(plan: Plan, key: str) -> StateRows | None:
    """Stage function: the report's rows of one log dir's state, None if no run of the plan has state there."""
    log_dir = plan.log_dir(key).log_dir
    # a database that is not this plan's usable state (another plan's under its name, a torn one) reports nothing:
    # its rows would describe a run that did not happen here (the verbs name what is wrong with it)
    if StateStore.health(log_dir, plan.plan_id) != StateHealth.OK:
        return None
    with StateStore.open(log_dir, plan.plan_id) as store:
        return StateRows.of(store, key)


def archived_rows(plan_path: str | Path, log_dir: str) -> StateRows | None:
    from migrate.pipeline import archive_path

    path = archive_path(plan_path, log_dir)
    if not path.exists():
        return None
    with StateStore.open_file(path) as store:
        return StateRows.of(store, log_dir)


def collect(plan: Plan, engine: Engine, plan_path: str | Path | None = None) -> tuple[list[StateRows], list[str]]:
    """Every log dir's rows (from the log dir, else the archive beside the plan), and the errors of those that
    could be read neither way."""
    calls = [StageCall((d.key,), d.host, plan, d.key) for d in plan.log_dirs]
    results = engine.map(Stage.REPORT, state_rows, calls)
    rows: list[StateRows] = []
    errors: list[str] = []
    for call, r in zip(calls, results):
        log_dir = call.log_dir
        found = r.value if r.ok else None
        if found is None and plan_path is not None:
            found = archived_rows(plan_path, log_dir)
        if found is not None:
            rows.append(found)
        elif not r.ok:
            errors.append(f"{log_dir}: {r.error}")
    return rows, errors


# --- the table --------------------------------------------------------------------------------------------------


def _finish_times(plan: Plan, rows: StateRows, seconds: dict[tuple[str, int], float]) -> dict[tuple[str, int], float]:
    committed: dict[tuple[str, int], float] = {}
    for at, _, part, base in rows.segment_events:
        if part is not None and base is not None:
            committed[(part, base)] = at  # the last outcome recorded wins (a retried segment)
    out: dict[tuple[str, int], float] = {}
    for task in plan.tasks_of(rows.log_dir):
        groups: dict[float, list[tuple[str, int]]] = {}
        for ref in task.segments:
            key = (ref.partition, ref.base_offset)
            if key in committed:
                groups.setdefault(committed[key], []).append(key)
        for at, keys in groups.items():
            later = 0.0
            for key in reversed(keys):  # the task's last segment finished just before the commit
                out[key] = at - later
                later += seconds.get(key, 0.0)
    return out


def run_spans(rows: Iterable[StateRows]) -> list[tuple[float, float]]:
    """Each run of each log dir as (start, end), merged where they overlap (log dirs of one run run together)."""
    spans: list[tuple[float, float]] = []
    for r in rows:
        outcomes = sorted(at for at, *_ in r.segment_events)

        def last_outcome(start: float, limit: float, outcomes: list[float] = outcomes) -> float | None:
            return max((at for at in outcomes if start <= at < limit), default=None)

        spans += log_dir_spans(r.run_events, last_outcome)
    return merge_spans(spans)


def log_dir_spans(
    run_events: list[tuple[float, str, str | None, int | None]],
    last_outcome: Callable[[float, float], float | None],
) -> list[tuple[float, float]]:
    """One log dir's runs as (start, end); a run that crashed ends at its last recorded outcome
    (``last_outcome(start, limit)``: the latest segment event in [start, limit), None if none)."""
    spans: list[tuple[float, float]] = []
    starts = [at for at, kind, *_ in run_events if kind == EventKind.RUN_STARTED.value]
    ends = [at for at, kind, *_ in run_events if kind == EventKind.RUN_ENDED.value]
    for i, start in enumerate(starts):
        limit = starts[i + 1] if i + 1 < len(starts) else math.inf
        end = next((e for e in ends if start <= e < limit), None)
        if end is None:
            end = last_outcome(start, limit)
            end = start if end is None else end
        spans.append((start, end))
    return spans


def merge_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def build_table(plan: Plan, rows: list[StateRows], plan_path: str | Path | None = None) -> pa.Table:
    """One row per planned segment of every log dir with state; schema metadata: plan id, options, versions, run
    spans."""
    columns: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    policy = str(plan.options.timestamps)
    for r in rows:
        d = plan.log_dir(r.log_dir)
        stored = {(s[0], s[1]): s for s in r.segments}
        part_state = {name: state for name, state, _ in r.partitions}
        seconds = {key: float(s[8] or 0) + float(s[9] or 0) for key, s in stored.items()}
        finished = _finish_times(plan, r, seconds)
        for p in d.partitions:
            for seg in p.segments:
                key = (p.name, seg.base_offset)
                s = stored.get(key)
                state = s[2] if s else SegmentState.PLANNED.value
                result = ResultColumns.of(s[3]) if s and s[3] else None
                problem = from_json(Problem, json.loads(s[4])) if s and s[4] else None
                # a result's counts are keyed as its JSON row spells them ("0".."2"), the plan's by int
                magics = (
                    {int(m): n for m, n in result.magics_in.items()} if result is not None else seg.entries_by_magic
                )
                converted = result is not None and state not in NOT_CONVERTED
                at = finished.get(key)
                row = {
                    "plan_id": plan.plan_id,
                    "log_dir": d.label,
                    "host": d.host,
                    "broker_id": d.broker_id,
                    "topic": p.topic,
                    "partition": p.partition,
                    "partition_dir": p.name,
                    "partition_state": part_state.get(p.name, "planned"),
                    "base_offset": seg.base_offset,
                    "file": f"{p.dir}/{seg.file}",
                    "state": state,
                    "converted": converted,
                    "planned_bytes": seg.size,
                    "source_bytes": int(s[5]) if s else 0,
                    "output_bytes": int(s[6]) if s else 0,
                    "records": int(s[7]) if s else 0,
                    "batches_out": result.batches_out if result is not None else None,
                    "entries_v0": int(magics.get(0, 0)),
                    "entries_v1": int(magics.get(1, 0)),
                    "entries_v2": int(magics.get(2, 0)),
                    "first_offset": result.first_offset if result is not None else None,
                    "last_offset": result.last_offset if result is not None else None,
                    "timestamps_policy": policy,
                    "mtime_timestamped_records": result.mtime_timestamped_records if result is not None else 0,
                    "truncated_tail_bytes": result.truncated_tail_bytes if result is not None else 0,
                    "convert_seconds": float(s[8]) if s else 0.0,
                    "verify_seconds": float(s[9]) if s else 0.0,
                    "seconds": seconds.get(key, 0.0),
                    "finished_at": None if at is None else int(at * 1000),
                    "problem_kind": problem.kind if problem else None,
                    "problem_message": problem.message if problem else None,
                    "problem_file": problem.path if problem else None,
                    "problem_position": problem.position if problem else None,
                    "problem_offset": problem.offset if problem else None,
                    "output_segments": result.output_count if converted and result is not None else None,
                }
                for name, value in row.items():
                    columns[name].append(value)
    spans = run_spans(rows)
    metadata = {
        "plan_id": plan.plan_id,
        "plan_tool": plan.tool,
        "plan_created": plan.created,
        "plan_path": str(plan_path or ""),
        "options": json.dumps(to_json(plan.options), sort_keys=True),
        "tool_version": __version__,
        "report_created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_spans": json.dumps(spans),
        "log_dirs": json.dumps([d.log_dir for d in plan.log_dirs]),
        "log_dirs_with_state": json.dumps([r.log_dir for r in rows]),
    }
    return pa.table(columns, schema=SCHEMA).replace_schema_metadata(metadata)


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    target = Path(path)
    with durable_file(target) as f:
        pq.write_table(table, f)
    return target


# --- the summary ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    log_dir: str
    partition: str
    file: str
    position: int | None
    offset: int | None
    kind: str
    message: str


@dataclass(frozen=True)
class Summary:
    plan_id: str
    planned_segments: int
    planned_bytes: int
    states: dict[str, int]  # segment state -> count
    converted_segments: int
    bytes_before: int  # source bytes of the converted segments
    bytes_after: int
    records: int
    duration_seconds: float
    mtime_partitions: int
    partitions: int
    partition_states: dict[str, int]
    failures: tuple[Failure, ...] = field(default_factory=tuple)

    @property
    def growth(self) -> float | None:
        return (self.bytes_after - self.bytes_before) / self.bytes_before if self.bytes_before else None

    @property
    def throughput(self) -> float:
        """Source bytes converted per second of the run's duration."""
        return self.bytes_before / self.duration_seconds if self.duration_seconds > 0 else 0.0


def table_metadata(table: pa.Table) -> dict[str, str]:
    """The table's schema metadata (plan id, options, versions, run spans: see ``build_table``)."""
    return {key.decode(): value.decode() for key, value in (table.schema.metadata or {}).items()}


def summarize(table: pa.Table) -> Summary:
    rows = table.select(
        [
            "log_dir",
            "partition_dir",
            "partition_state",
            "state",
            "converted",
            "planned_bytes",
            "source_bytes",
            "output_bytes",
            "records",
            "mtime_timestamped_records",
            "file",
            "problem_kind",
            "problem_message",
            "problem_file",
            "problem_position",
            "problem_offset",
        ]
    ).to_pylist()
    states: dict[str, int] = {}
    partitions: dict[tuple[str, str], str] = {}
    mtime: set[tuple[str, str]] = set()
    failures = []
    for r in rows:
        states[r["state"]] = states.get(r["state"], 0) + 1
        partitions[(r["log_dir"], r["partition_dir"])] = r["partition_state"]
        if r["mtime_timestamped_records"]:
            mtime.add((r["log_dir"], r["partition_dir"]))
        if r["problem_kind"] is not None:
            failures.append(
                Failure(
                    r["log_dir"],
                    r["partition_dir"],
                    r["problem_file"] or r["file"],
                    r["problem_position"],
                    r["problem_offset"],
                    r["problem_kind"],
                    r["problem_message"] or "",
                )
            )
    converted = [r for r in rows if r["converted"]]
    partition_states: dict[str, int] = {}
    for state in partitions.values():
        partition_states[state] = partition_states.get(state, 0) + 1
    meta = table_metadata(table)
    spans = json.loads(meta.get("run_spans") or "[]")
    return Summary(
        plan_id=meta.get("plan_id", ""),
        planned_segments=len(rows),
        planned_bytes=sum(r["planned_bytes"] for r in rows),
        states=dict(sorted(states.items())),
        converted_segments=len(converted),
        bytes_before=sum(r["source_bytes"] for r in converted),
        bytes_after=sum(r["output_bytes"] for r in converted),
        records=sum(r["records"] for r in converted),
        duration_seconds=round(sum(end - start for start, end in spans), 3),
        mtime_partitions=len(mtime),
        partitions=len(partitions),
        partition_states=dict(sorted(partition_states.items())),
        failures=tuple(failures),
    )


@dataclass(frozen=True)
class SummaryPart:
    """One log dir's share of a run's summary, summed where its state lives (plain data: it travels back from a
    worker). Equal, once merged, to ``summarize`` of the report's table, without a row per segment anywhere."""

    planned_segments: int
    planned_bytes: int
    states: dict[str, int]
    converted_segments: int
    bytes_before: int
    bytes_after: int
    records: int
    mtime_partitions: int
    partition_states: dict[str, int]
    failures: tuple[Failure, ...]
    spans: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, store: StateStore, plan: Plan, key: str) -> SummaryPart:
        d = plan.log_dir(key)
        planned = {p.name: (len(p.segments), p.bytes) for p in d.partitions}
        states: dict[str, int] = {}
        stored_segments = converted = before = after = records = 0
        mtime: set[str] = set()
        for partition, state, has_result, count, source, output, recs, mtime_records in store.segment_figures():
            if partition not in planned:
                continue  # the report's table has a row per planned segment only
            stored_segments += count
            states[state] = states.get(state, 0) + count
            if has_result and mtime_records:
                mtime.add(partition)
            if has_result and state not in NOT_CONVERTED:
                converted += count
                before, after, records = before + source, after + output, records + recs
        planned_segments = sum(n for n, _ in planned.values())
        if planned_segments > stored_segments:
            states[SegmentState.PLANNED.value] = states.get(SegmentState.PLANNED.value, 0) + (
                planned_segments - stored_segments
            )
        stored_partitions = {name: state for name, state, _ in store.partition_records() if name in planned}
        partition_states: dict[str, int] = {}
        for name in planned:
            state = stored_partitions.get(name, "planned")
            partition_states[state] = partition_states.get(state, 0) + 1
        order = {name: i for i, name in enumerate(planned)}
        by_name = d.partition_by_name
        failures = []
        for partition, base, text in sorted(store.segment_problems(), key=lambda row: (order.get(row[0], -1), row[1])):
            if partition not in planned:
                continue
            problem = from_json(Problem, json.loads(text))
            file = f"{by_name[partition].dir}/{segment_name(base, '.log')}"
            failures.append(
                Failure(
                    d.label,
                    partition,
                    problem.path or file,
                    problem.position,
                    problem.offset,
                    problem.kind,
                    problem.message or "",
                )
            )
        spans = log_dir_spans(
            store.event_records(RUN_EVENTS), lambda start, limit: store.last_event_time(SEGMENT_EVENTS, start, limit)
        )
        return cls(
            planned_segments,
            sum(b for _, b in planned.values()),
            states,
            converted,
            before,
            after,
            records,
            len(mtime),
            partition_states,
            tuple(failures),
            tuple(spans),
        )


def summary_part(plan: Plan, key: str) -> SummaryPart | None:
    """Stage function: one log dir's share of the run summary, None if no run of the plan has state there."""
    log_dir = plan.log_dir(key).log_dir
    if StateStore.health(log_dir, plan.plan_id) != StateHealth.OK:
        return None
    with StateStore.open(log_dir, plan.plan_id) as store:
        return SummaryPart.of(store, plan, key)


def parts_here(plan: Plan) -> dict[str, SummaryPart | None]:
    """``summary_part`` of each log dir on this host (no host in the plan), read in this process without an engine:
    ``execute`` reads them while its last status runs. A log dir whose part raised is left out (``run_summary``
    asks the engine for it, which reports the error as it does)."""
    out: dict[str, SummaryPart | None] = {}
    for d in plan.log_dirs:
        if d.host is None:
            try:
                out[d.key] = summary_part(plan, d.key)
            except Exception:  # asked again through the engine, which reports it
                continue
    return out


def run_summary(
    plan: Plan,
    engine: Engine,
    plan_path: str | Path | None = None,
    read: dict[str, SummaryPart | None] | None = None,
) -> Summary | None:
    """The summary ``summarize`` makes of the report's table, summed per log dir where its state is (the log dir,
    else the archive beside the plan): what ``execute`` prints, in memory independent of the segment count. None
    when no log dir has state. ``read``: log dirs' parts read already (``parts_here``), not asked of the engine."""
    found_in = dict(read or {})
    calls = [StageCall((d.key,), d.host, plan, d.key) for d in plan.log_dirs if d.key not in found_in]
    if calls:
        for call, r in zip(calls, engine.map(Stage.REPORT, summary_part, calls)):
            found_in[call.log_dir] = r.value if r.ok else None
    parts: list[SummaryPart] = []
    for d in plan.log_dirs:
        found = found_in.get(d.key)
        if found is None and plan_path is not None:
            from migrate.pipeline import archive_path

            path = archive_path(plan_path, d.key)
            if path.exists():
                with StateStore.open_file(path) as store:
                    found = SummaryPart.of(store, plan, d.key)
        if found is not None:
            parts.append(found)
    if not parts:
        return None

    def added(dicts: Iterable[dict[str, int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in dicts:
            for k, v in d.items():
                out[k] = out.get(k, 0) + v
        return dict(sorted(out.items()))

    spans = merge_spans(s for p in parts for s in p.spans)
    return Summary(
        plan_id=plan.plan_id,
        planned_segments=sum(p.planned_segments for p in parts),
        planned_bytes=sum(p.planned_bytes for p in parts),
        states=added(p.states for p in parts),
        converted_segments=sum(p.converted_segments for p in parts),
        bytes_before=sum(p.bytes_before for p in parts),
        bytes_after=sum(p.bytes_after for p in parts),
        records=sum(p.records for p in parts),
        duration_seconds=round(sum(end - start for start, end in spans), 3),
        mtime_partitions=sum(p.mtime_partitions for p in parts),
        partitions=sum(sum(p.partition_states.values()) for p in parts),
        partition_states=added(p.partition_states for p in parts),
        failures=tuple(f for p in parts for f in p.failures),
    )


def growth_text(summary: Summary) -> str:
    return "n/a" if summary.growth is None else f"{summary.growth:+.1%}"


def summary_lines(summary: Summary, cutover: CutoverReport | None = None) -> list[str]:
    """The summary as the terminal shows it (``execute``'s last lines, ``report``'s output). ``cutover``: a run that
    took pre-staged segments, whose rate is that of what it converted (the taken were renamed, not converted)."""
    states = ", ".join(f"{n} {s}" for s, n in summary.states.items())
    parts = ", ".join(f"{n} {s}" for s, n in summary.partition_states.items())
    lines = [
        f"summary of plan {summary.plan_id}:",
        f"  segments:   {summary.planned_segments} planned ({states}); {summary.converted_segments} converted",
        f"  partitions: {summary.partitions} planned ({parts})",
        f"  bytes:      {human_bytes(summary.bytes_before)} before, {human_bytes(summary.bytes_after)} after "
        f"({growth_text(summary)}); {summary.records} records",
        f"  duration:   {human_seconds(summary.duration_seconds)}, "
        + (
            f"{human_rate(summary.throughput)}"
            if cutover is None
            else f"{_window_rate(cutover)} over the {human_bytes(cutover.window_bytes)} converted in the window (the "
            f"{human_bytes(cutover.staged_bytes)} taken from pre-staging were renamed into place: not in the rate)"
        ),
        f"  timestamps: {summary.mtime_partitions} partition(s) received the segment mtime as timestamps",
        f"  failures:   {len(summary.failures)}",
    ]
    for f in summary.failures[:20]:
        where = f" at byte position {f.position}" if f.position is not None else ""
        lines.append(f"    {f.file}{where}: {f.kind}: {f.message.splitlines()[0] if f.message else ''}")
    if len(summary.failures) > 20:
        lines.append(f"    ... and {len(summary.failures) - 20} more (the report lists them all)")
    return lines


def _window_rate(cutover: CutoverReport) -> str:
    return human_rate(cutover.window_bytes / cutover.delta_seconds) if cutover.delta_seconds > 0 else "no rate"


def summary_json(summary: Summary) -> dict[str, Any]:
    body = to_json(summary)
    body["growth"] = summary.growth
    body["throughput_bytes_per_second"] = summary.throughput
    return body
