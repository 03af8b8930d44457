"""The same plan on Spark (local[2]) gives the same bytes as on Dask; a failing Spark task changes nothing live."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from conftest import expected_summaries
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, snapshot

from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.engines.spark import SparkEngine
from migrate.model.run_state import PartitionState
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest
from migrate.run.state import StateStore
from migrate.run.workspace import FENCE_NAME

# one xdist worker: its Spark session starts once
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark_engine")]
PARTITIONS = ["plain-v0-0", "gzip-v0-0", "snappy-v0-0", "lz4-v1-0", "mixed-v0-v1-0", "compacted-v0-1", "mixed-v1-v2-0"]
SUMMARIES = expected_summaries()


@pytest.fixture(scope="module")
def spark():
    engine = SparkEngine(master="local[2]", ui=False, progress=False)
    yield engine
    engine.close()


def segment_bytes(log_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(log_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(log_dir.glob("*/*"))
        if p.suffix in (".log", ".index", ".timeindex")
    }


def outcomes(log_dir: Path, plan) -> list[tuple[str, str | None]]:
    """The state's history without times: what happened, per partition."""
    with StateStore.open(log_dir, plan.plan_id) as store:
        rows = store.conn.execute("SELECT kind, partition, base FROM events").fetchall()
    return sorted((kind, f"{part}/{base}") for kind, part, base in rows)


def test_spark_and_dask_write_identical_segments_and_journals(spark, tmp_path, oracle):
    dirs = {}
    for name in ("dask", "spark"):
        log_dir = make_broker_logdir(tmp_path / name, partitions=PARTITIONS)
        dirs[name] = (log_dir, build_plan(PlanRequest(log_dirs=(str(log_dir),))))
    dask = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", progress=False)
    try:
        assert pipeline.execute(dirs["dask"][1], dask).ok
    finally:
        dask.close()
    report = pipeline.execute(dirs["spark"][1], spark)
    assert report.ok, report
    assert_scan_agrees(dirs["spark"][1], report)
    assert report.engine == "spark"
    assert segment_bytes(dirs["spark"][0]) == segment_bytes(dirs["dask"][0])
    assert outcomes(*dirs["spark"]) == outcomes(*dirs["dask"])
    for part in PARTITIONS:
        summary = oracle.summary(dirs["spark"][0] / part)[0]
        assert summary["valid"] and summary["sha256"] == SUMMARIES[part]["sha256"], part


def test_a_corrupt_segment_fails_its_spark_task_and_nothing_live_changes(spark, tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), task_bytes=1))
    victim = log_dir / "gzip-v0-0" / "00000000000000000092.log"
    data = bytearray(victim.read_bytes())
    data[200] ^= 0x55
    # the planner recorded size, mtime and inode, so keep them; only the content is damaged
    seg = plan.partition(str(log_dir), "gzip-v0-0").segment_by_base[92]
    with open(victim, "r+b") as f:
        f.write(bytes(data))
    import os

    os.utime(victim, ns=(seg.mtime_ns, seg.mtime_ns))
    before = snapshot(log_dir)
    report = pipeline.execute(plan, spark)
    assert not report.ok and not report.errors  # a refusal is an outcome, not a failed Spark task
    assert_scan_agrees(plan, report)
    (problem,) = report.problems
    assert problem.partition == "gzip-v0-0" and problem.problem.path == str(victim)
    assert str(victim) in problem.problem.message and "byte position" in problem.problem.message
    assert [p.partition for p in report.unmigrated] == ["gzip-v0-0"]
    assert report.log_dirs[0].unmigrated[0].state == PartitionState.FAILED
    after = snapshot(log_dir)
    # the healthy partition was swapped in; the damaged one is untouched, byte for byte
    for rel, value in before.items():
        if rel.startswith("gzip-v0-0/") and ".kafka-log-migrate" not in rel and value[0] != "dir":
            assert after[rel] == value, rel
    assert not (log_dir / FENCE_NAME).exists()


def test_ranges_and_their_joins_on_spark_give_the_bytes_of_a_whole_run(spark, tmp_path):
    from migrate.engines import SerialEngine

    partitions = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1"]
    whole_dir = make_broker_logdir(tmp_path / "whole", partitions=partitions)
    assert pipeline.execute(build_plan(PlanRequest(log_dirs=(str(whole_dir),))), SerialEngine()).ok
    log_dir = make_broker_logdir(tmp_path / "ranged", partitions=partitions)
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), range_bytes=3000))
    assert sum(t.byte_range is not None for t in plan.tasks) == 9
    report = pipeline.execute(plan, spark)
    assert report.ok, (report.errors, report.problems)
    assert_scan_agrees(plan, report)
    assert segment_bytes(log_dir) == segment_bytes(whole_dir)


def test_a_local_spark_listens_on_loopback_only(spark):
    """On a broker host the driver's ports (and its UI, which can kill the job) must not face the network."""
    import psutil

    # this process's own JVM: another test's (or another run's) java may come and go meanwhile
    java = [
        c.laddr.ip
        for p in psutil.Process().children(recursive=True)
        if p.name() == "java"
        for c in p.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert java and all(ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for ip in java), java
