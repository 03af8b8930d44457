"""A crash at any step of execute or rollback, followed by execute (resume) or rollback, ends consistent.

The crash is real: ``execute`` runs in a subprocess that kills itself (os._exit, as a power cut would leave it) at
the step named by KAFKA_LOG_MIGRATE_CRASH_AT; see migrate/journal.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, expected_summaries
from kafka_layout import make_broker_logdir
from test_pipeline import snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.format.digest import LogDigest
from migrate.format.entries import walk_entries
from migrate.journal import CRASH_ENV
from migrate.plan import PlanRequest, build_plan
from migrate.segment.reader import read_file
from migrate.workspace import FENCE_NAME

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1"]
SUMMARIES = expected_summaries()

EXECUTE_CRASHES = [
    "execute-started",
    "fence-up",
    "segment-converted",
    "segment-converted:3",
    "partition-verified:2",
    "segment-swap-begin",
    "after-backup-link",
    "after-rename",
    "after-rename:2",
    "before:segment-swapped",
    "segment-swapped:2",
    "before:partition-swapped",
    "partition-swapped",
    "before:logdir-swapped",
    "logdir-swapped",
    "before:fence-down",
]
ROLLBACK_CRASHES = ["rollback-started", "segment-rolled-back", "partition-rolled-back:2", "before:rollback-finished"]

RUN = """
import json, sys
from migrate import pipeline
from migrate.engines import SerialEngine
plan = json.load(open(sys.argv[2]))
engine = SerialEngine()
if sys.argv[1] == "execute":
    pipeline.execute(plan, engine)
else:
    pipeline.rollback(plan, engine, sys.argv[2])
"""


def crash(verb: str, plan_path: Path, point: str) -> None:
    env = {**os.environ, CRASH_ENV: point}
    proc = subprocess.run([sys.executable, "-c", RUN, verb, str(plan_path)], env=env, cwd=REPO, capture_output=True)
    assert proc.returncode == 77, (point, proc.returncode, proc.stderr.decode()[-2000:])


def partition_digest(part: Path) -> str:
    digest = LogDigest()
    for log in sorted(part.glob("*.log")):
        for chunk in read_file(log):
            for item in chunk.entries.items:
                digest.update(item.records)
    return digest.hexdigests()[0]


def assert_migrated(broker: Path) -> None:
    assert not (broker / FENCE_NAME).exists()
    for part in PARTITIONS:
        assert partition_digest(broker / part) == SUMMARIES[part]["sha256"], part
        for log in (broker / part).glob("*.log"):
            assert set(walk_entries(log.read_bytes()).magics.tolist()) == {2}, log


@pytest.fixture
def setup(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan = build_plan(PlanRequest(log_dirs=[str(broker)]))
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    return broker, plan, plan_path, snapshot(broker)


@pytest.mark.parametrize("point", EXECUTE_CRASHES)
def test_crash_during_execute_then_resume(setup, point):
    broker, plan, plan_path, before = setup
    crash("execute", plan_path, point)
    report = pipeline.execute(plan, SerialEngine())
    assert report["ok"], report
    assert_migrated(broker)
    assert pipeline.rollback(plan, SerialEngine(), plan_path)["ok"]
    assert snapshot(broker) == before


@pytest.mark.parametrize("point", EXECUTE_CRASHES)
def test_crash_during_execute_then_rollback(setup, point):
    broker, plan, plan_path, before = setup
    crash("execute", plan_path, point)
    # the fence goes up before any live file can change and comes down last
    fenced = point not in ("execute-started", "before:fence-down")
    assert (broker / FENCE_NAME).exists() == fenced, point
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result["ok"], result
    assert snapshot(broker) == before


@pytest.mark.parametrize("point", ROLLBACK_CRASHES)
def test_crash_during_rollback_then_rollback_again(setup, point):
    broker, plan, plan_path, before = setup
    assert pipeline.execute(plan, SerialEngine())["ok"]
    crash("rollback", plan_path, point)
    assert (broker / FENCE_NAME).exists()
    assert pipeline.rollback(plan, SerialEngine(), plan_path)["ok"]
    assert snapshot(broker) == before
