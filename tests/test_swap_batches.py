"""The swap takes a log dir's ready partitions in batches (one syncfs before a batch's first move and one after its
last), and a run in many small batches migrates exactly what one batch does; the fence comes down only when no
partition of the log dir has a directory in it, whatever the state database says."""

from __future__ import annotations

import os

import pytest
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.run_state import PartitionState
from migrate.run import fence
from migrate.run.partition.places import PartitionPlaces
from migrate.stages import swap

PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "snappy-v0-0"]


@pytest.fixture
def planned(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, _ = make_plan(tmp_path, broker)
    return plan


def test_batches_keep_order_and_bounds(monkeypatch):
    names = sorted(PARTITIONS)
    monkeypatch.setattr(swap, "SWAP_BATCH_PARTITIONS", 3)
    assert list(swap._batches(names)) == [names[:3], names[3:]]
    monkeypatch.setattr(swap, "SWAP_BATCH_PARTITIONS", 1)
    assert list(swap._batches(names)) == [[n] for n in names]


def test_a_run_in_batches_of_one_partition_migrates_everything(planned, monkeypatch):
    monkeypatch.setattr(swap, "SWAP_BATCH_PARTITIONS", 1)
    report = pipeline.execute(planned, SerialEngine())
    assert report.ok and not report.unmigrated
    states = {p.partition: p.state for d in report.log_dirs for p in d.partitions}
    assert states == dict.fromkeys(PARTITIONS, PartitionState.MIGRATED)
    assert report.totals.verified == sum(len(p.segments) for p in planned.log_dirs[0].partitions) == 9
    assert_scan_agrees(planned, report)


def test_a_directory_put_in_the_fence_by_hand_keeps_it_up_until_execute_takes_it_in(planned):
    """A migrated partition taken back by hand to the middle of its swap (its converted directory in the fence, its
    original at its path): the state says migrated, the directories say otherwise; the next execute corrects the
    state, finishes the swap, and only then the fence comes down."""
    assert pipeline.execute(planned, SerialEngine()).ok
    log_dir = planned.log_dirs[0].log_dir
    places = PartitionPlaces(log_dir, "gzip-v0-0", planned.plan_id)
    converted = os.stat(places.live).st_ino
    os.mkdir(places.fence)  # the fence's own directory, up again by hand
    os.rename(places.live, places.fence_entry)
    os.rename(os.path.join(places.fence_entry, places.work_name, "original"), places.live)
    report = pipeline.execute(planned, SerialEngine())
    assert any("gzip-v0-0: the state said migrated, the files say in-fence" in line for line in report.reconciled)
    assert report.ok, report
    assert os.stat(places.live).st_ino == converted and not fence.is_up(log_dir)
    assert_scan_agrees(planned, report)
