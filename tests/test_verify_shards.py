"""verify cuts a big log dir into runs of its partitions, one call each, so that every core re-reads: the joined
report is the one a single call gives, with a file changed after the swap, after finalize (the archived state), and
on real Dask workers."""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka_layout import make_broker_logdir
from runs import make_plan

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.stages.inspect import shard_names

PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "compacted-v0-0", "mixed-v0-v1-0"]


def test_the_runs_of_names_cover_each_name_once_in_order():
    names = [f"t-{i}" for i in range(11)]
    for n in (1, 2, 3, 8, 20):
        runs = [shard_names(names[::-1], (i, n)) for i in range(n)]
        assert [x for run in runs for x in run] == sorted(names)  # "t-10" sorts before "t-2", as a single call's
        assert max(map(len, runs)) - min(map(len, runs)) <= 1
    assert shard_names(["b", "a"], (0, 1)) == ["a", "b"]
    with pytest.raises(Exception, match="shard 2 of 2 does not exist"):
        shard_names(names, (2, 2))


def test_a_log_dir_no_run_has_touched_lists_each_partition_once(tmp_path, monkeypatch):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    whole, _ = _verify(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, asked = _verify(plan, plan_path, monkeypatch, per_shard=2)
    assert len(asked) == 6 and runs == whole and not runs.ok
    (check,) = runs.log_dirs
    assert check.unmigrated == tuple(sorted(PARTITIONS)) and check.checked_segments == 0


@pytest.fixture
def migrated(tmp_path: Path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report
    return plan, plan_path, broker


def _verify(plan, plan_path, monkeypatch, per_shard: int, engine=None):
    """verify_live with a shard per ``per_shard`` planned segments; the report and the shards each call asked for."""
    monkeypatch.setattr(pipeline, "SHARD_SEGMENTS", per_shard)
    asked: list[tuple[int, int]] = []
    real = pipeline.verify_live_log_dir

    def recorded(plan, key, archived=None, archive_file=None, shard=(0, 1), run=""):
        asked.append(shard)
        return real(plan, key, archived, archive_file, shard, run)

    monkeypatch.setattr(pipeline, "verify_live_log_dir", recorded)
    return pipeline.verify_live(plan, engine or SerialEngine(), plan_path), sorted(asked)


def test_a_log_dir_checked_in_runs_reports_what_one_call_does(migrated, monkeypatch):
    plan, plan_path, _ = migrated
    segments = plan.estimates.segments
    assert 12 <= segments < 16
    whole, asked = _verify(plan, plan_path, monkeypatch, per_shard=10**9)
    assert asked == [(0, 1)]
    assert whole.ok and whole.log_dirs[0].checked_segments == segments
    runs, asked = _verify(plan, plan_path, monkeypatch, per_shard=2)
    assert asked == [(i, 6) for i in range(6)]  # one run per 2 segments: more runs than partitions, one empty
    assert runs == whole

    # a live file changed after the swap: the same difference, named once, in the same order
    part = next(p for p in plan.log_dirs[0].partitions if p.name == "lz4-v1-1")
    live = Path(part.dir) / f"{part.segments[0].base_offset:020d}.log"
    changed = bytearray(live.read_bytes())
    changed[-1] ^= 1  # the last record's value: no longer the bytes swapped in
    live.write_bytes(bytes(changed))
    whole, _ = _verify(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, _ = _verify(plan, plan_path, monkeypatch, per_shard=3)
    assert not whole.ok and runs == whole
    (check,) = runs.log_dirs
    assert len([p for p in check.problems if "lz4-v1-1" in p]) == 1
    assert check.checked_segments == segments - 1  # the rewritten one is a problem, not read back


def test_after_finalize_the_runs_read_the_archived_state_in_place(migrated, monkeypatch):
    plan, plan_path, _ = migrated
    assert pipeline.finalize(plan, SerialEngine(), plan_path).ok
    whole, _ = _verify(plan, plan_path, monkeypatch, per_shard=10**9)
    runs, asked = _verify(plan, plan_path, monkeypatch, per_shard=4)
    assert len(asked) > 1 and runs == whole and runs.ok
    assert runs.log_dirs[0].history == whole.log_dirs[0].history and "finalized" in runs.log_dirs[0].history[-1]


@pytest.mark.slow
def test_the_runs_on_dask_workers_join_to_the_serial_report(migrated, monkeypatch):
    from migrate.engines.dask import DaskEngine

    plan, plan_path, _ = migrated
    serial, _ = _verify(plan, plan_path, monkeypatch, per_shard=2)
    monkeypatch.setattr(pipeline, "SHARD_SEGMENTS", 2)
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", processes=True, progress=False)
    try:
        on_dask = pipeline.verify_live(plan, engine, plan_path)
    finally:
        engine.close()
    assert on_dask == serial and on_dask.ok and on_dask.log_dirs[0].checked_segments == plan.estimates.segments
