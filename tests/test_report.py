"""``report``: the per-segment Parquet table read back with pyarrow, and the HTML report opened in real headless
Chromium, both against the run's own totals; execute ends with the same summary."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import chromium_path, run_cli
from kafka_layout import make_broker_logdir

from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.planning.plan import load_plan
from migrate.reports import report_page
from migrate.reports.run_report import parts_here, run_summary
from migrate.units import human_bytes

# one xdist worker: its one executed run serves every test
pytestmark = pytest.mark.xdist_group("report")

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1", "plain-v1-0"]
CORRUPT = ("plain-v1-0", 0)


def corrupt_in_place(path: Path, at: int) -> None:
    """Flip a byte inside a message, keeping size, inode and mtime: what the plan recorded still matches."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict:
    """plan + execute (serial) of four partitions, one segment corrupted after planning; then report."""
    tmp = tmp_path_factory.mktemp("report")
    log_dir = make_broker_logdir(tmp, partitions=PARTITIONS)
    plan = tmp / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan)]) == 0
    corrupt_in_place(log_dir / CORRUPT[0] / f"{CORRUPT[1]:020d}.log", 60)
    code = subprocess.run(
        ["kafka-log-migrate", "execute", "--plan", str(plan), "--engine", "serial", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    html, parquet = tmp / "run.html", tmp / "segments.parquet"
    rep = subprocess.run(
        ["kafka-log-migrate", "report", "--plan", str(plan), "-o", str(html), "--parquet", str(parquet), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "tmp": tmp,
        "log_dir": log_dir,
        "plan": plan,
        "execute_code": code.returncode,
        "execute": json.loads(code.stdout),
        "report_code": rep.returncode,
        "report": json.loads(rep.stdout),
        "html": html,
        "parquet": parquet,
    }


def test_the_parquet_table_has_a_row_per_planned_segment_and_sums_to_the_runs_totals(executed):
    plan = json.loads(executed["plan"].read_text())
    totals = executed["execute"]["totals"]
    summary = executed["report"]
    table = pq.read_table(executed["parquet"])
    assert executed["execute_code"] == 1 and executed["report_code"] == 0  # the corrupted partition is not migrated
    assert table.num_rows == plan["estimates"]["segments"]
    assert table.schema.metadata[b"plan_id"].decode() == plan["plan_id"]
    assert json.loads(table.schema.metadata[b"options"]) == plan["options"]
    converted = table.filter(table["converted"])
    # equal to the report's totals, and to what execute itself reported
    assert pc.sum(converted["source_bytes"]).as_py() == summary["bytes_before"] == totals["bytes_in"]
    assert pc.sum(converted["output_bytes"]).as_py() == summary["bytes_after"] == totals["bytes_out"]
    assert pc.sum(converted["records"]).as_py() == summary["records"] == totals["records"]
    assert converted.num_rows == summary["converted_segments"] == totals["verified"]
    assert pc.sum(table["planned_bytes"]).as_py() == summary["planned_bytes"] == plan["estimates"]["bytes"]
    states = dict(
        zip(*[table.group_by("state").aggregate([("state", "count")])[c].to_pylist() for c in ("state", "state_count")])
    )
    assert states == {"swapped": 6, "refused": 1, "planned": 2}  # the refused partition's others were not tried
    # magics in: the legacy entries of every segment; the timestamps policy; mtime timestamps only for v0 data
    assert pc.sum(pc.add(table["entries_v0"], table["entries_v1"])).as_py() > 0
    assert set(table["timestamps_policy"].to_pylist()) == {"mtime"}
    stamped = set(table.filter(pc.greater(table["mtime_timestamped_records"], 0))["partition_dir"].to_pylist())
    assert stamped == {"plain-v0-1", "gzip-v0-0"}
    # the failure, with its file and byte position, as execute reported it
    (problem,) = executed["execute"]["problems"]
    failed = table.filter(table["problem_kind"].is_valid()).to_pylist()
    assert [(r["problem_file"], r["problem_position"], r["problem_kind"]) for r in failed] == [
        (problem["problem"]["path"], problem["problem"]["position"], problem["problem"]["kind"])
    ]
    assert failed[0]["problem_file"] == str(executed["log_dir"] / CORRUPT[0] / f"{CORRUPT[1]:020d}.log")
    # each converted segment's finish time: in its task's order, within the run
    assert converted.filter(converted["finished_at"].is_null()).num_rows == 0
    assert summary["duration_seconds"] > 0 and summary["throughput_bytes_per_second"] > 0


def headless(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_executes_summary_summed_in_the_state_is_the_report_tables_summary(executed):
    """execute sums its summary in each log dir's state (no row per segment in the driver); report computes it from
    the table: the same figures, the corrupted segment's failure with its file and position included."""
    from_state, from_table = executed["execute"]["summary"], executed["report"]
    assert from_state == {key: from_table[key] for key in from_state}
    assert from_state["states"]["refused"] == 1 and from_state["partition_states"]["failed"] == 1
    (failure,) = from_state["failures"]
    assert failure["partition"] == CORRUPT[0] and failure["file"].endswith(f"{CORRUPT[1]:020d}.log")
    assert failure["position"] is not None
    assert from_state["mtime_partitions"] == from_table["mtime_partitions"] > 0


class _CountingEngine(SerialEngine):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def map(self, stage, fn, calls, fold=None):
        self.calls += [c.log_dir for c in calls]
        return super().map(stage, fn, calls, fold)


def test_the_summary_read_beside_the_last_status_is_the_one_the_engine_reads(executed):
    """execute reads this host's summary parts in a thread while its last status runs (``parts_here``); the engine
    is then asked for none of them, and the sum is what the engine's own reading gives."""
    plan = load_plan(executed["plan"])
    read = parts_here(plan)
    assert set(read) == {d.key for d in plan.log_dirs} and all(p is not None for p in read.values())
    asked, unasked = _CountingEngine(), _CountingEngine()
    assert run_summary(plan, unasked, executed["plan"], read) == run_summary(plan, asked, executed["plan"])
    assert unasked.calls == [] and asked.calls == [d.key for d in plan.log_dirs]


def test_the_html_report_in_chromium_shows_the_runs_totals_without_script_errors(executed, tmp_path):
    browser = chromium_path()
    summary = executed["report"]
    url = executed["html"].resolve().as_uri()
    proc = headless(browser, tmp_path / "profile", "--dump-dom", url)
    dom = proc.stdout
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert 'data-ready="yes"' in dom  # the page's script ran to its end
    assert f'id="plan-id">{summary["plan_id"]}<' in dom
    # sizes as every verb prints them (human_bytes), not 378,000,000 beside the terminal's 378.0 MB
    assert f'id="total-before">{human_bytes(summary["bytes_before"])}<' in dom
    assert f'id="total-after">{human_bytes(summary["bytes_after"])}<' in dom
    assert f'id="total-records">{summary["records"]:,}<' in dom
    assert f'id="total-segments">{summary["converted_segments"]} of {summary["planned_segments"]}<' in dom
    assert f'id="total-growth">{summary["growth"]:+.1%}<' in dom
    assert 'id="total-failures">1<' in dom
    assert str(executed["log_dir"] / CORRUPT[0] / f"{CORRUPT[1]:020d}.log") in dom
    for topic in ("plain-v0", "gzip-v0", "lz4-v1", "plain-v1"):
        assert f"<td>{topic}</td>" in dom
    assert dom.count("<svg") >= 3  # throughput over time, bytes per topic, mtime-timestamped partitions
    shot = tmp_path / "report.png"
    headless(browser, tmp_path / "profile2", f"--screenshot={shot}", "--window-size=1400,2000", url)
    assert shot.stat().st_size > 10_000  # something was drawn (look at it: KLM_REPORT_SCREENSHOT keeps a copy)
    if os.environ.get("KLM_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["KLM_REPORT_SCREENSHOT"])


def test_the_report_is_self_contained(executed):
    page = executed["html"].read_text()
    assert not re.search(r'(src|href)="(https?:)?//', page)  # no network: opens on an air-gapped host
    assert "<script src" not in page and "<link" not in page


def test_a_report_of_many_alike_partitions_stays_short(executed):
    """Issue 23: 2,000 partitions made a 62,226 px page of one table row each, and a chart of identical bars."""
    table = pq.read_table(executed["parquet"])
    one = table.filter(pc.equal(table["partition_dir"], "plain-v0-1"))
    column = table.schema.get_field_index("partition_dir")
    copies = [one.set_column(column, "partition_dir", pa.array([f"orders-{i}"] * one.num_rows)) for i in range(2000)]
    page = report_page.render_html(pa.concat_tables(copies).replace_schema_metadata(table.schema.metadata))
    assert page.count("<tr>") > 2000 and '<div class="scroll">' in page  # every partition listed, in a scroll box
    assert "2,000 rows: the table scrolls" in page
    assert page.count("<svg") == 2  # throughput and bytes per topic: the mtime chart's bars would all be equal
    assert (
        "Not plotted, every bar would be the same: 60 records (records with the mtime = records) for each of the "
        "2,000 partitions." in page
    )


def test_a_chart_draws_equal_series_once_and_says_what_it_leaves_out():
    labels = [f"p-{i}" for i in range(70)]
    chart = report_page.bar_chart(
        labels,
        [("a", "#000", [float(i) for i in range(70)]), ("b", "#111", [float(i) for i in range(70)])],
        "records",
        "partitions",
        shown=60,
    )
    assert chart.note == "" and chart.legend == (("a = b", "#000"),)
    assert len(chart.groups) == 60 and [len(g.bars) for g in chart.groups] == [1] * 60
    assert chart.more == "The first 60 of 70 partitions; the table below lists them all."
    assert report_page.bar_chart(["x"], [("a", "#000", [5.0])], "records", "partitions").groups  # one bar: drawn


def test_execute_ends_with_the_same_summary_as_report(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "lz4-v1-1"])
    plan = tmp_path / "plan.json"
    assert run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan)).code == 0
    ran = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    assert ran.code == 0
    execute_out = ran.out
    ran = run_cli(capsys, "report", "--plan", str(plan))
    assert ran.code == 0
    report_out = ran.out
    block = report_out[report_out.index("summary of plan") : report_out.index("segments (Parquet")]
    assert block in execute_out
    tail = execute_out[execute_out.index(block) + len(block) :]
    assert f"kafka-log-migrate verify --plan {plan}" in tail and "start the broker" in tail
    assert f"kafka-log-migrate finalize --plan {plan}" in tail
    assert (tmp_path / "plan-report.html").exists() and (tmp_path / "plan-segments.parquet").exists()


def test_report_after_finalize_reads_the_state_archived_beside_the_plan(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["gzip-v0-0"])
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan))
    ran = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial", "--json")
    totals = json.loads(ran.out)["totals"]
    assert run_cli(capsys, "finalize", "--plan", str(plan)).code == 0
    ran = run_cli(capsys, "report", "--plan", str(plan), "--json")
    assert ran.code == 0
    summary = json.loads(ran.out)
    assert (summary["bytes_before"], summary["bytes_after"]) == (totals["bytes_in"], totals["bytes_out"])
    assert summary["states"] == {"swapped": 2}


def test_report_before_any_run_refuses_with_what_to_do(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["gzip-v0-0"])
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan))
    ran = run_cli(capsys, "report", "--plan", str(plan))
    assert ran.code == 1
    err = ran.err
    assert "nothing to report" in err and f"execute --plan {plan}" in err
