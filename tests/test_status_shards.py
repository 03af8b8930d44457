"""status cuts a big log dir into runs of its partitions by name (``shard_range``), one call each, so that every core
reads its part of the state and the files: the joined status is the one a single call gives, after execute, with the
files changed under the state, with the state database lost, on a log dir no run touched, inside execute itself, and
on real Dask workers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from kafka_layout import make_broker_logdir
from runs import make_plan
from test_verify_shards import PARTITIONS

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.run_state import EVERY_PARTITION, PartitionRange
from migrate.run.partition.places import PartitionPlaces
from migrate.run.state import StateStore
from migrate.run.workspace import state_path
from migrate.stages.inspect import shard_names, shard_range


def test_the_ranges_hold_the_runs_of_names_and_every_other_name_once():
    names = [f"t-{i}" for i in range(11)]
    strangers = ["", "a", "t-", "t-10x", "t-5a", "zzz"]  # names the plan does not hold: each in one range too
    for n in (1, 2, 3, 8, 20):
        ranges = [shard_range(names[::-1], (i, n)) for i in range(n)]
        for i, within in enumerate(ranges):
            assert sorted(x for x in names if x in within) == shard_names(names, (i, n))
        for name in names + strangers:
            assert sum(name in within for within in ranges) == 1, (name, n, ranges)
    assert shard_range(names, (0, 1)) == EVERY_PARTITION and shard_range(names, (0, 2)) == PartitionRange(None, "t-4")
    assert shard_range([], (0, 2)) == EVERY_PARTITION and not any(x in shard_range([], (1, 2)) for x in strangers)
    with pytest.raises(Exception, match="shard 2 of 2 does not exist"):
        shard_range(names, (2, 2))


def _status(plan, plan_path, monkeypatch, per_shard: int, engine=None):
    """pipeline.status with a run per ``per_shard`` planned segments; the report and the shards its calls asked for."""
    asked: list[tuple[int, int]] = []
    real = pipeline.status_log_dir

    def recorded(plan, key, shard=(0, 1)):
        asked.append(shard)
        return real(plan, key, shard)

    monkeypatch.setattr(pipeline, "status_log_dir", recorded)
    report = pipeline.status(plan, engine or SerialEngine(), plan_path, shard_segments=per_shard)
    monkeypatch.setattr(pipeline, "status_log_dir", real)
    return report, sorted(asked)


@pytest.fixture
def migrated(tmp_path: Path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    assert pipeline.execute(plan, SerialEngine()).ok
    return plan, plan_path, broker


def test_a_migrated_log_dir_read_in_runs_has_one_calls_status(migrated, monkeypatch):
    plan, plan_path, broker = migrated
    segments = plan.estimates.segments
    assert 12 <= segments < 16
    whole, asked = _status(plan, plan_path, monkeypatch, per_shard=10**9)
    assert asked == [(0, 1)]
    runs, asked = _status(plan, plan_path, monkeypatch, per_shard=2)
    assert asked == [(i, 6) for i in range(6)]  # more runs than partitions: one holds none
    assert runs == whole and not runs.errors
    (d,) = runs.log_dirs
    assert [p.partition for p in d.partitions] == sorted(PARTITIONS)
    assert {p.state.value for p in d.partitions} == {"migrated"} and not d.reconciled
    assert sum(sum(p.segments.values()) for p in d.partitions) == segments

    with StateStore.open(broker, plan.plan_id) as store:  # the state's ranges read apart are the whole, in order
        every = list(store.exchanges().items())
        ranges = [shard_range(PARTITIONS, (i, 3)) for i in range(3)]
        assert [row for within in ranges for row in store.exchanges(within).items()] == every
        assert [s for within in ranges for s in store.partition_statuses(plan.log_dirs[0].key, within)] == list(
            d.partitions
        )


def _roll_back_by_hand(part, plan_id: str) -> None:
    """The partition's original directory put back at its path by hand, the converted one deleted: the state still
    says migrated."""
    converted = f"{part.dir}.by-hand"
    os.rename(part.dir, converted)
    os.rename(
        PartitionPlaces(os.path.dirname(part.dir), part.name, plan_id).kept.replace(part.dir, converted), part.dir
    )
    shutil.rmtree(converted)


def test_what_the_files_say_otherwise_is_told_by_the_run_that_holds_the_partition(migrated, monkeypatch):
    plan, plan_path, _ = migrated
    parts = {p.name: p for p in plan.log_dirs[0].partitions}
    _roll_back_by_hand(parts["plain-v0-0"], plan.plan_id)
    _roll_back_by_hand(parts["compacted-v0-0"], plan.plan_id)
    whole, _ = _status(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, asked = _status(plan, plan_path, monkeypatch, per_shard=3)
    assert len(asked) == 4
    (one,), (joined,) = whole.log_dirs, runs.log_dirs
    assert joined.partitions == one.partitions and joined.history == one.history
    # the same lines, each told by the run that holds its partition
    assert sorted(joined.reconciled) == sorted(one.reconciled) and len(joined.reconciled) == 2
    for name in ("plain-v0-0", "compacted-v0-0"):
        assert any(x.startswith(f"{name}: the state said migrated, the files say original") for x in joined.reconciled)


def test_a_lost_state_database_is_told_once(migrated, monkeypatch):
    plan, plan_path, broker = migrated
    db = state_path(broker, plan.plan_id)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    whole, _ = _status(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, asked = _status(plan, plan_path, monkeypatch, per_shard=2)
    assert len(asked) == 6 and runs == whole
    (d,) = runs.log_dirs
    assert len(d.reconciled) == 1 and "to be rebuilt by execute or rollback" in d.reconciled[0], d.reconciled


def test_a_log_dir_no_run_has_touched_is_not_started(tmp_path, monkeypatch):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    whole, _ = _status(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, asked = _status(plan, plan_path, monkeypatch, per_shard=2)
    assert len(asked) == 6 and runs == whole
    assert runs.not_started == (plan.log_dirs[0].key,) and not runs.log_dirs


def test_execute_ends_with_the_status_in_runs(tmp_path, monkeypatch):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    monkeypatch.setattr(pipeline, "SHARD_SEGMENTS", 4)
    asked: list[tuple[int, int]] = []
    real = pipeline.status_log_dir
    monkeypatch.setattr(
        pipeline, "status_log_dir", lambda plan, key, shard=(0, 1): asked.append(shard) or real(plan, key, shard)
    )
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok and sorted(asked) == [(i, 3) for i in range(3)]
    monkeypatch.setattr(pipeline, "status_log_dir", real)
    whole, _ = _status(plan, plan_path, monkeypatch, per_shard=10**9)
    assert report.log_dirs == whole.log_dirs


@pytest.mark.slow
def test_the_runs_on_dask_workers_join_to_the_serial_status(migrated, monkeypatch):
    from migrate.engines.dask import DaskEngine

    plan, plan_path, _ = migrated
    serial, _ = _status(plan, plan_path, monkeypatch, per_shard=2)
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", processes=True, progress=False)
    try:
        on_dask = pipeline.status(plan, engine, plan_path, shard_segments=2)
    finally:
        engine.close()
    assert on_dask == serial and len(on_dask.log_dirs[0].partitions) == len(PARTITIONS)


def test_only_a_whole_log_dir_may_correct_its_state(migrated):
    from migrate.run.partition.reconcile import open_reconciled

    plan, _, broker = migrated
    entry = plan.log_dirs[0]
    with pytest.raises(Exception, match="a run of its partitions was asked to correct the state"):
        open_reconciled(plan, entry.key, entry, str(broker), write=True, within=shard_range(PARTITIONS, (1, 2)))
    store, reconciled = open_reconciled(
        plan, entry.key, entry, str(broker), write=False, within=shard_range(PARTITIONS, (1, 2))
    )
    assert store is not None and not reconciled.lines
    store.close()
