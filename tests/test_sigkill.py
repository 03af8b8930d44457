"""A real SIGKILL of the whole Dask execute (client, scheduler, workers: the process group) at random moments of a run
of several hundred partitions; then execute or rollback finishes the job and an independent scan agrees."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from runs import assert_scan_agrees, make_plan, snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.run_state import SegmentState
from migrate.run.state import StateStore
from migrate.run.workspace import FENCE_NAME

# one xdist worker: its generated log dirs are made once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sigkill")]
PARTITIONS = 300


def _generate(root: Path, partitions: int, records: int) -> Path:
    subprocess.run(
        [
            sys.executable,
            "benchmarks/gen_legacy.py",
            str(root),
            "--records",
            str(records),
            "--value-bytes",
            "100",
            "--partitions",
            str(partitions),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return root


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    return _generate(tmp_path_factory.mktemp("generated") / "kafka-logs", PARTITIONS, 200)


@pytest.fixture(scope="module")
def generated_large(tmp_path_factory) -> Path:
    """4 partitions of one 7.8 MB segment each: converted as 1 MiB ranges, 32 range tasks and 4 joins."""
    return _generate(tmp_path_factory.mktemp("generated-large") / "kafka-logs", 4, 60_000)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_of_the_dask_run_at_a_random_moment_then_recovery(generated, tmp_path, seed):
    sigkill_then_recover(generated, tmp_path, random.Random(seed), task_segments=16)


@pytest.mark.parametrize("seed", [4, 8])  # kills about 0.6 s in: among the ranges; then execute, or rollback
def test_sigkill_among_range_tasks_and_joins_then_recovery(generated_large, tmp_path, seed):
    sigkill_then_recover(generated_large, tmp_path, random.Random(seed), range_bytes=1 << 20)


def sigkill_then_recover(generated: Path, tmp_path: Path, rng: random.Random, **plan_options: int) -> None:
    broker = tmp_path / "kafka-logs"
    shutil.copytree(generated, broker, copy_function=shutil.copy2)
    os.utime(broker, ns=(generated.stat().st_atime_ns, generated.stat().st_mtime_ns))
    plan, plan_path = make_plan(tmp_path, broker, **plan_options)
    before = snapshot(broker)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "migrate.cli",
            "execute",
            "--plan",
            str(plan_path),
            "--workers",
            "2",
            "--dashboard-address",
            "127.0.0.1:0",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the kill takes the LocalCluster's workers too
    )
    state = broker / f".kafka-log-migrate-{plan.plan_id}.db"
    deadline = time.time() + 60
    while not state.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 2.5))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    with StateStore.open(broker, plan.plan_id) as store:
        states = store.segment_states()
    # a killed run's verified segments are durable (syncfs before commit): a resume redoes exactly the rest
    left = sum(1 for s in states.values() if s == SegmentState.PLANNED) if states else plan.estimates.segments
    if rng.random() < 0.5:
        report = pipeline.execute(plan, SerialEngine())
        assert report.ok, report
        assert_scan_agrees(plan, report)
        assert report.totals.verified == left
        assert not (broker / FENCE_NAME).exists()
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert snapshot(broker) == before
