"""A crash at any point of execute or rollback, then execute or rollback, ends with every partition wholly original
or wholly migrated, and the fence up exactly while one is not.

The crash is real: the command runs in a subprocess that kills itself with os._exit (as a power cut leaves it) at the
fault point named by KAFKA_LOG_MIGRATE_CRASH_AT (migrate/run/faults.py). ``test_the_matrix_covers_every_point`` traces a
run and fails when a new point appears that the lists below do not cover.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from pathlib import Path

import pytest
from conftest import expected_summaries
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan, run_verb, snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.format.digest import LogDigest
from migrate.format.entries import walk_entries
from migrate.run.faults import CRASH_ENV, CRASH_EXIT, TRACE_ENV
from migrate.run.workspace import FENCE_NAME
from migrate.segment.reader import read_file

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1"]
SUMMARIES = expected_summaries()

# every point an execute of PARTITIONS passes; repeated points at their first and last pass
EXECUTE_POINTS = [
    "before:commit:initialized",
    "commit:initialized",
    "before:fence-up",
    "after:fence-up",
    "before:commit:fence-up",
    "commit:fence-up",
    "before:commit:run-started",
    "commit:run-started",
    "before:convert",
    "before:convert:6",
    "before:syncfs",
    "before:commit:outcomes",
    "commit:outcomes",
    "before:link",
    "before:link:6",
    "before:swap-record",
    "after:swap-record",
    "after:swap-record:3",
    "before:commit:swap-begun",
    "commit:swap-begun",
    "before:new-into-fence",
    "after:new-into-fence",
    "before:exchange",
    "after:exchange",
    "before:keep-original",
    "after:keep-original",
    "after:new-into-fence:2",
    "after:exchange:3",
    "before:keep-original:3",
    "after:keep-original:3",
    "before:syncfs-swap",
    "before:commit:partition-migrated",
    "commit:partition-migrated",
    "before:fence-down",
    "after:fence-down",
    "before:commit:fence-down",
    "commit:fence-down",
    "before:commit:meta-phase",
    "commit:meta-phase",
    "before:commit:run-ended",
    "commit:run-ended",
]
ROLLBACK_POINTS = [
    "before:fence-up",
    "after:fence-up",
    "before:commit:fence-up",
    "commit:fence-up",
    "before:commit:rollback-begun",
    "commit:rollback-begun",
    "commit:rollback-begun:2",
    "before:original-to-fence",
    "after:original-to-fence",
    "before:exchange-back",
    "after:exchange-back",
    "before:remove-new",
    "after:remove-new",
    "after:original-to-fence:3",
    "after:exchange-back:2",
    "after:remove-new:3",
    "before:commit:partition-rolled-back",
    "commit:partition-rolled-back",
    "commit:partition-rolled-back:2",
    "before:commit:rolled-back",
    "commit:rolled-back",
    "before:fence-down",
    "after:fence-down",
    "before:commit:fence-down",
    "commit:fence-down",
]


def crash(verb: str, plan_path: Path, point: str) -> None:
    assert run_verb(verb, plan_path, {CRASH_ENV: point}) == CRASH_EXIT, f"{verb} never reached {point}"


def partition_digest(part: Path) -> str:
    digest = LogDigest()
    for log in sorted(part.glob("*.log")):
        for chunk in read_file(log):
            for item in chunk.entries.items:
                digest.update(item.records)
    return digest.hexdigests()[0]


def live_forms(broker: Path, before: dict) -> dict[str, str]:
    """Per partition: 'original' (every planned .log byte-identical to before), 'migrated' (every one all v2), or
    'mixed'."""
    out = {}
    for part in PARTITIONS:
        forms = set()
        for log in sorted((broker / part).glob("*.log")):
            data = log.read_bytes()
            if before[f"{part}/{log.name}"][0] == hashlib.sha256(data).hexdigest():
                forms.add("original")
            elif set(walk_entries(data).magics.tolist()) == {2}:
                forms.add("migrated")
            else:
                forms.add("other")
        out[part] = forms.pop() if len(forms) == 1 else "mixed"
    return out


def assert_fence_iff_mixed(broker: Path, before: dict, point: str) -> None:
    forms = live_forms(broker, before)
    if "mixed" in forms.values() or "other" in forms.values():
        assert (broker / FENCE_NAME).is_dir(), (point, forms)


def assert_migrated(broker: Path, plan) -> None:
    assert not (broker / FENCE_NAME).exists()
    for part in PARTITIONS:
        assert partition_digest(broker / part) == SUMMARIES[part]["sha256"], part
        for log in (broker / part).glob("*.log"):
            assert set(walk_entries(log.read_bytes()).magics.tolist()) == {2}, log


@pytest.fixture
def setup(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    return broker, plan, plan_path, snapshot(broker)


def finish_execute(broker, plan, before) -> None:
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report
    assert_scan_agrees(plan, report)
    assert_migrated(broker, plan)


def finish_rollback(broker, plan, plan_path, before) -> None:
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert snapshot(broker) == before


@pytest.mark.parametrize("point", EXECUTE_POINTS)
def test_crash_during_execute_then_execute(setup, point):
    broker, plan, plan_path, before = setup
    crash("execute", plan_path, point)
    assert_fence_iff_mixed(broker, before, point)
    finish_execute(broker, plan, before)
    finish_rollback(broker, plan, plan_path, before)


@pytest.mark.parametrize("point", EXECUTE_POINTS)
def test_crash_during_execute_then_rollback(setup, point):
    broker, plan, plan_path, before = setup
    crash("execute", plan_path, point)
    finish_rollback(broker, plan, plan_path, before)


@pytest.mark.parametrize("point", ROLLBACK_POINTS)
def test_crash_during_rollback_then_rollback(setup, point):
    broker, plan, plan_path, before = setup
    finish_execute(broker, plan, before)
    crash("rollback", plan_path, point)
    assert_fence_iff_mixed(broker, before, point)
    # a rollback interrupted between a rename and its record resumes without blaming a broker: no --force
    finish_rollback(broker, plan, plan_path, before)


@pytest.mark.parametrize("point", ROLLBACK_POINTS)
def test_crash_during_rollback_then_execute(setup, point):
    broker, plan, plan_path, before = setup
    finish_execute(broker, plan, before)
    crash("rollback", plan_path, point)
    finish_execute(broker, plan, before)
    finish_rollback(broker, plan, plan_path, before)


# a plan converting every segment over 3,000 bytes as ranges: 9 range tasks and 3 joins
RANGE_POINTS = [
    "before:convert-range",
    "before:convert-range:5",
    "before:join",
    "before:join:3",
    "commit:outcomes:2",
    "before:commit:swap-begun",
]


@pytest.mark.parametrize("then", ["execute", "rollback"])
@pytest.mark.parametrize("point", RANGE_POINTS)
def test_crash_among_range_tasks_and_their_joins(tmp_path, point, then):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker, range_bytes=3000)
    assert sum(t.byte_range is not None for t in plan.tasks) == 9
    before = snapshot(broker)
    crash("execute", plan_path, point)
    assert_fence_iff_mixed(broker, before, point)
    if then == "execute":  # ranges left staged by the crashed run are converted again, never joined stale
        finish_execute(broker, plan, before)
    finish_rollback(broker, plan, plan_path, before)


@pytest.mark.parametrize("seed", range(4))
def test_a_second_crash_inside_the_recovery(setup, seed):
    """Crash, crash again inside the command that recovers, then finish with either command."""
    broker, plan, plan_path, before = setup
    rng = random.Random(seed)
    first_verb = rng.choice(["execute", "rollback"])
    if first_verb == "rollback":
        finish_execute(broker, plan, before)
    crash(first_verb, plan_path, rng.choice(EXECUTE_POINTS if first_verb == "execute" else ROLLBACK_POINTS))
    second_verb = rng.choice(["execute", "rollback"])
    point = rng.choice(EXECUTE_POINTS if second_verb == "execute" else ROLLBACK_POINTS)
    # the recovering run may finish before it reaches the point (it has less to do); both are fine
    run_verb(second_verb, plan_path, {CRASH_ENV: point})
    assert_fence_iff_mixed(broker, before, point)
    if rng.random() < 0.5:
        finish_execute(broker, plan, before)
    finish_rollback(broker, plan, plan_path, before)


def test_the_matrix_covers_every_point(setup, tmp_path):
    _, _, plan_path, _ = setup
    traced = {}
    for verb in ("execute", "rollback"):
        trace = tmp_path / f"{verb}.trace"
        assert run_verb(verb, plan_path, {TRACE_ENV: str(trace)}) == 0
        traced[verb] = Counter(trace.read_text().split())
    for verb, listed in (("execute", EXECUTE_POINTS), ("rollback", ROLLBACK_POINTS)):
        names = {p.rsplit(":", 1)[0] if p.rsplit(":", 1)[-1].isdigit() else p for p in listed}
        assert set(traced[verb]) == names, (verb, set(traced[verb]) ^ names)
        for p in listed:  # every repeated point listed at its last pass exists
            head, _, n = p.rpartition(":")
            if n.isdigit():
                assert traced[verb][head] >= int(n), (verb, p)
