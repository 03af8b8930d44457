"""The report of a run, for the audit afterwards: one row per planned segment as an Arrow table (written as Parquet,
for pandas, DuckDB or Spark), and a self-contained HTML page rendered from that same table.

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

import html
import json
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from migrate import __version__
from migrate.codec import from_json, to_json
from migrate.engines import Engine, StageCall
from migrate.model import EventKind, Plan, Problem, SegmentResult, SegmentState, Stage
from migrate.run.state import StateStore
from migrate.units import human_bytes

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
    if not StateStore.exists(log_dir, plan.plan_id):
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
    calls = [StageCall.on_log_dir(plan, d.key) for d in plan.log_dirs]
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
        starts = [at for at, kind, *_ in r.run_events if kind == EventKind.RUN_STARTED.value]
        ends = [at for at, kind, *_ in r.run_events if kind == EventKind.RUN_ENDED.value]
        for i, start in enumerate(starts):
            limit = starts[i + 1] if i + 1 < len(starts) else math.inf
            end = next((e for e in ends if start <= e < limit), None)
            if end is None:  # a run that crashed: up to its last recorded outcome
                end = max((at for at in outcomes if start <= at < limit), default=start)
            spans.append((start, end))
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
                result = from_json(SegmentResult, json.loads(s[3])) if s and s[3] else None
                problem = from_json(Problem, json.loads(s[4])) if s and s[4] else None
                magics = result.magics_in if result is not None else seg.entries_by_magic
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
                    "entries_v0": int(magics.get("0", 0)),
                    "entries_v1": int(magics.get("1", 0)),
                    "entries_v2": int(magics.get("2", 0)),
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
    partial = target.with_name(target.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, target)
    return target


def read_parquet(path: str | Path) -> pa.Table:
    return pq.read_table(path)


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


def _meta(table: pa.Table, key: str) -> str:
    return (table.schema.metadata or {}).get(key.encode(), b"").decode()


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
    spans = json.loads(_meta(table, "run_spans") or "[]")
    return Summary(
        plan_id=_meta(table, "plan_id"),
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


def growth_text(summary: Summary) -> str:
    return "n/a" if summary.growth is None else f"{summary.growth:+.1%}"


def summary_lines(summary: Summary) -> list[str]:
    """The summary as the terminal shows it (``execute``'s last lines, ``report``'s output)."""
    states = ", ".join(f"{n} {s}" for s, n in summary.states.items())
    parts = ", ".join(f"{n} {s}" for s, n in summary.partition_states.items())
    lines = [
        f"summary of plan {summary.plan_id}:",
        f"  segments:   {summary.planned_segments} planned ({states}); {summary.converted_segments} converted",
        f"  partitions: {summary.partitions} planned ({parts})",
        f"  bytes:      {human_bytes(summary.bytes_before)} before, {human_bytes(summary.bytes_after)} after "
        f"({growth_text(summary)}); {summary.records} records",
        f"  duration:   {summary.duration_seconds:.1f} s, {summary.throughput / 1e6:.1f} MB/s",
        f"  timestamps: {summary.mtime_partitions} partition(s) received the segment mtime as timestamps",
        f"  failures:   {len(summary.failures)}",
    ]
    for f in summary.failures[:20]:
        where = f" at byte position {f.position}" if f.position is not None else ""
        lines.append(f"    {f.file}{where}: {f.kind}: {f.message.splitlines()[0] if f.message else ''}")
    if len(summary.failures) > 20:
        lines.append(f"    ... and {len(summary.failures) - 20} more (the report lists them all)")
    return lines


def summary_json(summary: Summary) -> dict[str, Any]:
    body = to_json(summary)
    body["growth"] = summary.growth
    body["throughput_bytes_per_second"] = summary.throughput
    return body


# --- HTML -------------------------------------------------------------------------------------------------------


def _group(table: pa.Table, keys: list[str]) -> list[dict[str, Any]]:
    """Per group: partitions, segments, converted ones and their bytes, records, mtime-timestamped records,
    failures, seconds."""
    t = table.append_column("failed", table["problem_kind"].is_valid())
    t = t.append_column(
        "before", pa.array([s if c else 0 for s, c in zip(t["source_bytes"].to_pylist(), t["converted"].to_pylist())])
    )
    t = t.append_column(
        "after", pa.array([o if c else 0 for o, c in zip(t["output_bytes"].to_pylist(), t["converted"].to_pylist())])
    )
    grouped = t.group_by(keys).aggregate(
        [
            ("partition_dir", "count_distinct"),
            ("base_offset", "count"),
            ("converted", "sum"),
            ("planned_bytes", "sum"),
            ("before", "sum"),
            ("after", "sum"),
            ("records", "sum"),
            ("mtime_timestamped_records", "sum"),
            ("failed", "sum"),
            ("seconds", "sum"),
        ]
    )
    return sorted(grouped.to_pylist(), key=lambda r: tuple(str(r[k]) for k in keys))


def _svg_throughput(table: pa.Table, width: int = 760, height: int = 220) -> str:
    """MB/s in up to 60 bars over the conversion: each segment's bytes spread over its own seconds of work."""
    spans = [
        (t.timestamp() - sec, t.timestamp(), b)
        for t, sec, b, c in zip(
            table["finished_at"].to_pylist(),
            table["seconds"].to_pylist(),
            table["source_bytes"].to_pylist(),
            table["converted"].to_pylist(),
        )
        if t is not None and c
    ]
    if not spans:
        return '<p class="muted">No segment was converted: no throughput to plot.</p>'
    start, end = min(a for a, _, _ in spans), max(b for _, b, _ in spans)
    span = max(end - start, 1e-3)
    buckets = 60
    step = span / buckets
    mbps = [0.0] * buckets
    for a, b, nbytes in spans:
        length = max(b - a, 1e-9)
        for i in range(max(0, int((a - start) / step)), min(buckets, int((b - start) / step) + 1)):
            lo, hi = start + i * step, start + (i + 1) * step
            overlap = max(0.0, min(hi, b) - max(lo, a))
            mbps[i] += nbytes * overlap / length / step / 1e6
    top = max(mbps) or 1.0
    x0, y0, w, h = 50, 10, width - 70, height - 40
    bars = []
    for i, v in enumerate(mbps):
        bh = v / top * h
        bars.append(
            f'<rect x="{x0 + i * w / buckets:.1f}" y="{y0 + h - bh:.1f}" width="{max(w / buckets - 1, 1):.1f}" '
            f'height="{bh:.1f}" fill="#3b7ddd"><title>{v:.2f} MB/s at +{i * step:.2f} s</title></rect>'
        )
    return (
        f'<svg class="plot" width="{width}" height="{height}" role="img" aria-label="throughput over time">'
        f'<line x1="{x0}" y1="{y0 + h}" x2="{x0 + w}" y2="{y0 + h}" stroke="#999"/>'
        f'<text x="4" y="{y0 + 10}">{top:.1f}</text><text x="4" y="{y0 + h}">0</text>'
        f'<text x="{x0}" y="{height - 8}">MB/s over {_seconds(span)} of conversion (a bar per {_seconds(step)})</text>'
        + "".join(bars)
        + "</svg>"
    )


def _svg_bars(labels: list[str], series: list[tuple[str, str, list[float]]], unit: str, width: int = 760) -> str:
    """Horizontal grouped bars: one group per label, one bar per series (name, colour, values)."""
    if not labels:
        return '<p class="muted">Nothing to plot.</p>'
    bar, gap = 12, 8
    group = bar * len(series) + gap
    x0 = 220
    height = 30 + group * len(labels)
    top = max((v for _, _, vs in series for v in vs), default=0) or 1
    out = [f'<svg class="plot" width="{width}" height="{height}" role="img" aria-label="{html.escape(unit)}">']
    for i, label in enumerate(labels):
        y = 10 + i * group
        out.append(f'<text x="{x0 - 6}" y="{y + bar * len(series) / 2 + 4:.0f}" text-anchor="end">{_e(label)}</text>')
        for j, (name, colour, values) in enumerate(series):
            w = values[i] / top * (width - x0 - 120)
            out.append(
                f'<rect x="{x0}" y="{y + j * bar}" width="{max(w, 0.5):.1f}" height="{bar - 2}" fill="{colour}">'
                f"<title>{_e(label)} {_e(name)}: {values[i]:,.0f} {_e(unit)}</title></rect>"
                f'<text x="{x0 + w + 4:.1f}" y="{y + j * bar + bar - 3}" class="small">{_fmt(values[i], unit)}</text>'
            )
    legend = " ".join(f'<tspan fill="{colour}">&#9632;</tspan> {_e(name)}' for name, colour, _ in series)
    out.append(f'<text x="{x0}" y="{height - 6}">{legend}</text></svg>')
    return "".join(out)


def _seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h" if s < 2 * 86400 else f"{s / 86400:.1f} days"


def _fmt(value: float, unit: str) -> str:
    return human_bytes(value) if unit == "bytes" else f"{value:,.0f}"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


_NUMBER = re.compile(r"[+-]?[\d,.]+%?")


def _cell(value: Any) -> str:
    text = str(value)
    return f'<td class="num">{text}</td>' if _NUMBER.fullmatch(text) else f"<td>{text}</td>"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Numbers right-aligned, text left; a header click sorts (SCRIPT)."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _growth(before: int, after: int) -> str:
    return f"{(after - before) / before:+.1%}" if before else "n/a"


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,sans-serif;margin:24px 32px;color:#1d1d1f;max-width:1300px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0}th,td{padding:4px 10px;text-align:left;border-bottom:1px solid #eee}
th{background:#f4f4f6;cursor:pointer;user-select:none}td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#777}.bad{color:#b00020;font-weight:600}.ok{color:#0a7d32;font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:20px}.plot text{font-size:11px;fill:#333}.plot .small{font-size:10px}
code{background:#f4f4f6;padding:1px 4px;border-radius:3px}
"""

SCRIPT = """
"use strict";
// click a column header to sort its table (numbers as numbers)
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("th").forEach((th, col) => th.addEventListener("click", () => {
    const body = table.tBodies[0], rows = Array.from(body.rows), asc = th.dataset.dir !== "asc";
    const key = (r) => { const t = r.cells[col].textContent.replace(/[, %+]/g, ""); const n = parseFloat(t);
      return isNaN(n) ? r.cells[col].textContent : n; };
    rows.sort((a, b) => { const x = key(a), y = key(b); return (x > y ? 1 : x < y ? -1 : 0) * (asc ? 1 : -1); });
    th.dataset.dir = asc ? "asc" : "desc";
    rows.forEach((r) => body.appendChild(r));
  }));
}
document.documentElement.dataset.ready = "yes";
"""


def render_html(table: pa.Table, summary: Summary | None = None) -> str:
    """A self-contained page (no network, no external file): summary, per-broker and per-topic tables, plots,
    failures, the plan id, options and versions."""
    s = summary or summarize(table)
    options = json.loads(_meta(table, "options") or "{}")
    card = '<div class="card"><span class="muted">{}</span><b id="{}">{}</b></div>'
    cards = "".join(
        card.format(label, ident, value)
        for label, ident, value in [
            ("segments converted", "total-segments", f"{s.converted_segments} of {s.planned_segments}"),
            ("bytes before", "total-before", f"{s.bytes_before:,}"),
            ("bytes after", "total-after", f"{s.bytes_after:,}"),
            ("growth", "total-growth", growth_text(s)),
            ("records", "total-records", f"{s.records:,}"),
            ("duration", "total-duration", f"{s.duration_seconds:.1f} s"),
            ("throughput", "total-throughput", f"{s.throughput / 1e6:.2f} MB/s"),
            ("failures", "total-failures", str(len(s.failures))),
        ]
    )
    verdict = (
        '<p class="ok">Every planned partition is migrated.</p>'
        if s.partition_states and set(s.partition_states) <= {"migrated"}
        else f'<p class="bad">Not every planned partition is migrated: '
        f"{_e(', '.join(f'{n} {k}' for k, n in s.partition_states.items()))}.</p>"
    )

    brokers = _group(table, ["broker_id", "host", "log_dir"])
    broker_rows = [
        [
            _e(r["broker_id"]),
            _e(r["host"] or "(local)"),
            _e(r["log_dir"]),
            r["partition_dir_count_distinct"],
            r["base_offset_count"],
            r["converted_sum"],
            f"{r['before_sum']:,}",
            f"{r['after_sum']:,}",
            _growth(r["before_sum"], r["after_sum"]),
            f"{r['records_sum']:,}",
            r["failed_sum"],
            f"{r['seconds_sum']:.1f}",
        ]
        for r in brokers
    ]
    topics = _group(table, ["topic"])
    topic_rows = [
        [
            _e(r["topic"]),
            r["partition_dir_count_distinct"],
            r["base_offset_count"],
            r["converted_sum"],
            f"{r['before_sum']:,}",
            f"{r['after_sum']:,}",
            _growth(r["before_sum"], r["after_sum"]),
            f"{r['records_sum']:,}",
            f"{r['mtime_timestamped_records_sum']:,}",
            r["failed_sum"],
        ]
        for r in topics
    ]
    partitions = _group(table, ["log_dir", "partition_dir"])
    stamped = [r for r in partitions if r["mtime_timestamped_records_sum"]]
    stamped_rows = [
        [_e(r["partition_dir"]), _e(r["log_dir"]), f"{r['mtime_timestamped_records_sum']:,}", f"{r['records_sum']:,}"]
        for r in stamped
    ]
    failure_rows = [
        [
            _e(f.file),
            "" if f.position is None else f.position,
            "" if f.offset is None else f.offset,
            _e(f.partition),
            _e(f.kind),
            _e(f.message.splitlines()[0] if f.message else ""),
        ]
        for f in s.failures
    ]
    topic_names = [r["topic"] for r in topics]
    spans = json.loads(_meta(table, "run_spans") or "[]")
    run_times = (
        ", ".join(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(a))}Z for {b - a:.1f} s" for a, b in spans)
        or "no run recorded"
    )
    missing = sorted(
        set(json.loads(_meta(table, "log_dirs") or "[]")) - set(json.loads(_meta(table, "log_dirs_with_state") or "[]"))
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>kafka-log-migrate report: plan {_e(s.plan_id)}</title>
<style>{STYLE}</style></head>
<body>
<h1>kafka-log-migrate report</h1>
<p>plan <code id="plan-id">{_e(s.plan_id)}</code> &middot; planned by {_e(_meta(table, "plan_tool"))} at
{_e(_meta(table, "plan_created"))} &middot; report by kafka-log-migrate <span id="tool-version">{_e(__version__)}</span>
at {_e(_meta(table, "report_created"))}</p>
<p class="muted">runs: {_e(run_times)}</p>
{verdict}
{"" if not missing else f'<p class="bad">No state found for: {_e(", ".join(missing))} (never executed?)</p>'}
<h2>Summary</h2>
<div class="cards">{cards}</div>
<p>{s.planned_segments} planned segments ({_e(", ".join(f"{n} {k}" for k, n in s.states.items()))}),
{human_bytes(s.planned_bytes)} planned; {s.partitions} partitions;
{s.mtime_partitions} partition(s) received the segment mtime as timestamps.</p>
<h2>Options</h2>
{_table(["option", "value"], [[_e(k), _e(v if isinstance(v, str) else json.dumps(v))] for k, v in options.items()])}
<h2>Per broker</h2>
{
        _table(
            [
                "broker",
                "host",
                "log dir",
                "partitions",
                "segments",
                "converted",
                "bytes before",
                "bytes after",
                "growth",
                "records",
                "failures",
                "seconds",
            ],
            broker_rows,
        )
    }
<h2>Per topic</h2>
{
        _table(
            [
                "topic",
                "partitions",
                "segments",
                "converted",
                "bytes before",
                "bytes after",
                "growth",
                "records",
                "mtime-timestamped records",
                "failures",
            ],
            topic_rows,
        )
    }
<h2>Throughput over time</h2>
{_svg_throughput(table)}
<h2>Bytes before and after, per topic</h2>
{
        _svg_bars(
            topic_names,
            [
                ("before", "#9aa5b1", [float(r["before_sum"]) for r in topics]),
                ("after", "#3b7ddd", [float(r["after_sum"]) for r in topics]),
            ],
            "bytes",
        )
    }
<h2>Partitions that received mtime timestamps</h2>
<p class="muted">v0 records have no timestamp; with <code>--timestamps mtime</code> they get LogAppendTime at their
segment file's mtime (policy of this plan: <code>{_e(options.get("timestamps", ""))}</code>).</p>
{
        _svg_bars(
            [r["partition_dir"] for r in stamped[:60]],
            [
                (
                    "records with the mtime",
                    "#e8a33d",
                    [float(r["mtime_timestamped_records_sum"]) for r in stamped[:60]],
                ),
                ("records", "#9aa5b1", [float(r["records_sum"]) for r in stamped[:60]]),
            ],
            "records",
        )
    }
{_table(["partition", "log dir", "records given the mtime", "records"], stamped_rows) if stamped else ""}
<h2>Failures</h2>
{
        _table(["file", "byte position", "offset", "partition", "kind", "message"], failure_rows)
        if failure_rows
        else '<p class="ok" id="no-failures">None.</p>'
    }
<script>{SCRIPT}</script>
</body></html>
"""


def write_html(text: str, path: str | Path) -> Path:
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)
    return target


def render_rehearsal(report: dict[str, Any]) -> str:
    """The canary rehearsal's report (``rehearse -o``) as a self-contained page: the verdict, each step's duration
    and throughput, growth, refusals with file and byte position, every reader's verdict, the fingerprint
    comparisons and the cluster window projection. ``report`` is the rehearsal's JSON report."""
    ok = bool(report.get("ok"))
    verdict = f'<p class="{"ok" if ok else "bad"}" id="verdict">{_e(report.get("verdict"))}</p>'
    steps = [
        [
            _e(s["name"]),
            _e(s["status"]),
            _seconds(float(s.get("seconds") or 0)),
            f"{int(s.get('bytes') or 0):,}",
            f"{s['bytes_per_second'] / 1e6:.1f} MB/s" if s.get("bytes_per_second") else "",
            _e(s.get("message", "")),
        ]
        for s in report.get("steps", [])
    ]
    growth = report.get("growth") or {}
    cards = "".join(
        f'<div class="card"><span class="muted">{label}</span><b id="{ident}">{value}</b></div>'
        for label, ident, value in [
            ("bytes before", "rehearsal-before", f"{int(growth.get('bytes_in', 0)):,}"),
            ("bytes after", "rehearsal-after", f"{int(growth.get('bytes_out', 0)):,}"),
            ("growth", "rehearsal-growth", _growth(int(growth.get("bytes_in", 0)), int(growth.get("bytes_out", 0)))),
            ("refusals", "rehearsal-refusals", str(len(report.get("refusals", [])))),
        ]
    )
    refusals = [
        [
            _e(r["step"]),
            _e(r.get("file") or ""),
            _e(r.get("position") if r.get("position") is not None else ""),
            _e(r.get("offset") if r.get("offset") is not None else ""),
            _e(r["message"]),
        ]
        for r in report.get("refusals", [])
    ]
    readers = [
        [
            _e(r["reader"]),
            _e(r["stage"]),
            "not available" if not r["available"] else ("OK" if r["ok"] else "FAILED"),
            _seconds(float(r.get("seconds") or 0)),
            r.get("partitions", 0),
            _e(r.get("detail", "")),
        ]
        for r in report.get("readers", [])
    ]
    prints = [
        [
            _e(f["what"]),
            "identical" if f["identical"] else f"{f['total_changes']} changes",
            f["entries_before"],
            f["entries_after"],
            _e("; ".join(f"{c.get('path')}: {c.get('change', '')}" for c in f.get("changes", [])[:5])),
        ]
        for f in report.get("fingerprints", [])
    ]
    projection = report.get("projection") or {}
    windows = [
        [
            _e(b["broker"]),
            f"{int(b['bytes']):,}",
            _seconds(float(b["window_seconds"])),
            _seconds(float(b["rollback_seconds"])) if b.get("rollback_seconds") is not None else "",
        ]
        for b in projection.get("brokers", [])
    ]
    cluster = ""
    if projection.get("cluster_parallel_seconds") is not None:
        cluster = (
            f'<p>Cluster window: <b id="cluster-window">{_seconds(float(projection["cluster_parallel_seconds"]))}'
            f"</b> with every broker at once, {_seconds(float(projection['cluster_serial_seconds'] or 0))} one "
            f"broker after the other. {_e(projection.get('basis', ''))}</p>"
        )
    caveats = "".join(f"<li>{_e(c)}</li>" for c in projection.get("caveats", []))
    events = "".join(f"<li>{_e(e)}</li>" for e in report.get("events", []))
    refusal_table = _table(["step", "file", "byte position", "offset", "message"], refusals) if refusals else "None."
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>kafka-log-migrate rehearsal {_e(report.get("id"))}</title><style>{STYLE}</style></head><body>
<h1>Canary rehearsal {_e(report.get("id"))}</h1>
<p class="muted">{_e(report.get("tool"))} on {_e(report.get("host"))}, {_e(report.get("started"))} to
{_e(report.get("updated"))}; log dirs {_e(", ".join(report.get("log_dirs", [])))}</p>
{verdict}<p>{_e(report.get("next_steps", ""))}</p>
<div class="cards">{cards}</div>
<h2>Steps</h2>{_table(["step", "status", "duration", "bytes", "throughput", "message"], steps)}
<h2>Readers</h2><p>Kafka's own reader: {_e(report.get("oracle", ""))}</p>
{_table(["reader", "stage", "verdict", "duration", "partitions", "detail"], readers)}
<h2>Fingerprints</h2>{_table(["compared", "result", "entries before", "entries after", "first changes"], prints)}
<h2>Refusals</h2>{refusal_table}
<h2>Projection</h2>{cluster}{_table(["broker", "bytes", "window", "rollback"], windows)}<ul>{caveats}</ul>
<h2>Events</h2><ul>{events}</ul>
<script>{SCRIPT}</script></body></html>"""
