"""execute's figures folded call by call (issue 26): the same report as a list of every outcome gave, in any order
of arrival, and the progress line's dedupe without a set of keys."""

from __future__ import annotations

import random

from kafka_layout import make_broker_logdir

from migrate.model.run_state import Outcome, Problem, SegmentOutcome
from migrate.model.stage_reports import SegmentFold, SegmentTotals
from migrate.planning.plan import build_plan, load_plan, write_plan
from migrate.planning.request import PlanRequest
from migrate.watch.events import planned_size
from migrate.watch.runlog import SeenSegments


def _outcomes() -> list[SegmentOutcome]:
    rnd = random.Random(26)
    out = []
    for i in range(200):
        kind = rnd.choice(list(Outcome))
        problem = Problem("io-error" if i % 7 == 0 else "corrupt", f"segment {i}") if kind == Outcome.FAILED else None
        staged = rnd.random() if kind == Outcome.VERIFIED and i % 3 == 0 else None
        out.append(
            SegmentOutcome(
                f"/d{i % 2}",
                f"t-{i % 5}",
                i,
                kind,
                source_bytes=rnd.randrange(1000),
                output_bytes=rnd.randrange(1000),
                records=rnd.randrange(10),
                convert_seconds=rnd.random(),
                verify_seconds=rnd.random(),
                problem=problem,
                staged_seconds=staged,
                staged_fallback=f"why {i}" if i % 11 == 0 else "",
            )
        )
    return out


def test_folded_in_any_order_the_figures_are_those_of_the_whole_list():
    outcomes = _outcomes()
    arrived = list(enumerate(outcomes))
    random.Random(1).shuffle(arrived)
    fold = SegmentFold()
    for i, o in arrived:
        fold.add(o, (1, i // 10, i % 10))
    assert fold.totals() == SegmentTotals.of(outcomes)
    assert fold.problems == tuple(o for o in outcomes if o.outcome in (Outcome.REFUSED, Outcome.FAILED))
    assert fold.fallbacks == tuple(o.staged_fallback for o in outcomes if o.staged_fallback)
    done = [o for o in outcomes if o.outcome in (Outcome.VERIFIED, Outcome.UNCHANGED)]
    taken = [o for o in done if o.staged_seconds is not None]
    assert (fold.staged_segments, fold.staged_bytes) == (len(taken), sum(o.source_bytes for o in taken))
    assert fold.window_segments == len(done) - len(taken)
    failed_io = {o.log_dir for o in outcomes if o.problem is not None and o.problem.kind == "io-error"}
    assert fold.io_stopped == failed_io


def test_the_progress_line_counts_a_segment_once_by_a_bit_per_planned_segment(tmp_path):
    logdir = make_broker_logdir(tmp_path / "a", partitions=["gzip-v0-0", "plain-v0-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    seen = SeenSegments(plan)
    d = plan.log_dirs[0]
    keys = [(d.key, p.name, s.base_offset) for p in d.partitions for s in p.segments]
    assert all(seen.add(*k) for k in keys)
    assert not any(seen.add(*k) for k in keys) and all(seen.has(*k) for k in keys)
    assert not seen.unplanned and sum(len(b) for b in seen.bits.values()) <= len(keys)
    assert seen.add(d.key, "gzip-v0-0", 10**12) and not seen.add(d.key, "gzip-v0-0", 10**12)  # not planned: by key
    last = keys[-1][1]  # the partition asked last (its positions are cached): an unplanned base is still by key
    assert seen.add(d.key, last, 10**12) and seen.has(d.key, last, 10**12) and not seen.add(d.key, last, 10**12)
    assert seen.unplanned == {(d.key, "gzip-v0-0", 10**12), (d.key, last, 10**12)}
    for k in reversed(keys):  # across partitions, out of order: each still seen once
        assert seen.has(*k) and not seen.add(*k)


def test_planned_size_is_each_segments_size_in_either_plan_form(tmp_path):
    logdir = make_broker_logdir(tmp_path / "a", partitions=["gzip-v0-0", "plain-v0-0"])
    built = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    write_plan(built, tmp_path / "plan.parquet")
    for plan in (built, load_plan(tmp_path / "plan.parquet")):
        d = plan.log_dirs[0]
        sizes = {(p.name, s.base_offset): s.size for p in d.partitions for s in p.segments}
        assert len(sizes) == 5 and all(sizes.values())
        for (name, base), size in [*sizes.items(), *reversed(sizes.items())]:
            assert planned_size(plan, d.key, name, base) == size
        assert planned_size(plan, d.key, "gzip-v0-0", 10**12) == 0 and planned_size(plan, d.key, "nope-0", 0) == 0
        assert planned_size(None, d.key, "gzip-v0-0", 0) == 0


def test_a_task_reads_the_states_of_its_own_partitions_only(tmp_path):
    """``partition_states(names)``: what the whole table says of those names, each found by its key (a convert task
    asks for its few partitions, not a log dir's 10^4 once per task); a name the state does not hold is left out."""
    from migrate.model.run_state import PartitionState, Problem
    from migrate.run.state import StateStore

    logdir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0", "lz4-v1-1"])
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    d = plan.log_dirs[0]
    with StateStore.open(d.log_dir, plan.plan_id, create=True) as store:
        store.initialize(plan.plan_id, d, lock_existed=False)
        store.fail_partition("gzip-v0-0", Problem("live-changed", "changed"))
        whole = store.partition_states()
        asked = store.partition_states(["gzip-v0-0", "lz4-v1-1", "no-such-0"])
    assert set(whole) == {"plain-v0-1", "gzip-v0-0", "lz4-v1-1"}
    assert asked == {"gzip-v0-0": PartitionState.FAILED, "lz4-v1-1": whole["lz4-v1-1"]}
    assert whole["lz4-v1-1"] != PartitionState.FAILED
