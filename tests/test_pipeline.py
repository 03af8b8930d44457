"""The whole migration on real broker-shaped log dirs: plan -> execute (Dask) -> verify -> rollback / finalize."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from conftest import expected_summaries
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan, snapshot

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.run_state import PartitionState
from migrate.planning.plan import PlanRefusedError, build_plan
from migrate.planning.request import PlanRequest
from migrate.run.workspace import FENCE_NAME

SUMMARIES = expected_summaries()
PARTITIONS = [
    "plain-v0-0",
    "gzip-v0-0",
    "lz4-v1-1",
    "mixed-v0-v1-0",
    "compacted-v0-0",
    "already-v2-0",
    "mixed-v1-v2-0",
    "empty-segment-0",
]


@pytest.fixture
def broker(tmp_path: Path) -> Path:
    return make_broker_logdir(tmp_path, partitions=PARTITIONS)


def test_plan_lists_only_segments_with_legacy_data(broker, tmp_path):
    plan, _ = make_plan(tmp_path, broker)
    parts = {p.name: p for p in plan.log_dirs[0].partitions}
    assert set(parts) == {
        "plain-v0-0",
        "gzip-v0-0",
        "lz4-v1-1",
        "mixed-v0-v1-0",
        "compacted-v0-0",
        "mixed-v1-v2-0",
        "empty-segment-0",
    }
    assert [s.base_offset for s in parts["empty-segment-0"].segments] == [0, 20]  # the empty one stays
    assert [s.base_offset for s in parts["mixed-v1-v2-0"].segments] == [0, 18]  # 45 is v2-only: it stays
    assert parts["mixed-v1-v2-0"].segments[1].entries_by_magic == {
        int(m): n for m, n in SUMMARIES["mixed-v1-v2-0/00000000000000000018.log"]["magics"].items()
    }
    assert [s.base_offset for s in parts["plain-v0-0"].segments] == [0, 40, 80]
    seg = parts["plain-v0-0"].segments[0]
    assert seg.entries_by_magic == {0: 40}
    assert seg.estimated_output_bytes == seg.size + 40 * 42
    assert seg.inode == (broker / "plain-v0-0" / seg.file).stat().st_ino
    # the id covers the content only: planning the same inputs again gives the same id
    assert plan.plan_id == build_plan(PlanRequest(log_dirs=(str(broker),))).plan_id == plan.content_id()


def test_plan_refuses_a_dir_without_clean_shutdown_marker(broker):
    (broker / ".kafka_cleanshutdown").unlink()
    with pytest.raises(PlanRefusedError, match="kafka_cleanshutdown"):
        build_plan(PlanRequest(log_dirs=(str(broker),)))
    assert build_plan(PlanRequest(log_dirs=(str(broker),), allow_unclean=True)).estimates.segments > 0


def test_plan_refuses_too_little_space(broker):
    with pytest.raises(PlanRefusedError, match="staging space") as info:
        build_plan(PlanRequest(log_dirs=(str(broker),), free_bytes_cap=1000))
    assert "only 1.0 KB is free" in str(info.value)


def test_plan_refuses_a_locked_log_dir(broker):
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,sys,time; f=open(sys.argv[1],'a'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(60)",
            str(broker / ".lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(PlanRefusedError, match=f"process {holder.pid} holds the fcntl lock"):
            build_plan(PlanRequest(log_dirs=(str(broker),)))
    finally:
        holder.kill()
        holder.wait()


def check_migrated(broker: Path, before: dict) -> None:
    after = snapshot(broker)
    # every non-segment file is byte-identical, with its mtime
    for rel, value in before.items():
        name = Path(rel).name
        if value[0] == "dir" or name.endswith((".log", ".index", ".timeindex")):
            continue
        assert after.get(rel) == value, rel
    for rel, value in before.items():
        if rel.endswith(".log"):
            assert after[rel][1] == value[1], f"mtime of {rel} changed"
    assert not (broker / FENCE_NAME).exists()


@pytest.mark.slow
def test_execute_on_dask_then_rollback_restores_every_byte(broker, tmp_path, oracle):
    from migrate.engines.dask import DaskEngine

    before = snapshot(broker)
    plan, plan_path = make_plan(tmp_path, broker)
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", processes=True, progress=False)
    try:
        report = pipeline.execute(plan, engine)
        assert report.ok, report
        assert_scan_agrees(plan, report)
        assert report.totals.verified == plan.estimates.segments
        check_migrated(broker, before)
        # Kafka reads every live partition with the records of the source
        for part in ("plain-v0-0", "gzip-v0-0", "lz4-v1-1", "mixed-v0-v1-0", "compacted-v0-0", "mixed-v1-v2-0"):
            summary = oracle.summary(broker / part)[0]
            assert summary["valid"], (part, summary["errors"])
            assert summary["sha256"] == SUMMARIES[part]["sha256"], part
            assert set(summary["magics"]) == {"2"}, part
        assert pipeline.verify_live(plan, engine).ok
        # a second execute finds nothing left to do
        again = pipeline.execute(plan, engine)
        assert again.ok and again.totals.verified == 0
        rolled = pipeline.rollback(plan, engine, plan_path)
        assert rolled.ok, rolled
    finally:
        engine.close()
    assert snapshot(broker) == before  # bytes, mtimes, and directory mtimes too
    assert Path(rolled.archived[0]).exists()


def test_execute_then_finalize_leaves_nothing_extra(broker, tmp_path):
    before = snapshot(broker)
    plan, plan_path = make_plan(tmp_path, broker)
    engine = SerialEngine()
    report = pipeline.execute(plan, engine)
    assert report.ok
    assert_scan_agrees(plan, report)
    finalized = pipeline.finalize(plan, engine, plan_path)
    assert finalized.ok, finalized
    after = snapshot(broker)
    new_entries = set(after) - set(before)
    assert all(p.endswith((".index", ".timeindex")) for p in new_entries), new_entries
    assert not any(".kafka-log-migrate" in p or FENCE_NAME in p for p in after)
    # the history stays beside the plan: status and verify still tell what happened, and verify still checks
    live = pipeline.verify_live(plan, engine, plan_path)
    assert live.ok and live.log_dirs[0].phase.value == "finalized" and live.log_dirs[0].checked_segments > 0
    assert "finalized" in live.log_dirs[0].history[-1] and "migrated=7" in live.log_dirs[0].history[-1]
    status = pipeline.status(plan, engine, plan_path)
    assert [d.phase.value for d in status.log_dirs] == ["finalized"]
    assert all(p.state == PartitionState.MIGRATED for p in status.log_dirs[0].partitions)
    assert "finalized" in status.log_dirs[0].history[-1]


def test_rollback_refuses_when_a_broker_wrote_after_the_swap(broker, tmp_path):
    plan, plan_path = make_plan(tmp_path, broker)
    engine = SerialEngine()
    assert pipeline.execute(plan, engine).ok
    migrated = snapshot(broker)
    live = broker / "plain-v0-0" / "00000000000000000080.log"
    with live.open("ab") as f:
        f.write(b"\0" * 10)
    result = pipeline.rollback(plan, engine, plan_path)
    assert not result.ok
    assert len(result.refused) == 1 and str(live) in result.refused[0]
    # refused before anything was renamed: every other live file is still the migrated one
    after = snapshot(broker)
    assert {k: v for k, v in after.items() if k != str(live.relative_to(broker))} == {
        k: v for k, v in migrated.items() if k != str(live.relative_to(broker)) and k != "."
    } | {".": after["."]}
    forced = pipeline.rollback(plan, engine, plan_path, force=True)
    assert forced.ok, forced
    assert below_target_everywhere(plan)


def below_target_everywhere(plan) -> bool:
    from runs import below_target, scan_partitions

    seen = scan_partitions(plan)
    return all(below_target(seen[(d.log_dir, p.name)], 2) for d in plan.log_dirs for p in d.partitions)


def test_execute_refuses_inputs_changed_since_planning(broker, tmp_path):
    plan, _ = make_plan(tmp_path, broker)
    seg = broker / "gzip-v0-0" / "00000000000000000000.log"
    os.utime(seg, ns=(0, 1_000_000_000))
    before = snapshot(broker)
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    assert report.errors[0].stage == "prepare" and "changed since planning" in report.errors[0].message
    assert str(seg) in report.errors[0].message
    assert snapshot(broker) == before  # nothing at all was written: no fence, no state


def test_a_second_rollback_finds_nothing_to_do_and_says_so(broker, tmp_path):
    plan, plan_path = make_plan(tmp_path, broker)
    before = snapshot(broker)
    assert pipeline.execute(plan, SerialEngine()).ok
    assert pipeline.rollback(plan, SerialEngine(), plan_path).ok
    again = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert again.ok and [r.phase.value for r in again.rollbacks] == ["rolled-back"] and not again.rollbacks[0].restored
    assert again.rollbacks[0].reconciled[0].startswith("rolled back earlier; its state is archived in ")
    never = pipeline.rollback(plan, SerialEngine())  # without the plan file's archive: nothing of this run is here
    assert never.ok and [r.phase.value for r in never.rollbacks] == ["new"]
    live = pipeline.verify_live(plan, SerialEngine(), plan_path)  # the history is beside the plan
    assert live.ok and live.log_dirs[0].phase.value == "rolled-back"
    assert any(" rolled-back partitions=" in line for line in live.log_dirs[0].history)
    assert snapshot(broker) == before


def test_a_plan_made_on_several_processes_equals_the_one_made_here(broker, monkeypatch):
    from migrate.planning import plan as planning

    here = build_plan(PlanRequest(log_dirs=(str(broker),)))
    monkeypatch.setattr(planning, "PARALLEL_MIN_SEGMENTS", 1)
    monkeypatch.setattr(planning, "PARALLEL_CHUNK", 2)
    shared = build_plan(PlanRequest(log_dirs=(str(broker),)))
    assert shared.plan_id == here.plan_id
    # everything but the free bytes of each filesystem, which other processes change between the two plans
    assert [dataclasses.replace(d, filesystems=()) for d in shared.log_dirs] == [
        dataclasses.replace(d, filesystems=()) for d in here.log_dirs
    ]
    assert [(f.device, f.partitions, f.needed_bytes) for d in shared.log_dirs for f in d.filesystems] == [
        (f.device, f.partitions, f.needed_bytes) for d in here.log_dirs for f in d.filesystems
    ]
