"""The HTML pages of the reports, each self-contained (no network, no external file): the run report rendered from the
run's table (``report``, ``execute``) and the canary rehearsal's page rendered from its JSON report (``rehearse -o``).

Markup, style and script are Jinja templates shipped as package data (``migrate/reports/templates``); this module
works out what they show: the rows of each table, the summary cards and the geometry of each chart.

Long pages are kept readable (unbounded, 2,000 partitions made a 62,226 px page, and two thirds of a 40-partition one
was a chart of identical bars): a table longer than ``SCROLL_ROWS`` scrolls in a box of its own, series that are
equal everywhere are drawn as one, and a chart whose bars would all be the same is a sentence instead.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pyarrow as pa

from migrate import __version__
from migrate.reports.run_report import Summary, growth_text, summarize, table_metadata
from migrate.run.workspace import write_durably
from migrate.units import human_bytes, human_rate, human_seconds

SCROLL_ROWS = 25  # a table with more rows scrolls within about that many rows' height
STAMPED_BARS = 60  # partitions drawn in the mtime chart (the table below it lists them all)
_NUMBER = re.compile(r"[+-]?[\d,.]+%?")  # a cell that reads as a number is right-aligned

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("migrate.reports", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    finalize=lambda value: "" if value is None else value,  # an absent field shows as nothing, not "None"
)
_TEMPLATES.tests["numeric"] = lambda value: bool(_NUMBER.fullmatch(str(value)))


# --- charts -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    y: int
    width: str
    height: int
    colour: str
    title: str
    text: str  # the value, beside the bar
    text_x: str
    text_y: int


@dataclass(frozen=True)
class BarGroup:
    label: str
    label_y: str
    bars: list[Bar]


@dataclass(frozen=True)
class BarChart:
    """Horizontal grouped bars, or ``note`` alone when there is nothing worth drawing."""

    note: str = ""
    unit: str = ""
    width: int = 760
    height: int = 0
    x0: int = 220
    groups: tuple[BarGroup, ...] = ()
    legend: tuple[tuple[str, str], ...] = ()  # (series name, colour)
    more: str = ""  # what the chart leaves out


@dataclass(frozen=True)
class TimeBar:
    x: str
    y: str
    width: str
    height: str
    title: str


@dataclass(frozen=True)
class ThroughputChart:
    note: str = ""
    width: int = 760
    height: int = 220
    x0: int = 50
    x1: int = 0
    axis_y: int = 0
    top_y: int = 0
    top: str = ""
    caption: str = ""
    bars: tuple[TimeBar, ...] = ()


Series = tuple[str, str, list[float]]  # name, colour, one value per label


def bar_chart(
    labels: list[str], series: list[Series], unit: str, noun: str, shown: int | None = None, width: int = 760
) -> BarChart:
    """One group of bars per label (the first ``shown`` of them), one bar per series; series equal for every label
    are drawn as one bar (names joined by " = "), and a chart whose bars would all be equal is not drawn: a sentence
    says the value."""
    if not labels:
        return BarChart(note="Nothing to plot.")
    merged: list[Series] = []
    for name, colour, values in series:
        same = next((i for i, (_, _, seen) in enumerate(merged) if seen == values), None)
        if same is None:
            merged.append((name, colour, values))
        else:
            first_name, first_colour, _ = merged[same]
            merged[same] = (f"{first_name} = {name}", first_colour, values)
    distinct = {v for _, _, values in merged for v in values}
    if len(labels) > 1 and len(distinct) == 1:
        names = " = ".join(name for name, _, _ in merged)
        value = _fmt(distinct.pop(), unit)
        return BarChart(
            note=f"Not plotted, every bar would be the same: {value} {unit} ({names}) for each of the {len(labels):,} "
            f"{noun}."
        )
    more = ""
    if shown is not None and len(labels) > shown:
        more = f"The first {shown} of {len(labels):,} {noun}; the table below lists them all."
        labels, merged = labels[:shown], [(name, colour, values[:shown]) for name, colour, values in merged]
    bar, gap, x0 = 12, 8, 220
    group = bar * len(merged) + gap
    height = 30 + group * len(labels)
    top = max((v for _, _, vs in merged for v in vs), default=0) or 1
    groups = []
    for i, label in enumerate(labels):
        y = 10 + i * group
        bars = []
        for j, (name, colour, values) in enumerate(merged):
            w = values[i] / top * (width - x0 - 120)
            bars.append(
                Bar(
                    y=y + j * bar,
                    width=f"{max(w, 0.5):.1f}",
                    height=bar - 2,
                    colour=colour,
                    title=f"{label} {name}: {values[i]:,.0f} {unit}",
                    text=_fmt(values[i], unit),
                    text_x=f"{x0 + w + 4:.1f}",
                    text_y=y + j * bar + bar - 3,
                )
            )
        groups.append(BarGroup(label, f"{y + bar * len(merged) / 2 + 4:.0f}", bars))
    legend = tuple((name, colour) for name, colour, _ in merged)
    return BarChart(unit=unit, width=width, height=height, x0=x0, groups=tuple(groups), legend=legend, more=more)


def throughput_chart(table: pa.Table, width: int = 760, height: int = 220) -> ThroughputChart:
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
        return ThroughputChart(note="No segment was converted: no throughput to plot.")
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
    bars = tuple(
        TimeBar(
            x=f"{x0 + i * w / buckets:.1f}",
            y=f"{y0 + h - v / top * h:.1f}",
            width=f"{max(w / buckets - 1, 1):.1f}",
            height=f"{v / top * h:.1f}",
            title=f"{v:.2f} MB/s at +{i * step:.2f} s",
        )
        for i, v in enumerate(mbps)
    )
    return ThroughputChart(
        width=width,
        height=height,
        x0=x0,
        x1=x0 + w,
        axis_y=y0 + h,
        top_y=y0 + 10,
        top=f"{top:.1f}",
        caption=f"MB/s over {human_seconds(span)} of conversion (a bar per {human_seconds(step)})",
        bars=bars,
    )


def _fmt(value: float, unit: str) -> str:
    return human_bytes(value) if unit == "bytes" else f"{value:,.0f}"


def _growth(before: int, after: int) -> str:
    return f"{(after - before) / before:+.1%}" if before else "n/a"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


# --- the run report -----------------------------------------------------------------------------------------------


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


def render_html(table: pa.Table, summary: Summary | None = None) -> str:
    """The run report: summary, per-broker and per-topic tables, plots, failures, the plan id, options and
    versions."""
    s = summary or summarize(table)
    meta = table_metadata(table)
    options = json.loads(meta.get("options") or "{}")
    brokers = _group(table, ["broker_id", "host", "log_dir"])
    topics = _group(table, ["topic"])
    partitions = _group(table, ["log_dir", "partition_dir"])
    stamped = [r for r in partitions if r["mtime_timestamped_records_sum"]]
    spans = json.loads(meta.get("run_spans") or "[]")
    run_times = ", ".join(
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(a))}Z for {human_seconds(b - a)}" for a, b in spans
    )
    log_dirs = set(json.loads(meta.get("log_dirs") or "[]"))
    context = {
        "summary": s,
        "meta": {key: meta.get(key, "") for key in ("plan_tool", "plan_created", "report_created")},
        "version": __version__,
        "run_times": run_times or "no run recorded",
        "all_migrated": bool(s.partition_states) and set(s.partition_states) <= {"migrated"},
        "partition_states": ", ".join(f"{n} {k}" for k, n in s.partition_states.items()),
        "missing": sorted(log_dirs - set(json.loads(meta.get("log_dirs_with_state") or "[]"))),
        "summary_cards": [
            ("segments converted", "total-segments", f"{s.converted_segments} of {s.planned_segments}"),
            ("bytes before", "total-before", human_bytes(s.bytes_before)),
            ("bytes after", "total-after", human_bytes(s.bytes_after)),
            ("growth", "total-growth", growth_text(s)),
            ("records", "total-records", f"{s.records:,}"),
            ("duration", "total-duration", human_seconds(s.duration_seconds)),
            ("throughput", "total-throughput", human_rate(s.throughput)),
            ("failures", "total-failures", str(len(s.failures))),
        ],
        "segment_states": ", ".join(f"{n} {k}" for k, n in s.states.items()),
        "planned_bytes": human_bytes(s.planned_bytes),
        "option_rows": [[k, v if isinstance(v, str) else json.dumps(v)] for k, v in options.items()],
        "broker_rows": [
            [
                r["broker_id"],
                r["host"] or "(local)",
                r["log_dir"],
                r["partition_dir_count_distinct"],
                r["base_offset_count"],
                r["converted_sum"],
                human_bytes(r["before_sum"]),
                human_bytes(r["after_sum"]),
                _growth(r["before_sum"], r["after_sum"]),
                f"{r['records_sum']:,}",
                r["failed_sum"],
                f"{r['seconds_sum']:.1f}",
            ]
            for r in brokers
        ],
        "topic_rows": [
            [
                r["topic"],
                r["partition_dir_count_distinct"],
                r["base_offset_count"],
                r["converted_sum"],
                human_bytes(r["before_sum"]),
                human_bytes(r["after_sum"]),
                _growth(r["before_sum"], r["after_sum"]),
                f"{r['records_sum']:,}",
                f"{r['mtime_timestamped_records_sum']:,}",
                r["failed_sum"],
            ]
            for r in topics
        ],
        "throughput": throughput_chart(table),
        "topic_bytes": bar_chart(
            [r["topic"] for r in topics],
            [
                ("before", "#9aa5b1", [float(r["before_sum"]) for r in topics]),
                ("after", "#3b7ddd", [float(r["after_sum"]) for r in topics]),
            ],
            "bytes",
            "topics",
        ),
        "timestamps_policy": _text(options.get("timestamps", "")),
        "stamped_chart": bar_chart(
            [r["partition_dir"] for r in stamped],
            [
                ("records with the mtime", "#e8a33d", [float(r["mtime_timestamped_records_sum"]) for r in stamped]),
                ("records", "#9aa5b1", [float(r["records_sum"]) for r in stamped]),
            ],
            "records",
            "partitions",
            shown=STAMPED_BARS,
        ),
        "stamped_rows": [
            [r["partition_dir"], r["log_dir"], f"{r['mtime_timestamped_records_sum']:,}", f"{r['records_sum']:,}"]
            for r in stamped
        ],
        "failure_rows": [
            [
                f.file,
                "" if f.position is None else f.position,
                "" if f.offset is None else f.offset,
                f.partition,
                f.kind,
                f.message.splitlines()[0] if f.message else "",
            ]
            for f in s.failures
        ],
        "scroll_rows": SCROLL_ROWS,
    }
    return _TEMPLATES.get_template("run_report.html").render(context)


def write_html(text: str, path: str | Path) -> Path:
    target = Path(path)
    write_durably(target, text)
    return target


# --- the rehearsal ------------------------------------------------------------------------------------------------


def _clients(report: dict[str, Any]) -> list[list[str]]:
    """``rehearse --clients``: a row per consumer (its own name and version), what it read before and after."""
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for stage in ("before", "after"):
        for v in (report.get(f"clients_{stage}") or {}).get("verdicts", []):
            cells.setdefault(v["label"], {})[stage] = v
    rows = []
    for label, by_stage in cells.items():
        row = [label]
        for stage in ("before", "after"):
            v = by_stage.get(stage)
            row.append("not run" if v is None else f"{str(v['outcome']).upper()}: {v['summary']}")
        rows.append(row)
    return rows


def render_rehearsal(report: dict[str, Any]) -> str:
    """The canary rehearsal's report (``rehearse -o``) as a self-contained page: the verdict, each step's duration
    and throughput, growth, refusals with file and byte position, every reader's verdict, the fingerprint
    comparisons and the cluster window projection. ``report`` is the rehearsal's JSON report."""
    growth = report.get("growth") or {}
    projection = report.get("projection") or {}
    cluster = None
    if projection.get("cluster_parallel_seconds") is not None:
        cluster = {
            "parallel": human_seconds(float(projection["cluster_parallel_seconds"])),
            "serial": human_seconds(float(projection["cluster_serial_seconds"] or 0)),
            "basis": _text(projection.get("basis", "")),
        }
    context = {
        "report": {
            key: _text(report.get(key, ""))
            for key in ("id", "tool", "host", "started", "updated", "verdict", "next_steps", "oracle")
        },
        "ok": bool(report.get("ok")),
        "log_dirs": ", ".join(report.get("log_dirs", [])),
        "rehearsal_cards": [
            ("bytes before", "rehearsal-before", human_bytes(int(growth.get("bytes_in", 0)))),
            ("bytes after", "rehearsal-after", human_bytes(int(growth.get("bytes_out", 0)))),
            ("growth", "rehearsal-growth", _growth(int(growth.get("bytes_in", 0)), int(growth.get("bytes_out", 0)))),
            ("refusals", "rehearsal-refusals", str(len(report.get("refusals", [])))),
        ],
        "steps": [
            [
                s["name"],
                s["status"],
                human_seconds(float(s.get("seconds") or 0)),
                human_bytes(int(s.get("bytes") or 0)),
                human_rate(s["bytes_per_second"]) if s.get("bytes_per_second") else "",
                _text(s.get("message", "")),
            ]
            for s in report.get("steps", [])
        ],
        "refusals": [
            [r["step"], _text(r.get("file")), _text(r.get("position")), _text(r.get("offset")), r["message"]]
            for r in report.get("refusals", [])
        ],
        "readers": [
            [
                r["reader"],
                r["stage"],
                "not available" if not r["available"] else ("OK" if r["ok"] else "FAILED"),
                human_seconds(float(r.get("seconds") or 0)),
                r.get("partitions", 0),
                _text(r.get("detail", "")),
            ]
            for r in report.get("readers", [])
        ],
        "prints": [
            [
                f["what"],
                "identical" if f["identical"] else f"{f['total_changes']} changes",
                f["entries_before"],
                f["entries_after"],
                "; ".join(f"{c.get('path')}: {c.get('change', '')}" for c in f.get("changes", [])[:5]),
            ]
            for f in report.get("fingerprints", [])
        ],
        "clients": _clients(report),
        "clients_reference": _text(
            ((report.get("clients_after") or report.get("clients_before")) or {}).get("reference")
        ),
        "clients_missing": list(
            dict.fromkeys(
                [
                    *((report.get("clients_before") or {}).get("missing") or []),
                    *((report.get("clients_after") or {}).get("missing") or []),
                ]
            )
        ),
        "cluster": cluster,
        "windows": [
            [
                b["broker"],
                human_bytes(int(b["bytes"])),
                human_seconds(float(b["window_seconds"])),
                human_seconds(float(b["cutover_seconds"])) if b.get("cutover_seconds") is not None else "",
                human_seconds(float(b["rollback_seconds"])) if b.get("rollback_seconds") is not None else "",
            ]
            for b in projection.get("brokers", [])
        ],
        "rolling_cutover": human_seconds(float(projection["cluster_rolling_cutover_seconds"]))
        if projection.get("cluster_rolling_cutover_seconds") is not None
        else None,
        "cutover_changed": projection.get("cutover_changed_fraction"),
        "caveats": projection.get("caveats", []),
        "events": report.get("events", []),
        "scroll_rows": SCROLL_ROWS,
    }
    return _TEMPLATES.get_template("rehearsal.html").render(context)
