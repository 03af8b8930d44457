"""The cut-over after pre-staging: ``plan`` and ``execute`` after a clean stop take the staged conversions whose
sources are provably unchanged and convert the rest in the window, with every guarantee of a cold run.

Each Kafka action between the last pass and the cut-over is simulated with the file operations the broker's code
performs (tests/prestage_layout.py). Every run ends compared with a cold run of a copy of the same log dir: the same
bytes and mtimes in every file, and an independent scan agreeing with what execute said.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import lock_held_by_other_process
from prestage_layout import add_segment, broker_log_dir, cleaner_merge, gen, judge, retention_delete, snapshot
from runs import assert_scan_agrees, run_verb

from migrate import pipeline
from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.engines.dask import converted_bytes, worth_workers
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE, FileKind, segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.model.stage_reports import ExecuteReport
from migrate.planning.plan import build_plan, load_plan
from migrate.planning.request import PlanRequest
from migrate.prestage.controls import Controls
from migrate.prestage.location import default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.record import staged_segments
from migrate.prestage.tree import LOCK_FILE
from migrate.run.faults import CRASH_ENV, CRASH_EXIT, TRACE_ENV


def prestage(log_dir: Path) -> None:
    report = run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())
    assert report.ok


def cold_twin(log_dir: Path, root: Path) -> Path:
    """A copy of ``log_dir`` as it is now (copy2 keeps the mtimes a conversion stamps), with no staging beside it."""
    twin = root / "cold" / log_dir.name
    shutil.copytree(log_dir, twin)
    return twin


def execute(plan_path: Path) -> ExecuteReport:
    """``execute --plan`` on the serial engine; the report is checked against an independent scan."""
    plan = load_plan(plan_path)
    report = pipeline.execute(plan, SerialEngine())
    assert_scan_agrees(plan, report)
    return report


def plan_and_execute(log_dir: Path, plan_path: Path, *extra: str) -> ExecuteReport:
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path), *extra]) == 0
    return execute(plan_path)


def live_files(log_dir: Path) -> dict[str, tuple[bytes, int]]:
    """Every segment file of every partition: its bytes and mtime (the state and work dirs left out)."""
    out = {}
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(part.iterdir()):
            if path.is_file() and path.suffix in (".log", ".index", ".timeindex"):
                out[f"{part.name}/{path.name}"] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


def roll(partition_dir: Path, *bases: int, records: int = 100) -> None:
    """The active segment filled up and the broker rolled: new legacy segments from ``bases``."""
    for base in bases:
        add_segment(partition_dir, base, records, seed=base + 7)


def append(segment: Path, first_offset: int, records: int, tmp: Path) -> None:
    """The broker appends ``records`` legacy messages from ``first_offset`` to the active segment."""
    more = tmp / "append.log"
    gen.write_segment(more, records, first_offset=first_offset, magic=0, seed=first_offset, value_bytes=100)
    with segment.open("ab") as out:
        out.write(more.read_bytes())
    more.unlink()


@pytest.mark.parametrize("plan_name", ["plan.json", "plan.parquet"])  # the columnar form keeps `staged`
def test_the_cut_over_takes_what_was_staged_and_converts_only_what_rolled_since(tmp_path, capsys, plan_name):
    log_dir = broker_log_dir(tmp_path / "live", partitions=3, segments=3)
    prestage(log_dir)
    # after the last pass the active segment grew, then the broker rolled twice: 200 and 350 closed, 450 active
    append(log_dir / "t-0" / segment_name(200, ".log"), 300, 50, tmp_path)
    roll(log_dir / "t-0", 350, 450)
    twin = cold_twin(log_dir, tmp_path)

    plan_path = tmp_path / plan_name
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan_path))
    assert ran.code == 0
    assert "cut-over: 6 segments" in ran.out
    plan = load_plan(plan_path)
    (entry,) = plan.log_dirs
    assert entry.staging_dir == str(default_staging_root(log_dir))
    assert entry.stopped_at_ns == (log_dir / CLEAN_SHUTDOWN_FILE).stat().st_mtime_ns
    staged = {(p.name, s.base_offset) for p in entry.partitions for s in p.segments if s.staged}
    assert staged == {(f"t-{p}", b) for p in range(3) for b in (0, 100)}
    ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial", "--json")
    assert ran.code == 0
    out = ran.out
    cut = json.loads(out[out.index("{") :])["cutover"]
    assert (cut["staged_segments"], cut["window_segments"]) == (6, 3 + 2)  # each partition's 200; t-0's 350 and 450
    assert cut["fallbacks"] == [] and cut["window_seconds"] > 0 and cut["cold_seconds"] > 0
    assert cut["staged_bytes"] == sum(s.size for p in entry.partitions for s in p.segments if s.staged)
    # the staged files were taken (renamed), their records with them: nothing usable is left to take twice
    assert not [s for s in staged_segments(log_dir) if s.record.staged]

    assert plan_and_execute(twin, tmp_path / "cold.json").cutover is None  # a cold run says nothing of a cut-over
    assert live_files(log_dir) == live_files(twin)
    assert main(["status", "--plan", str(plan_path)]) == 0
    # finalize drops what is left staged for the migrated partitions (stale now), and nothing of the others
    (default_staging_root(log_dir) / "t-9").mkdir()
    (default_staging_root(log_dir) / "t-9" / "keep.txt").write_text("not ours")
    assert main(["finalize", "--plan", str(plan_path)]) == 0
    assert sorted(os.listdir(default_staging_root(log_dir))) == sorted([LOCK_FILE, "t-9"])


def test_the_window_is_told_beside_a_cold_run(tmp_path, capsys):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(tmp_path / "plan.json")]) == 0
    ran = run_cli(capsys, "execute", "--plan", str(tmp_path / "plan.json"), "--engine", "serial")
    assert ran.code == 0
    out = ran.out
    assert "cut-over: 2 segments" in out and "1 (" in out and "converted in the window" in out
    assert "window since the broker stopped" in out and "these stages without pre-staging: about" in out
    # the head line counts what this run converted apart from what it took: the passes converted those
    assert "1 segments converted and verified in the window, 2 taken from pre-staging" in out.splitlines()[0], out


def test_the_cut_over_summary_tells_the_operators_gap_and_rates_only_what_it_converted(tmp_path):
    """The window since the stop says how much of it came before `plan` (here the marker is 40 s old when planning
    starts); the run's rate counts only what the window converted, not the staged bytes it renamed into place; the
    cold estimate takes what was taken at no more than this window's own rate."""
    from migrate.commands.migration import _planned_at, cutover_lines
    from migrate.reports.run_report import run_summary, summary_lines
    from migrate.units import human_bytes, human_rate

    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    stopped = time.time() - 40
    os.utime(log_dir / CLEAN_SHUTDOWN_FILE, (stopped, stopped))
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    plan = load_plan(plan_path)
    report = pipeline.execute(plan, SerialEngine())
    c = report.cutover
    assert report.ok and c is not None and c.window_bytes > 0 and c.staged_bytes > 0 and c.window_seconds is not None
    (window,) = [line for line in cutover_lines(report, _planned_at(plan)) if "window since the broker stopped" in line]
    gap = float(re.search(r"of which about ([\d.]+) s passed before `plan` wrote the plan", window)[1])
    assert 39 <= gap <= min(45, c.window_seconds), window
    at_window_rate = c.delta_seconds * (1 + c.staged_bytes / c.window_bytes)
    assert c.cold_seconds <= c.checks_seconds + c.swap_seconds + at_window_rate + 0.002, c  # the figures' rounding
    summary = run_summary(plan, SerialEngine(), plan_path)
    assert summary is not None
    (duration,) = [line for line in summary_lines(summary, c) if "duration:" in line]
    rate = human_rate(c.window_bytes / c.delta_seconds)
    assert f"{rate} over the {human_bytes(c.window_bytes)} converted in the window" in duration, duration
    assert f"the {human_bytes(c.staged_bytes)} taken from pre-staging were renamed into place" in duration


def test_a_cold_plan_is_unchanged_when_nothing_was_staged(tmp_path):
    log_dir = broker_log_dir(tmp_path / "live", partitions=2, segments=2)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    text = plan_path.read_text()
    assert '"staged"' not in text and '"staging_dir"' not in text and '"stopped_at_ns"' not in text


def test_a_cut_over_does_not_start_dask_workers_for_the_bytes_it_takes_from_staging(tmp_path):
    """Taking a staged segment is three renames: a LocalCluster's workers (1.5-2.5 s to start, both cores meanwhile)
    are worth only what the window converts (benchmarks/bench_cutover.py)."""
    log_dir = broker_log_dir(tmp_path / "live", partitions=2, segments=3)
    prestage(log_dir)
    roll(log_dir / "t-0", 300)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    (entry,) = plan.log_dirs
    fresh = [s.size for p in entry.partitions for s in p.segments if not s.staged]
    assert len(fresh) == 3 and 0 < sum(fresh) < plan.estimates.bytes  # each active segment (200), and t-0's 300
    assert converted_bytes(plan) == sum(fresh)
    # the same plan as if its staged segments held 10 GB: a cold run of 10 GB would start them, the cut-over not
    heavy = dataclasses.replace(plan, estimates=dataclasses.replace(plan.estimates, bytes=int(10e9)))
    cold = dataclasses.replace(heavy, log_dirs=(dataclasses.replace(entry, staging_dir=None),))
    assert worth_workers(cold) and not worth_workers(heavy)


def test_what_kafka_did_after_the_last_pass_is_converted_from_the_live_files(tmp_path, capsys):
    log_dir = broker_log_dir(tmp_path / "live", partitions=4, segments=4)
    prestage(log_dir)
    # retention deleted a staged source: never resurrected
    retention_delete(log_dir / "t-0", 0)
    # the cleaner merged three staged segments into one file with the last one's mtime: a new inode
    cleaner_merge(log_dir / "t-1", [0, 100, 200])
    # a file deleted and recreated with the same name, size and mtime: only ctime tells
    recreated = log_dir / "t-2" / segment_name(100, ".log")
    st = recreated.stat()
    data = recreated.read_bytes()
    recreated.unlink()
    recreated.write_bytes(data)
    os.utime(recreated, ns=(st.st_atime_ns, st.st_mtime_ns))
    # follower truncation: a closed segment truncated in place and refilled to the same size
    truncated = log_dir / "t-3" / segment_name(0, ".log")
    size, mtime = truncated.stat().st_size, truncated.stat().st_mtime_ns
    refill = tmp_path / "refill.log"
    gen.write_segment(refill, 100, first_offset=0, magic=1, seed=99, value_bytes=100)
    with truncated.open("r+b") as f:
        f.truncate(size // 2)
        f.seek(size // 2)
        f.write(refill.read_bytes()[size // 2 : size])
    os.utime(truncated, ns=(mtime, mtime))
    # and .deleted files a clean stop left behind, and a deleted partition's -delete dir
    (log_dir / "t-3" / (segment_name(100, ".log") + ".deleted")).write_bytes(b"junk")
    shutil.copytree(log_dir / "t-3", log_dir / "t-3.0123456789abcdef0123456789abcdef-delete")
    twin = cold_twin(log_dir, tmp_path)

    plan_path = tmp_path / "plan.json"
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan_path))
    assert ran.code == 0
    out = ran.out
    assert "t-2: 1 pre-staged conversion(s) not used" in out and "source-changed" in out and "ctime_ns" in out
    assert "t-3: 1 pre-staged conversion(s) not used" in out
    plan = load_plan(plan_path)
    staged = {(p.name, s.base_offset) for p in plan.log_dirs[0].partitions for s in p.segments if s.staged}
    assert staged == {("t-0", 100), ("t-0", 200), ("t-2", 0), ("t-2", 200), ("t-3", 100), ("t-3", 200)}
    t0 = [s.base_offset for p in plan.log_dirs[0].partitions if p.name == "t-0" for s in p.segments]
    assert t0 == [100, 200, 300]
    cut = execute(plan_path).cutover
    assert cut is not None and (cut.staged_segments, cut.window_segments) == (
        6,
        1 + 2 + 2 + 2,
    )  # each 300, and what changed
    assert not (log_dir / "t-0" / segment_name(0, ".log")).exists()
    assert plan_and_execute(twin, tmp_path / "cold.json").ok
    assert live_files(log_dir) == live_files(twin)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "bit-flipped", "record-gone"])
def test_staged_outputs_damaged_after_the_plan_are_converted_anew(tmp_path, damage):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    twin = cold_twin(log_dir, tmp_path)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    (hit,) = [s for s in staged_segments(log_dir) if s.record.base_offset == 100]
    target = hit.files[FileKind.LOG]
    if damage == "deleted":
        target.unlink()
    elif damage == "truncated":
        os.truncate(target, target.stat().st_size - 1)
    elif damage == "bit-flipped":
        st = target.stat()
        with target.open("r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 1]))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime still tells
    else:
        hit.record_path.unlink()
    cut = execute(plan_path).cutover
    assert cut is not None and cut.staged_segments == 1 and cut.window_segments == 2
    (fallback,) = cut.fallbacks
    assert segment_name(100, ".log") in fallback and "staged-changed" in fallback
    assert plan_and_execute(twin, tmp_path / "cold.json").ok
    assert live_files(log_dir) == live_files(twin)


def test_other_options_or_a_new_leader_epoch_are_not_taken(tmp_path, capsys):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    plan_path = tmp_path / "plan.json"
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan_path), "--leader-epoch", "4")
    assert ran.code == 0
    assert "options-differ" in ran.out
    assert not any(s.staged for p in load_plan(plan_path).log_dirs[0].partitions for s in p.segments)
    ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan_path), "--no-staged")
    assert ran.code == 0
    assert "pre-staged" not in ran.out


def test_a_compacted_partition_never_takes_staged_outputs(tmp_path):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path), "--compact", "t=offset"]) == 0
    plan = load_plan(plan_path)
    assert plan.log_dirs[0].staging_dir is None
    assert not any(s.staged for p in plan.log_dirs[0].partitions for s in p.segments)


def test_no_cut_over_while_the_broker_runs_or_after_it_died(tmp_path, capsys):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    before = live_files(log_dir)
    plan_path = tmp_path / "plan.json"
    with lock_held_by_other_process(log_dir):
        ran = run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan_path))
        assert ran.code != 0
    assert "log-dir-locked" in ran.err or not plan_path.exists()
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()  # killed with -9: no marker
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) != 0
    (log_dir / CLEAN_SHUTDOWN_FILE).write_text("")
    (log_dir / "t-0" / (segment_name(100, ".log") + ".swap")).write_bytes(b"")  # a cleaner swap left half done
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) != 0
    assert live_files(log_dir) == before and len([s for s in staged_segments(log_dir) if s.record.staged]) == 2


def test_a_partition_moved_to_another_log_dir_is_converted_there(tmp_path, capsys):
    first = broker_log_dir(tmp_path / "a", partitions=2, segments=3)
    second = broker_log_dir(tmp_path / "b", partitions=0, segments=0)
    prestage(first)
    # LogManager's replica move: copied into <partition>.<id>-future on the other log dir, renamed into place there,
    # the source renamed -delete and removed
    shutil.copytree(first / "t-1", second / "t-1")
    shutil.rmtree(first / "t-1")
    assert main(["plan", "--log-dirs", f"{first},{second}", "-o", str(tmp_path / "plan.json")]) == 0
    plan = load_plan(tmp_path / "plan.json")
    by_dir = {
        d.log_dir: {(p.name, s.base_offset, bool(s.staged)) for p in d.partitions for s in p.segments}
        for d in plan.log_dirs
    }
    assert by_dir[str(first)] == {("t-0", 0, True), ("t-0", 100, True), ("t-0", 200, False)}
    assert by_dir[str(second)] == {("t-1", b, False) for b in (0, 100, 200)}
    assert execute(tmp_path / "plan.json").ok


# the points of a cut-over's execute that a cold run does not pass, and the swap's commit points after them (the
# cold crash matrix, tests/test_crash_recovery.py, covers every point of a cold run); then execute or rollback
CUTOVER_CRASHES = [
    ("before:take-staged", "execute"),
    ("before:take-staged:2", "rollback"),
    ("before:convert", "execute"),
    ("before:syncfs", "rollback"),
    ("commit:outcomes", "execute"),
    ("commit:swap-begun", "rollback"),
    ("after:new-into-fence", "execute"),
    ("after:exchange", "rollback"),
    ("before:link", "execute"),
    ("commit:partition-migrated", "execute"),
]


@pytest.mark.parametrize(("point", "then"), CUTOVER_CRASHES)
def test_a_crash_anywhere_in_the_cut_over_then_execute_or_rollback_finishes(tmp_path, point, then):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=4)
    prestage(log_dir)
    original = live_files(log_dir)
    twin = cold_twin(log_dir, tmp_path)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    assert run_verb("execute", plan_path, {CRASH_ENV: point}) == CRASH_EXIT
    if then == "rollback":  # every original back, byte for byte and mtime for mtime
        assert run_verb("rollback", plan_path, {}) == 0
        assert live_files(log_dir) == original
        return
    assert execute(plan_path).ok  # execute again finishes, the scan agreeing
    assert plan_and_execute(twin, tmp_path / "cold.json").ok
    assert live_files(log_dir) == live_files(twin)


def test_the_cut_over_points_are_all_passed(tmp_path):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=4)
    prestage(log_dir)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    trace = tmp_path / "trace"
    assert run_verb("execute", plan_path, {TRACE_ENV: str(trace)}) == 0
    passed = trace.read_text().split()
    assert passed.count("before:take-staged") == 3 and passed.count("before:convert") == 1


PRESTAGE_POINTS = [
    "before:prestage-convert",
    "before:prestage-seal",
    "before:prestage-record",
    "after:prestage-record",
    "before:prestage-record:2",
]


@pytest.mark.parametrize("point", PRESTAGE_POINTS)
def test_a_crash_anywhere_in_a_pass_leaves_the_log_dir_alone_and_the_next_pass_resumes(tmp_path, point):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    before = snapshot(log_dir)
    command = [sys.executable, "-m", "migrate.cli", "prestage", "--log-dirs", str(log_dir), "--rate", "0"]
    crashed = subprocess.run(command, env={**os.environ, CRASH_ENV: point}, capture_output=True)
    assert crashed.returncode == CRASH_EXIT, crashed.stderr.decode()[-2000:]
    assert snapshot(log_dir) == before
    options = ConvertOptions().for_partition(3)
    for staged in staged_segments(log_dir):  # a record is there only with its whole, verified files
        source = log_dir / staged.record.partition / segment_name(staged.record.base_offset, ".log")
        assert judge(staged, source, options, deep=True).usable
    resumed = subprocess.run(command, capture_output=True)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert snapshot(log_dir) == before
    assert sorted(s.record.base_offset for s in staged_segments(log_dir)) == [0, 100]
    twin = cold_twin(log_dir, tmp_path)
    assert plan_and_execute(log_dir, tmp_path / "plan.json").cutover.staged_segments == 2  # type: ignore[union-attr]
    assert plan_and_execute(twin, tmp_path / "cold.json").ok
    assert live_files(log_dir) == live_files(twin)


def test_reverify_staged_reads_the_staged_files_and_catches_what_stat_cannot_see(tmp_path):
    log_dir = broker_log_dir(tmp_path / "live", partitions=1, segments=3)
    prestage(log_dir)
    twin = cold_twin(log_dir, tmp_path)
    (hit,) = [s for s in staged_segments(log_dir) if s.record.base_offset == 0]
    target = hit.files[FileKind.LOG]
    with target.open("r+b") as f:  # rot on the disk: a value byte changed ...
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x40]))
    # ... that stat cannot show: the record made to agree with the file's stat as it is now
    record = json.loads(hit.record_path.read_text())
    st = target.stat()
    record["staged"][".log"].update(size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    hit.record_path.write_text(json.dumps(record))
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path), "--reverify-staged"]) == 0
    assert load_plan(plan_path).log_dirs[0].reverify_staged is True
    cut = execute(plan_path).cutover
    assert cut is not None and cut.staged_segments == 1
    (fallback,) = cut.fallbacks
    assert segment_name(0, ".log") in fallback and "staged-changed" in fallback
    assert plan_and_execute(twin, tmp_path / "cold.json").ok
    assert live_files(log_dir) == live_files(twin)
