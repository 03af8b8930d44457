"""The swap takes a log dir's ready partitions in batches bounded by partitions and by segments (a batch's segment
texts are held until its syncfs), and a run in many small batches migrates exactly what one batch does, also when a
helper process plans each batch while the one before is renamed."""

from __future__ import annotations

import io
import os
import pickle

import pytest
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.errors import MigrateError
from migrate.model.run_state import PartitionState
from migrate.run import fence
from migrate.run.state import StateStore
from migrate.run.swap_files import SegmentFiles
from migrate.stages import reconcile, swap, swap_plan
from migrate.stages.swap_plan import PlanHelper, serve

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


class CountingHelper(swap.PlanHelper):
    """The swap's helper process, its batches counted (they are planned in the child, so no spy can sit there)."""

    submitted = 0

    def submit(self, plan_id, partitions):
        type(self).submitted += 1
        super().submit(plan_id, partitions)


@pytest.fixture
def helper(monkeypatch):
    """Every swap planned by a helper process, in batches of one partition."""
    CountingHelper.submitted = 0
    monkeypatch.setattr(swap, "SWAP_HELPER_MIN_SEGMENTS", 0)
    monkeypatch.setattr(swap, "SWAP_BATCH_SEGMENTS", 1)
    monkeypatch.setattr(swap, "PlanHelper", CountingHelper)
    return CountingHelper


def test_a_swap_planned_a_batch_ahead_in_a_helper_process_migrates_everything(planned, helper):
    report = pipeline.execute(planned, SerialEngine())
    assert report.ok and not report.unmigrated
    assert helper.submitted == len(PARTITIONS) - 1  # every batch but the first, planned here while the helper starts
    states = {p.partition: p.state for d in report.log_dirs for p in d.partitions}
    assert states == dict.fromkeys(PARTITIONS, PartitionState.MIGRATED)
    assert_scan_agrees(planned, report)


def test_a_live_file_changed_before_the_swap_fails_its_partition_through_the_helper_too(planned, helper):
    from migrate.stages.convert import convert_task
    from migrate.stages.prepare import prepare_log_dir

    key = planned.log_dirs[0].key
    prepare_log_dir(planned, key)
    for task in planned.tasks:
        convert_task(planned, task.id, "run1")
    # a broker appends to the last partition's first segment after it was converted: planned in the helper
    part = planned.log_dir(key).partition_by_name[PARTITIONS[-1]]
    live = f"{part.dir}/{part.segments[0].base_offset:020d}.log"
    with open(live, "rb") as f:
        data = f.read()
    with open(live, "ab") as f:
        f.write(data[: 12 + int.from_bytes(data[8:12], "big")])
    done = swap.swap_log_dir(planned, key)
    assert helper.submitted == len(PARTITIONS) - 1
    assert sorted(done.migrated) == sorted(PARTITIONS[:-1])
    (failed,) = done.failed
    assert failed.partition == PARTITIONS[-1] and "changed after it was converted" in failed.problem.message
    assert failed.problem.path == live  # the problem crossed the process boundary whole
    report = pipeline.execute(planned, SerialEngine())
    assert not report.ok
    assert_scan_agrees(planned, report)


def test_a_helper_that_dies_leaves_the_rest_of_the_swap_to_the_swapping_process(planned, helper, monkeypatch):
    def killed_first(self):
        self._proc.kill()  # as the OOM killer would
        self._proc.wait()
        return PlanHelper.result(self)

    monkeypatch.setattr(CountingHelper, "result", killed_first)
    report = pipeline.execute(planned, SerialEngine())
    assert report.ok and not report.unmigrated
    assert helper.submitted == swap.SWAP_PLAN_AHEAD  # asked for the batches ahead, died, never asked again
    assert_scan_agrees(planned, report)


def test_the_helper_relays_the_error_of_a_batch_and_serves_the_next():
    helper = PlanHelper()
    try:
        # both asked for before either result is taken: they come back in the order asked
        helper.submit("0123456789abcdef", [("p-0", "/nonexistent", [(0, "not a result")])])
        helper.submit("0123456789abcdef", [("p-1", "/nonexistent", [])])
        with pytest.raises(ValueError, match="Expecting value"):
            helper.result()  # raised here as if this process had planned the batch
        assert helper.result() == ([("p-1", frozenset(), [])], [])
        assert helper.pending == 0
    finally:
        helper.close()
    assert helper._proc.returncode == 0


def test_closing_the_helper_with_batches_not_taken_ends_it_at_once(planned):
    """A swap that stops (an I/O error) with batches still asked for: the child is killed, nobody waits for it."""
    key = planned.log_dirs[0].key
    parts = planned.log_dir(key).partitions
    texts = [(p.name, p.dir, [(s.base_offset, None) for s in p.segments]) for p in parts]
    helper = PlanHelper()
    helper.submit(planned.plan_id, texts)
    helper.submit(planned.plan_id, texts)
    assert helper.pending == 2
    helper.close()
    assert helper._proc.returncode is not None and not helper._pump.is_alive()


def test_a_reply_that_cannot_be_read_ends_the_helper_instead_of_hanging_the_swap(monkeypatch):
    """Whatever goes wrong reading a reply (here a class the parent cannot find) makes the helper gone: the swap then
    plans the rest itself; it never waits for a reply that will not come."""
    helper = PlanHelper()

    def unreadable(stream):
        raise AttributeError("Can't get attribute 'Planned' on <module 'migrate.stages.swap_plan'>")

    try:
        monkeypatch.setattr(swap_plan.pickle, "load", unreadable)
        helper.submit("0123456789abcdef", [("p-0", "/nonexistent", [])])
        helper.submit("0123456789abcdef", [("p-1", "/nonexistent", [])])
        for _ in range(2):  # this batch and every later one
            with pytest.raises(EOFError, match="Can't get attribute"):
                helper.result()
    finally:
        monkeypatch.undo()
        helper.close()


class Unloadable(Exception):
    def __init__(self, message, where):
        super().__init__(f"{message} at {where}")


def test_an_error_that_does_not_pickle_comes_back_as_its_type_and_message(monkeypatch):
    def broken(plan_id, partitions):
        raise Unloadable("disk says no", "byte 7")

    monkeypatch.setattr(swap_plan, "plan_batch", broken)
    requests, replies = io.BytesIO(), io.BytesIO()
    pickle.dump(("0123456789abcdef", 2), requests)  # a request: its header, then each partition
    for name in ("p-0", "p-1"):
        pickle.dump((name, "/nonexistent", []), requests)
    pickle.dump(("0123456789abcdef", 0), requests)  # the next request starts after the whole of the first
    requests.seek(0)
    serve(requests, replies)
    replies.seek(0)
    kind, error = pickle.load(replies)
    assert kind == "error" and isinstance(error, MigrateError)
    assert str(error).startswith("Unloadable: disk says no at byte 7 (")
    assert pickle.load(replies) == ("ok", ([], []))


def test_the_fence_check_trusts_only_the_partitions_this_swap_renamed(planned, monkeypatch):
    """After the swap, the fence comes down only if no partition's files are mixed. The partitions the same call
    has just swapped whole are not proved again; any other partition is, whatever the state database says."""
    assert pipeline.execute(planned, SerialEngine()).ok
    key = planned.log_dirs[0].key
    log_dir = planned.log_dir(key).log_dir
    part = planned.partition(key, "gzip-v0-0")
    files = SegmentFiles(part.dir, planned.plan_id, part.segments[0].base_offset)
    os.replace(files.backup(".log"), files.live(".log"))  # by hand: one original back, the state still "migrated"
    proved: list[str] = []
    proof = reconcile.settled_truth
    monkeypatch.setattr(
        reconcile,
        "settled_truth",
        lambda d, plan_id, name, known: proved.append(name) or proof(d, plan_id, name, known),
    )
    with StateStore.open(log_dir, planned.plan_id) as store:
        assert reconcile.files_mixed(planned, key, store) == ["gzip-v0-0"]
        assert sorted(proved) == sorted(PARTITIONS)
        proved.clear()
        assert reconcile.files_mixed(planned, key, store, swapped_now=PARTITIONS) == []
        assert proved == []
        others = [n for n in PARTITIONS if n != "gzip-v0-0"]
        assert reconcile.files_mixed(planned, key, store, swapped_now=others) == ["gzip-v0-0"]
        assert proved == ["gzip-v0-0"]
    # a second execute swaps nothing (every partition is migrated in the state), so it trusts nothing: the mixed
    # partition keeps the fence up
    pipeline.execute(planned, SerialEngine())
    assert fence.is_up(log_dir)
