"""The swap takes a log dir's ready partitions in batches bounded by partitions and by segments (a batch's segment
texts are held until its syncfs), and a run in many small batches migrates exactly what one batch does."""

from __future__ import annotations

import pytest
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.run_state import PartitionState
from migrate.stages import swap

PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "snappy-v0-0"]


@pytest.fixture
def planned(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, _ = make_plan(tmp_path, broker)
    return plan


def _counts(plan) -> dict[str, int]:
    key = plan.log_dirs[0].key
    return {p.name: len(p.segments) for p in plan.log_dir(key).partitions}


def test_batches_keep_order_and_bounds(planned, monkeypatch):
    key = planned.log_dirs[0].key
    counts = _counts(planned)
    names = sorted(counts)
    assert sorted(counts.values()) != [1] * len(counts), counts  # partitions of several segments: the bound bites
    monkeypatch.setattr(swap, "SWAP_BATCH_SEGMENTS", max(counts.values()))
    batches = list(swap._batches(planned, key, names))
    assert [n for b in batches for n in b] == names
    assert all(sum(counts[n] for n in b) <= max(counts.values()) for b in batches)
    assert len(batches) > 1
    monkeypatch.setattr(swap, "SWAP_BATCH_SEGMENTS", 1)  # a partition larger than the bound is a batch of its own
    assert list(swap._batches(planned, key, names)) == [[n] for n in names]
    monkeypatch.setattr(swap, "SWAP_BATCH_SEGMENTS", 10**6)
    monkeypatch.setattr(swap, "SWAP_BATCH_PARTITIONS", 3)
    assert list(swap._batches(planned, key, names)) == [names[:3], names[3:]]


def test_a_run_in_batches_of_one_partition_migrates_everything(planned, monkeypatch):
    monkeypatch.setattr(swap, "SWAP_BATCH_SEGMENTS", 1)
    report = pipeline.execute(planned, SerialEngine())
    assert report.ok and not report.unmigrated
    states = {p.partition: p.state for d in report.log_dirs for p in d.partitions}
    assert states == dict.fromkeys(PARTITIONS, PartitionState.MIGRATED)
    assert report.totals.verified == sum(_counts(planned).values()) == 9
    assert_scan_agrees(planned, report)
