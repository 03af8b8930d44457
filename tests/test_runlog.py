"""The record of a run: progress lines without a terminal, the run log beside the plan, refusals as the tool's message
alone and unexpected errors' tracebacks in the run log; and every verb's --help."""

from __future__ import annotations

import argparse
import dataclasses
import io
import re
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import lock_held_by_other_process, make_broker_logdir

from migrate import pipeline
from migrate.cli import build_parser, main
from migrate.model.plan_tree import Plan
from migrate.model.run_state import Outcome, SegmentOutcome
from migrate.planning.plan import build_plan, load_plan
from migrate.planning.request import PlanRequest
from migrate.units import human_rate, human_seconds
from migrate.watch.runlog import Progress, RunLog, run_log_path

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.lines: list[str] = []  # lines of their own (stderr and run log)
        self.file: list[str] = []  # run log only
        self.rewrites: list[tuple[str, bool]] = []  # a terminal's line, rewritten

    def note(self, message: str) -> None:
        self.lines.append(message)

    def write(self, message: str) -> None:
        self.file.append(message)

    def rewrite(self, line: str, final: bool = False) -> None:
        self.rewrites.append((line, final))


@pytest.fixture
def plan(tmp_path) -> Plan:
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    return build_plan(PlanRequest(log_dirs=(str(log_dir),)))


def outcome(plan: Plan, partition: str, index: int, kind: Outcome = Outcome.VERIFIED) -> SegmentOutcome:
    d = plan.log_dirs[0]
    seg = d.partition_by_name[partition].segments[index]
    return SegmentOutcome(d.log_dir, partition, seg.base_offset, kind, source_bytes=seg.size, output_bytes=seg.size)


def size(plan: Plan, partition: str, index: int) -> int:
    return plan.log_dirs[0].partition_by_name[partition].segments[index].size


def test_without_a_terminal_a_line_every_interval_with_bytes_rate_eta_and_failures(plan):
    clock, out = Clock(), Recorder()
    progress = Progress(plan, out, tty=False, interval=5.0, clock=clock)
    total = plan.estimates.bytes
    first = size(plan, "gzip-v0-0", 0)
    progress.stage("convert")  # the rate counts from here
    clock.now += 2
    progress.segment(outcome(plan, "gzip-v0-0", 0))
    progress.tick()
    rate = first / 2
    assert out.lines == [
        f"convert: {first / 1000:.1f} KB of {total / 1000:.1f} KB ({first / total:.0%}), 1 of 4 segments, "
        f"{human_rate(rate)}, ETA {human_seconds((total - first) / rate)}, 0 failed"
    ]
    clock.now += 4
    progress.segment(outcome(plan, "gzip-v0-0", 1, Outcome.REFUSED))
    progress.segment(outcome(plan, "gzip-v0-0", 0))  # fed twice (live, then the stage's results): counted once
    progress.tick()
    assert len(out.lines) == 1  # 4 s since the last line: not yet
    clock.now += 1
    progress.tick()
    assert len(out.lines) == 2 and out.lines[1].endswith(", 1 failed") and "2 of 4 segments" in out.lines[1]
    progress.__exit__(None, None, None)
    # a segment failed: the last line says the run ended, with what was converted, not "finished"
    assert (
        out.lines[-1].startswith("ended: ")
        and " converted by this run (" in out.lines[-1]
        and out.rewrites == []
        and out.file == []
    )


def test_on_a_terminal_the_line_is_rewritten_and_the_run_log_gets_one_every_interval(plan):
    clock, out = Clock(), Recorder()
    progress = Progress(plan, out, tty=True, interval=5.0, clock=clock)
    progress.stage("convert")
    progress.last_line = clock.now
    for _ in range(3):
        clock.now += 2
        progress.tick()
    assert len(out.rewrites) == 3 and not any(final for _, final in out.rewrites)
    assert out.file == [out.rewrites[2][0]] and out.lines == []  # at +6 s, once; nothing on lines of its own
    progress.__exit__(None, None, None)
    assert out.rewrites[-1][1] and out.rewrites[-1][0].startswith("finished: ")


def test_the_line_says_the_bytes_rate_and_eta_the_migration_page_says(plan):
    """One fold: the command line's progress and the scheduler's page add the same segments up the same way."""
    from migrate.watch.events import plan_event, segment_event
    from migrate.watch.tally import RunProgress

    clock = Clock()
    progress = Progress(plan, Recorder(), clock=clock)
    page = RunProgress(plan.plan_id, clock)
    page.plan(plan_event(plan))
    progress.stage("convert")
    for step, (name, index, kind) in enumerate(
        [("gzip-v0-0", 0, Outcome.VERIFIED), ("gzip-v0-0", 1, Outcome.REFUSED), ("plain-v0-1", 0, Outcome.VERIFIED)]
    ):
        clock.now += 0 if step == 0 else 7
        progress.segment(outcome(plan, name, index, kind))
        page.segment(segment_event(outcome(plan, name, index, kind), plan))
    clock.now += 3
    totals = page.sum()
    assert progress.done_bytes == plan.estimates.bytes - totals.pending.bytes
    assert progress.done_segments == 3 and totals.failed.segments == 1
    assert page.rate() > 0
    assert f"{human_rate(page.rate())}, ETA {human_seconds(page.eta())}, 1 failed" in progress.line()


def run_log_of(err: str) -> Path:
    lines = [line for line in err.splitlines() if line.strip()]
    first, last = lines[0], lines[-1]
    assert first.startswith("run log: ") and last == first, (first, last)
    return Path(first.removeprefix("run log: "))


def test_execute_without_a_terminal_prints_progress_and_keeps_every_message_in_the_run_log(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "lz4-v1-1"])
    plan = tmp_path / "plan.json"
    assert run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan)).code == 0
    captured = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    assert captured.code == 0
    log = run_log_of(captured.err)
    assert log.parent == Path(f"{plan}.logs") and log.name.startswith("execute-")
    total = load_plan(plan).estimates.bytes
    assert f"finished: {total / 1000:.1f} KB of {total / 1000:.1f} KB (100%), 4 of 4 segments" in captured.err
    text = log.read_text().splitlines()
    assert all(STAMP.match(line) for line in text)
    logged = [STAMP.sub("", line) for line in text]
    for line in captured.out.splitlines() + [x for x in captured.err.splitlines() if x]:
        assert line in logged, line
    assert logged[0] == f"kafka-log-migrate execute --plan {plan} --engine serial (version 0.1.0)"
    tasks = len(load_plan(plan).tasks)
    assert any(f"INFO migrate.run: stage convert: {tasks} of {tasks} call(s) ok" in line for line in logged)


def test_a_refusal_prints_the_tools_message_alone(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan))
    with lock_held_by_other_process(log_dir):
        ran = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
        assert ran.code == 1
    captured = ran
    # refused by prepare's re-run of the plan's checks, before any file of the run exists (issue 23)
    assert f"error in prepare of {log_dir}: refusing to execute (1 problem):" in captured.out
    assert f"  - {log_dir}: process" in captured.out and "holds the fcntl lock" in captured.out
    assert "Traceback" not in captured.out + captured.err
    assert "Traceback" not in run_log_of(captured.err).read_text()  # a refusal is not a bug


def test_an_unexpected_error_in_a_stage_is_a_message_with_its_traceback_in_the_run_log(tmp_path, capsys, monkeypatch):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan))

    def broken_swap(*args):
        raise RuntimeError("swap went wrong")

    monkeypatch.setattr(pipeline, "swap_log_dir", broken_swap)
    captured = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    assert captured.code == 1
    assert f"error in swap of {log_dir}: swap went wrong" in captured.out
    assert "Traceback" not in captured.out + captured.err
    logged = run_log_of(captured.err).read_text()
    assert "unexpected error in stage swap" in logged and "Traceback (most recent call last)" in logged
    assert "in broken_swap" in logged and "RuntimeError: swap went wrong" in logged


def test_an_unexpected_error_of_the_command_itself_names_the_run_log(tmp_path, capsys, monkeypatch):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    plan = tmp_path / "plan.json"
    run_cli(capsys, "plan", "--log-dirs", str(log_dir), "-o", str(plan))
    from migrate.reports import run_report as report

    def broken(*args):
        raise KeyError("no such column")

    monkeypatch.setattr(report, "run_summary", broken)  # execute's summary, after the swap
    captured = run_cli(capsys, "execute", "--plan", str(plan), "--engine", "serial")
    assert captured.code == 1
    log = run_log_of(captured.err)
    assert f"unexpected KeyError: 'no such column'. This is a bug in kafka-log-migrate; its traceback is in {log}" in (
        captured.err
    )
    assert "Traceback" not in captured.err and "Traceback (most recent call last)" in log.read_text()


def test_dask_worker_failures_go_to_the_run_log_not_between_the_tools_messages(tmp_path, capfd, monkeypatch):
    """A LocalCluster of worker processes: their "Compute Failed" would print on our terminal (file descriptor 2)."""
    from migrate.engines.dask import DaskEngine

    monkeypatch.setattr(DaskEngine, "run_here_while_starting", False)  # prepare must fail on a worker, not here
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    plan = tmp_path / "plan.json"
    main(["plan", "--log-dirs", str(log_dir), "-o", str(plan)])
    capfd.readouterr()
    with lock_held_by_other_process(log_dir):
        code = main(["execute", "--plan", str(plan), "--workers", "1", "--dashboard-address", "127.0.0.1:0"])
    captured = capfd.readouterr()
    assert code == 1 and f"error in prepare of {log_dir}" in captured.out
    assert "Compute Failed" not in captured.err and "Traceback" not in captured.err, captured.err
    logged = run_log_of(captured.err).read_text()
    assert "Compute Failed" in logged and "ExecuteRefusedError" in logged and "holds the fcntl lock" in logged
    assert "Dask dashboard: http://127.0.0.1:" in captured.err and "/migration)" in captured.err


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


VERBS = ["scan", "plan", "execute", "verify", "status", "rollback", "finalize", "report", "dump", "rehearse", "demo"]


@pytest.mark.parametrize("verb", VERBS)
def test_help_describes_the_verb_and_every_option(verb, capsys):
    parser = subcommands()[verb]
    assert parser.description and len(parser.description) > 40
    undocumented = [a.option_strings or a.dest for a in parser._actions if not a.help]
    assert undocumented == []
    ran = run_cli(capsys, verb, "--help")
    assert ran.code == 0
    assert parser.description.split()[0] in ran.out


@pytest.mark.parametrize("verb", ["status", "rollback", "finalize", "report"])
def test_verbs_that_convert_nothing_offer_no_engine_choice(verb):
    options = {o for a in subcommands()[verb]._actions for o in a.option_strings}
    assert not options & {"--engine", "--workers", "--dashboard-address", "--master"}
    assert "--plan" in options and "--scheduler" in options  # a plan's remote log dirs are reached through Dask


def test_an_interrupted_run_does_not_end_finished_100_percent(plan):
    clock, out = Clock(), Recorder()
    progress = Progress(plan, out, interval=5.0, clock=clock)
    progress.stage("convert")
    progress.segment(outcome(plan, "gzip-v0-0", 0))
    clock.now += 1
    progress.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)
    last = out.lines[-1]
    assert last.startswith("interrupted: ") and "1 of 4 segments" in last and "(100%)" not in last, last
    assert "ETA" not in last  # nothing is coming


def test_two_runs_started_in_the_same_second_write_their_own_run_logs(tmp_path):
    plan = tmp_path / "plan.json"
    same_second = 1_800_000_000.25
    first = RunLog(run_log_path(plan, "execute", at=same_second), "execute", stdout=io.StringIO(), stderr=io.StringIO())
    second = RunLog(
        run_log_path(plan, "execute", at=same_second), "execute", stdout=io.StringIO(), stderr=io.StringIO()
    )
    with first:
        with second:  # a second execute while the first still runs (its lock refuses it: its refusal is logged)
            second.note("refused: another run holds the lock")
        first.note("converting")
    assert first.path != second.path and first.path.parent == second.path.parent
    assert first.path.name == "execute-20270115T080000Z.log" and second.path.name == "execute-20270115T080000Z-2.log"
    ours, theirs = first.path.read_text(), second.path.read_text()
    assert "converting" in ours and "refused" not in ours
    assert "refused: another run holds the lock" in theirs and "converting" not in theirs


def test_segments_taken_from_pre_staging_are_done_but_not_in_the_rate(plan):
    """A cut-over renames pre-staged segments into place: they count as done, not as the run's MB/s."""
    clock, out = Clock(), Recorder()
    progress = Progress(plan, out, interval=5.0, clock=clock)
    progress.stage("convert")
    taken = dataclasses.replace(outcome(plan, "gzip-v0-0", 0), staged_seconds=0.4)
    progress.segment(taken)
    clock.now += 2
    assert progress.done_segments == 1 and progress.fold.rate(clock.now) == 0
    converted = outcome(plan, "gzip-v0-0", 1)
    progress.segment(converted)
    clock.now += 2
    assert progress.fold.rate(clock.now) == pytest.approx(converted.source_bytes / 4)
