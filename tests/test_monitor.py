"""The migration watched live on a LocalCluster: Dask's own dashboard (bokeh), /migration/status.json and /metrics,
fetched while the run is paused half-way and after it, checked against the run's own per-segment results.

One run serves every test of the module: four partitions, one segment per task, one of them corrupted after planning
(a CRC refusal with a file and byte position, and the partition's other segments skipped). The worker runs in this
process (``processes=False``), so the test can hold it between two segments and look at the pages meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import chromium_path
from kafka_layout import make_broker_logdir
from prometheus_client.parser import text_string_to_metric_families

from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.model.plan_tree import Plan
from migrate.model.run_state import Outcome, PartitionState, Problem, SegmentOutcome
from migrate.model.stage_reports import ExecuteReport
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest
from migrate.stages import convert as convert_stage
from migrate.watch.events import LOG_TOPIC, SEGMENTS_TOPIC, SegmentFinished

# one xdist worker: its one watched Dask run serves every test
pytestmark = pytest.mark.xdist_group("monitor")

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1", "plain-v1-0"]
CORRUPT = ("plain-v1-0", 0)  # partition, base offset of the segment damaged after planning
PAUSE_AFTER = 4  # segments converted before the worker is held


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200, url
        return r.read().decode()


def status_json(base: str) -> dict:
    return json.loads(fetch(f"{base}/migration/status.json"))


def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the scheduler's /metrics: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(fetch(f"{base}/metrics")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def wait_for(predicate, what: str, seconds: float = 60.0):
    """Events reach the scheduler asynchronously: poll until they have (a deadline, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class WatchedRun:
    plan: Plan
    log_dir: str
    base: str
    report: ExecuteReport
    finished: list[SegmentOutcome]  # what convert_and_verify returned, in order: the run's own results
    fed: list[SegmentOutcome]  # what the client's on_segment was told (the progress line's feed)
    mid_status: dict
    mid_metrics: dict
    mid_dask_status: str
    after_dask_status: str
    subscribed: tuple[str, ...]  # the event topics the client subscribed to


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
def run(tmp_path_factory) -> WatchedRun:
    tmp = tmp_path_factory.mktemp("monitor")
    log_dir = make_broker_logdir(tmp, partitions=PARTITIONS)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), task_bytes=1))
    corrupt_in_place(log_dir / CORRUPT[0] / f"{CORRUPT[1]:020d}.log", 60)
    fed: list[SegmentOutcome] = []
    engine = DaskEngine(
        n_workers=1, processes=False, dashboard_address="127.0.0.1:0", progress=False, on_segment=fed.append
    )
    base = engine.dashboard_link.rsplit("/", 1)[0]
    finished: list[SegmentOutcome] = []
    held, release = threading.Event(), threading.Event()
    real = convert_stage.convert_and_verify

    def convert_and_verify(*args):
        if len(finished) == PAUSE_AFTER:
            held.set()
            release.wait(120)
        outcome = real(*args)
        finished.append(outcome)
        return outcome

    outcome: dict[str, ExecuteReport] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert_stage, "convert_and_verify", convert_and_verify)
        worker = threading.Thread(target=lambda: outcome.setdefault("report", pipeline.execute(plan, engine)))
        worker.start()
        try:
            assert held.wait(120), "the run never reached the pause"
            done = finished[:PAUSE_AFTER]
            mid_status = wait_for(
                lambda: (s := status_json(base))["totals"]["converted"]["segments"] == len(done) and s,
                "the first segments' events",
            )
            mid_metrics = samples(base)
            mid_dask_status = fetch(f"{base}/status")
        finally:
            release.set()
            worker.join(300)
    after_dask_status = fetch(f"{base}/status")
    yield WatchedRun(
        plan,
        str(log_dir),
        base,
        outcome["report"],
        finished,
        fed,
        mid_status,
        mid_metrics,
        mid_dask_status,
        after_dask_status,
        tuple(engine._topics),
    )
    engine.close()


def figures(outcomes: list[SegmentOutcome]) -> dict[str, int]:
    ok = [o for o in outcomes if o.outcome in (Outcome.VERIFIED, Outcome.UNCHANGED)]
    return {
        "verified": len(ok),
        "verified_bytes": sum(o.source_bytes for o in ok),
        "failed": sum(1 for o in outcomes if o.outcome in (Outcome.REFUSED, Outcome.FAILED)),
        "output_bytes": sum(o.output_bytes for o in ok),
        "records": sum(o.records for o in ok),
    }


def test_the_printed_address_serves_dasks_own_bokeh_status_page_with_a_link_to_ours(run):
    for page in (run.mid_dask_status, run.after_dask_status):
        assert "Dask needs bokeh" not in page
        assert "Bokeh" in page and "static/js/bokeh" in page  # Dask's bokeh application, not a placeholder
        assert '<a href="migration">Migration</a>' in page  # our page in Dask's navigation bar
    assert "migration/status.json" in fetch(f"{run.base}/migration")


def test_status_json_half_way_counts_the_segments_done_so_far(run):
    s = run.mid_status
    done = figures(run.finished[:PAUSE_AFTER])
    planned_bytes = sum(seg.size for p in run.plan.log_dirs[0].partitions for seg in p.segments)
    assert s["plan"]["plan_id"] == run.plan.plan_id
    assert s["totals"]["planned"] == {"segments": run.plan.estimates.segments, "bytes": planned_bytes}
    assert s["totals"]["verified"] == {"segments": done["verified"], "bytes": done["verified_bytes"]}
    assert s["totals"]["output_bytes"] == done["output_bytes"] and s["totals"]["records"] == done["records"]
    assert s["totals"]["swapped"]["segments"] == 0  # nothing is live before every segment is converted
    assert 0 < s["totals"]["pending"]["bytes"] < planned_bytes
    assert s["rate"]["mb_per_s"] > 0 and s["rate"]["eta_seconds"] > 0 and s["rate"]["series"]
    assert s["stage"] == "convert"
    by_partition = {p["partition"]: p for p in s["partitions"]}
    for o in run.finished[:PAUSE_AFTER]:
        assert by_partition[o.partition]["state"] in ("converting", "ready", "failed")


def test_metrics_half_way_equal_the_segments_done_so_far(run):
    done = figures(run.finished[:PAUSE_AFTER])
    labels = (("log_dir", run.log_dir), ("outcome", "verified"), ("stage", "convert"))
    m = run.mid_metrics
    assert m[("kafka_log_migrate_segments_total", labels)] == done["verified"]
    assert m[("kafka_log_migrate_source_bytes_total", labels)] == done["verified_bytes"]
    assert m[("kafka_log_migrate_output_bytes_total", labels)] == done["output_bytes"]
    assert m[("kafka_log_migrate_eta_seconds", ())] > 0
    assert m[("kafka_log_migrate_planned_segments", (("log_dir", run.log_dir),))] == run.plan.estimates.segments


def test_status_json_after_the_run_equals_its_results(run):
    report, s = run.report, status_json(run.base)
    assert not report.ok  # the corrupted partition is not migrated; the three others are
    totals = report.totals
    assert s["totals"]["verified"] == {"segments": totals.verified + totals.unchanged, "bytes": totals.bytes_in}
    assert s["totals"]["output_bytes"] == totals.bytes_out and s["totals"]["records"] == totals.records
    assert s["totals"]["failed"]["segments"] == totals.refused + totals.failed == 1
    assert s["totals"]["skipped"]["segments"] == totals.skipped == 2  # the refused partition's other segments
    assert s["totals"]["pending"] == {"segments": 0, "bytes": 0}
    states = {p["partition"]: p["state"] for p in s["partitions"]}
    assert states == {"plain-v0-1": "migrated", "gzip-v0-0": "migrated", "lz4-v1-1": "migrated", "plain-v1-0": "failed"}
    migrated = [p for p in run.plan.log_dirs[0].partitions if p.name != CORRUPT[0]]
    assert s["totals"]["swapped"] == {
        "segments": sum(len(p.segments) for p in migrated),
        "bytes": sum(p.bytes for p in migrated),
    }
    for p in s["partitions"]:  # per partition: exactly the run's outcomes of that partition
        mine = figures([o for o in run.finished if o.partition == p["partition"]])
        assert (p["verified"]["segments"], p["verified"]["bytes"], p["records"]) == (
            mine["verified"],
            mine["verified_bytes"],
            mine["records"],
        )
    (problem,) = report.problems
    (failure,) = s["failures"]
    assert failure["file"] == problem.problem.path == str(Path(run.log_dir) / CORRUPT[0] / f"{CORRUPT[1]:020d}.log")
    assert failure["position"] == problem.problem.position is not None
    assert failure["kind"] == problem.problem.kind and failure["partition"] == CORRUPT[0]
    assert s["log_dirs"][0]["partitions"] == {"failed": 1, "migrated": 3}


def test_metrics_after_the_run_equal_its_results(run):
    totals, m = run.report.totals, samples(run.base)
    convert = (("log_dir", run.log_dir), ("outcome", "verified"), ("stage", "convert"))
    refused = (("log_dir", run.log_dir), ("outcome", "refused"), ("stage", "convert"))
    skipped = (("log_dir", run.log_dir), ("outcome", "skipped"), ("stage", "convert"))
    swapped = (("log_dir", run.log_dir), ("outcome", "swapped"), ("stage", "swap"))
    assert m[("kafka_log_migrate_segments_total", convert)] == totals.verified
    assert m[("kafka_log_migrate_source_bytes_total", convert)] == totals.bytes_in
    assert m[("kafka_log_migrate_output_bytes_total", convert)] == totals.bytes_out
    assert m[("kafka_log_migrate_records_total", convert)] == totals.records
    assert m[("kafka_log_migrate_segments_total", refused)] == totals.refused == 1
    assert m[("kafka_log_migrate_segments_total", skipped)] == totals.skipped
    assert m[("kafka_log_migrate_segments_total", swapped)] == totals.verified
    assert m[("kafka_log_migrate_partitions", (("log_dir", run.log_dir), ("state", "migrated")))] == 3
    assert m[("kafka_log_migrate_partitions", (("log_dir", run.log_dir), ("state", "failed")))] == 1
    assert m[("kafka_log_migrate_eta_seconds", ())] == 0
    assert m[("kafka_log_migrate_tasks_total", (("stage", "convert"), ("state", "done")))] == len(run.plan.tasks)
    assert ("kafka_log_migrate_plan_info", (("plan_id", run.plan.plan_id), ("version", "0.1.0"))) in m
    assert not [name for name, _ in m if name.startswith("kafka_log_migrate") and name.endswith("_created")]


def test_the_in_process_scheduler_told_the_client_every_segment_as_it_finished(run):
    key = lambda o: (o.partition, o.base_offset, o.outcome, o.source_bytes, o.output_bytes)  # noqa: E731
    assert sorted(map(key, run.fed)) == sorted(map(key, run.finished))
    # told by the scheduler's plugin in this process, not sent back to it through a subscription
    assert SEGMENTS_TOPIC not in run.subscribed and LOG_TOPIC in run.subscribed


def test_the_migration_page_renders_the_runs_figures_in_chromium(run, tmp_path):
    chromium = chromium_path()
    proc = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",  # the page's own fetch of status.json completes before the DOM is dumped
            "--dump-dom",
            f"{run.base}/migration",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    dom = proc.stdout
    assert f'data-plan="{run.plan.plan_id}"' in dom, proc.stderr[-2000:]
    assert f"plan {run.plan.plan_id}: 4 partitions, {run.plan.estimates.segments} segments" in dom
    assert "1 failed" in dom and str(Path(run.log_dir) / CORRUPT[0] / f"{CORRUPT[1]:020d}.log") in dom
    assert "<polyline" in dom  # the MB/s chart was drawn


# --- the plugin's arithmetic, without a cluster ----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def event_of(
    plan: Plan, partition: str, index: int, outcome: Outcome = Outcome.VERIFIED, problem: Problem | None = None
) -> SegmentFinished:
    from migrate.watch.events import segment_event

    d = plan.log_dirs[0]
    seg = d.partition_by_name[partition].segments[index]
    done = outcome in (Outcome.VERIFIED, Outcome.UNCHANGED)
    o = SegmentOutcome(
        d.log_dir,
        partition,
        seg.base_offset,
        outcome,
        source_bytes=seg.size if done else 0,
        output_bytes=seg.size * 2 if done else 0,
        records=10 if done else 0,
        problem=problem,
    )
    return segment_event(o, plan)


@pytest.fixture
def small_plan(tmp_path) -> Plan:
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    return build_plan(PlanRequest(log_dirs=(str(log_dir),), task_bytes=1))


def test_rate_and_eta_follow_the_last_half_minute_of_work(small_plan):
    from migrate.watch.events import plan_event
    from migrate.watch.tally import RunProgress

    clock = Clock()
    run = RunProgress(small_plan.plan_id, clock)
    run.plan(plan_event(small_plan))
    sizes = {(p.name, i): s.size for p in small_plan.log_dirs[0].partitions for i, s in enumerate(p.segments)}
    run.segment(event_of(small_plan, "gzip-v0-0", 0))
    clock.now += 40  # the first segment leaves the window
    run.segment(event_of(small_plan, "gzip-v0-0", 1))
    clock.now += 10
    rate = sizes[("gzip-v0-0", 1)] / 30  # one segment in the last 30 s
    assert run.rate() == pytest.approx(rate, rel=0.05)
    pending = small_plan.estimates.bytes - sizes[("gzip-v0-0", 0)] - sizes[("gzip-v0-0", 1)]
    assert run.eta_seconds() == pytest.approx(pending / rate, rel=0.05)
    series = run.series()
    assert series[0][0] == 0 and series[-1][0] == pytest.approx(40, abs=1)
    assert sum(mbps for _, mbps in series) * 1e6 == pytest.approx(sizes[("gzip-v0-0", 0)] + sizes[("gzip-v0-0", 1)])


def test_a_resumed_run_counts_earlier_work_as_skipped_and_takes_the_stores_word_for_states(small_plan):
    from migrate.watch.events import PartitionStates, PartitionStateSeen, SegmentsSkipped, SkippedSegment, plan_event
    from migrate.watch.tally import RunProgress

    run = RunProgress(small_plan.plan_id, Clock())
    run.plan(plan_event(small_plan))
    log_dir = small_plan.log_dirs[0].log_dir
    gzip = small_plan.log_dirs[0].partition_by_name["gzip-v0-0"]
    run.stage(
        SegmentsSkipped(
            small_plan.plan_id,
            log_dir,
            tuple(SkippedSegment("gzip-v0-0", s.base_offset, s.size) for s in gzip.segments),
        )
    )
    problem = Problem(kind="corrupt", message="CRC\ntrace", path="/x.log", position=77, offset=3)
    refused = event_of(small_plan, "plain-v0-1", 0, Outcome.REFUSED, problem)
    run.segment(refused)
    assert run.status()["totals"]["skipped"] == {"segments": 2, "bytes": gzip.bytes}
    assert {p["partition"]: p["state"] for p in run.status()["partitions"]} == {
        "gzip-v0-0": "ready",
        "plain-v0-1": "failed",
    }
    run.stage(
        PartitionStates(
            small_plan.plan_id,
            log_dir,
            (
                PartitionStateSeen("gzip-v0-0", PartitionState.MIGRATED),
                PartitionStateSeen("plain-v0-1", PartitionState.FAILED),
            ),
        )
    )
    s = run.status()
    assert {p["partition"]: p["state"] for p in s["partitions"]} == {"gzip-v0-0": "migrated", "plain-v0-1": "failed"}
    assert s["totals"]["swapped"] == {"segments": 2, "bytes": gzip.bytes}  # migrated by the earlier run
    assert [(f["file"], f["position"], f["message"]) for f in s["failures"]] == [("/x.log", 77, "CRC")]
    assert s["partitions"][0]["partition"] == "plain-v0-1"  # failed partitions first
    assert run.figures[(log_dir, "convert", "skipped")].segments == 2
    assert (log_dir, "swap", "swapped") not in run.figures  # this run swapped nothing


def test_a_segment_converted_in_ranges_shows_progress_range_by_range_and_counts_once(tmp_path):
    """Ranges report their bytes as they finish (so bytes, rate and ETA move during a large segment); the segment's
    outcome from its join then adds only what they did not, in the page's figures and in the command line's."""
    from migrate.engines import SerialEngine
    from migrate.model.run_state import RangeProgress
    from migrate.watch.events import plan_event, segment_event
    from migrate.watch.runlog import Progress
    from migrate.watch.tally import RunProgress

    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), range_bytes=3000))
    ranged = {(t.segments[0].partition, t.segments[0].base_offset) for t in plan.tasks if t.byte_range}
    events: list = []
    assert pipeline.execute(plan, SerialEngine(on_segment=events.append)).ok
    ranges = [e for e in events if isinstance(e, RangeProgress)]
    assert {(r.partition, r.base_offset) for r in ranges} == ranged and len(ranged) == 3
    for name, base in ranged:  # the ranges of a segment, each with its nominal bytes, before the segment's outcome
        mine = [i for i, e in enumerate(events) if (e.partition, e.base_offset) == (name, base)]
        assert all(isinstance(events[i], RangeProgress) for i in mine[:-1])
        assert isinstance(events[mine[-1]], SegmentOutcome)
        size = plan.partition(str(log_dir), name).segment_by_base[base].size
        reported = sum(events[i].source_bytes for i in mine[:-1])
        # never more than the segment: a range refused from a start the join then finds false reports nothing
        # (gzip-v0-0/92 has one: its join converts that part again); the segment's outcome adds the rest
        assert 0 < reported <= size

    clock = Clock()
    run = RunProgress(plan.plan_id, clock)
    run.plan(plan_event(plan))
    line = Progress(plan, out=None, clock=clock)  # type: ignore[arg-type]
    first = next(
        i for i, e in enumerate(events) if isinstance(e, SegmentOutcome) and (e.partition, e.base_offset) in ranged
    )
    for e in events[:first]:
        run.segment(segment_event(e, plan))
        line.segment(e)
    done_early = sum(e.source_bytes for e in events[:first] if isinstance(e, RangeProgress))
    assert done_early > 0 and run.totals()["converted"]["bytes"] >= done_early  # moving before any ranged join
    assert run.totals()["pending"]["bytes"] <= plan.estimates.bytes - done_early
    for e in events[first:]:
        run.segment(segment_event(e, plan))
        line.segment(e)
    totals = run.totals()
    assert (
        totals["converted"]
        == totals["verified"]
        == {"segments": plan.estimates.segments, "bytes": plan.estimates.bytes}
    )
    assert totals["pending"] == {"segments": 0, "bytes": 0}
    assert sum(run.throughput.per_second.values()) == plan.estimates.bytes  # each byte's work counted once
    assert (line.done_bytes, line.done_segments) == (plan.estimates.bytes, plan.estimates.segments)


def test_every_stage_is_counted_by_its_exact_name_on_status_json_and_in_prometheus():
    """A task key is ``<stage>-<hash>``: each of the model's stages is counted under its own name, in status.json and
    in the collector (``rollback-check`` is not ``rollback``, ``replica-ranges`` not ``replicas``)."""
    from migrate.model.run_state import Stage
    from migrate.watch.plugin import MigrationPlugin, stage_of
    from migrate.watch.prometheus import MigrationCollector

    plugin = MigrationPlugin()
    plugin.run("a-plan")
    for i, stage in enumerate(Stage):
        for n in range(i + 1):
            plugin.transition(f"{stage.value}-{n:016x}", "processing", "memory")
        plugin.transition(f"{stage.value}-{i:016x}", "processing", "erred", exception_text="boom")
    plugin.transition("unrelated-0123456789abcdef", "processing", "memory")
    plugin.transition("convert", "processing", "memory")  # no hash: not one of ours
    assert stage_of("rollback-check-0123456789abcdef") == Stage.ROLLBACK_CHECK
    assert stage_of(("convert-0123456789abcdef", 0)) is None

    stages = json.loads(json.dumps(plugin.status()))["stages"]
    assert list(stages) == [s.value for s in Stage]
    assert {name: (c["done"], c["erred"]) for name, c in stages.items()} == {
        s.value: (i + 1, 1) for i, s in enumerate(Stage)
    }
    failures = plugin.runs["a-plan"].status()["failures"]
    assert [f["stage"] for f in failures] == [s.value for s in Stage]

    tasks = {
        (s.labels["stage"], s.labels["state"]): s.value
        for family in MigrationCollector(plugin).collect()
        for s in family.samples
        if s.name == "kafka_log_migrate_tasks_total"
    }
    assert tasks == {
        **{(s.value, "done"): i + 1 for i, s in enumerate(Stage)},
        **{(s.value, "erred"): 1 for s in Stage},
    }


def test_events_cross_the_wire_as_plain_data_and_come_back_as_the_same_records(small_plan):
    """What workers and the client publish is decoded once, where it arrives, into the record that was sent; an event
    that does not fit is refused with the key that does not."""
    import msgpack

    from migrate.errors import ModelError
    from migrate.model.run_state import LogDirPhase, LogDirStatus, PartitionStatus, RangeProgress, Stage
    from migrate.model.stage_reports import ConvertTaskResult, PartitionProblem, RollbackReport, SwapReport
    from migrate.watch import events

    d = small_plan.log_dirs[0]
    failed = PartitionProblem("gzip-v0-0", Problem("live-changed", "changed", "/x.log"))
    sent = [
        (events.PLAN_TOPIC, events.plan_event(small_plan)),
        (
            events.SEGMENTS_TOPIC,
            events.SegmentsFinished(
                (
                    event_of(small_plan, "gzip-v0-0", 0),
                    events.segment_event(RangeProgress(d.key, "gzip-v0-0", 0, 0, 2, 100), small_plan),
                )
            ),
        ),
        (
            events.STAGE_TOPIC,
            events.stage_event(
                small_plan,
                Stage.CONVERT,
                ConvertTaskResult((SegmentOutcome(d.key, "plain-v0-1", 0, Outcome.SKIPPED),)),
            ),
        ),
        (
            events.STAGE_TOPIC,
            events.stage_event(
                small_plan, Stage.SWAP, SwapReport(d.key, ("plain-v0-1",), (failed,), (), fence_up=False)
            ),
        ),
        (
            events.STAGE_TOPIC,
            events.stage_event(small_plan, Stage.ROLLBACK, RollbackReport(d.key, LogDirPhase.EXECUTING, ("x-0",))),
        ),
        (
            events.STAGE_TOPIC,
            events.stage_event(
                small_plan,
                Stage.STATUS,
                LogDirStatus(
                    d.key, LogDirPhase.EXECUTING, False, (PartitionStatus(d.key, "x-0", PartitionState.READY, {}),)
                ),
            ),
        ),
    ]
    for topic, record in sent:
        assert record is not None
        wire = msgpack.unpackb(msgpack.packb(events.encode(record)), use_list=False)  # as Dask's comms unpack it
        assert events.decode_run_event(topic, wire) == record
        stamped = {**wire, "worker": "tcp://10.0.0.7:40000"}  # as the scheduler hands a worker's event to plugins
        assert events.decode_run_event(topic, stamped) == record
    assert events.decode_run_event("some-other-topic", {"anything": 1}) is None
    log = events.WorkerLogRecord("migrate.x", 30, "WARNING", "careful", 1.5, "tcp://w:1")
    assert events.decode_worker_log(events.encode(log)) == log

    bad = events.encode(events.SegmentsFinished((event_of(small_plan, "gzip-v0-0", 0),)))
    bad["base_offset"] = ["zero"]
    with pytest.raises(ModelError, match="base_offset"):
        events.decode_run_event(events.SEGMENTS_TOPIC, bad)
    with pytest.raises(ModelError, match="kind"):
        events.decode_run_event(events.STAGE_TOPIC, {"kind": "teleport", "plan_id": "p", "log_dir": "/d"})


def test_the_page_names_the_convert_stage_while_the_drivers_own_process_converts(small_plan):
    """A plan converted by the run's own process (a small plan asked for a dashboard, or the share it takes before
    and beside its workers) has no Dask task to show: its page said "stage: idle" at 31% converted."""
    from migrate.watch.events import plan_event
    from migrate.watch.plugin import MigrationPlugin

    plugin = MigrationPlugin()
    run = plugin.run(small_plan.plan_id)
    run.plan(plan_event(small_plan))
    assert plugin.status()["stage"] is None  # planned, nothing begun
    run.segment(event_of(small_plan, "gzip-v0-0", 0))  # one of its two segments
    assert {p["partition"]: p["state"] for p in plugin.status()["partitions"]}["gzip-v0-0"] == "converting"
    assert plugin.status()["stage"] == "convert" and plugin.status()["workers"] == 0
    for p in small_plan.log_dirs[0].partitions:
        for i in range(len(p.segments)):
            if (p.name, i) != ("gzip-v0-0", 0):
                run.segment(event_of(small_plan, p.name, i))
    assert plugin.status()["stage"] is None  # every segment converted: none is converting
