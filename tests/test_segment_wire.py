"""A batch of finished segments on the wire (``migrate.watch.events``): columns, not a dict per segment. Every batch
comes back as the record that was sent, through msgpack as Dask's comms carry it; a column that does not fit is
refused by name; a client's own batches are dropped undecoded."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migrate.errors import ModelError
from migrate.model.run_state import Outcome, Problem, RangeProgress, SegmentOutcome
from migrate.watch import events

names = st.text(min_size=0, max_size=12)
seconds = st.floats(min_value=0, max_value=1e9, allow_nan=False)
sizes = st.integers(min_value=0, max_value=2**62)

problems = st.builds(
    Problem,
    st.sampled_from(["corrupt", "io-error", "verify", "bug"]),
    names,
    st.none() | names,
    st.none() | sizes,
    st.none() | sizes,
)
outcomes = st.builds(
    SegmentOutcome,
    names,
    names,
    sizes,
    st.sampled_from(list(Outcome)),
    sizes,
    sizes,
    sizes,
    seconds,
    seconds,
    st.none() | problems,
    st.none(),
    seconds,
    st.none() | seconds,
    names,
)
ranges = st.builds(RangeProgress, names, names, sizes, sizes, sizes, sizes)
finished = st.builds(events.SegmentFinished, st.none() | names, outcomes | ranges, sizes, st.booleans(), sizes)
batches = st.builds(events.SegmentsFinished, st.lists(finished, max_size=40).map(tuple), names)


def as_dask_carries(batch: events.SegmentsFinished, worker: bool) -> object:
    wire = msgpack.unpackb(msgpack.packb(events.encode(batch)), use_list=False)
    return {**wire, "worker": "tcp://10.0.0.7:40000"} if worker else wire


@settings(max_examples=300, deadline=None)
@given(batches, st.booleans())
def test_every_batch_comes_back_as_sent(batch: events.SegmentsFinished, worker: bool) -> None:
    wire = as_dask_carries(batch, worker)
    assert events.decode_run_event(events.SEGMENTS_TOPIC, wire) == batch
    assert events.decode_segments(wire) == [e.progress for e in batch.events]


def realistic_batch(origin: str = "") -> events.SegmentsFinished:
    """256 tiny segments of three partitions as a worker sends them, one refused, a range before its segment."""
    out = []
    for i in range(255):
        problem = Problem("corrupt", "CRC mismatch", "/logs/t-2/00000000000000000400.log", 61, 400) if i == 7 else None
        o = SegmentOutcome(
            "/logs", f"t-{i // 100}", 2 * (i % 100), Outcome.REFUSED if problem else Outcome.VERIFIED, 112, 196, 2,
            1.2e-4, 5.7e-5, problem, None, 1_764_170_000.5 + i,
        )  # fmt: skip
        out.append(events.SegmentFinished("7218de32a283385d", o, 112, True, 2))
    out.insert(10, events.SegmentFinished("7218de32a283385d", RangeProgress("/logs", "t-0", 20, 0, 2, 1 << 30)))
    return events.SegmentsFinished(tuple(out), origin)


def test_a_batch_is_small_and_keeps_its_order() -> None:
    batch = realistic_batch()
    packed = msgpack.packb(events.encode(batch))
    assert len(packed) / len(batch.events) < 64  # a dict per segment took about 320 B
    back = events.decode_run_event(events.SEGMENTS_TOPIC, msgpack.unpackb(packed, use_list=False))
    assert isinstance(back, events.SegmentsFinished)
    assert isinstance(back.events[10].progress, RangeProgress)
    assert back.events[7].progress.problem == Problem(  # type: ignore[union-attr]
        "corrupt", "CRC mismatch", "/logs/t-2/00000000000000000400.log", 61, 400
    )
    assert back == batch


def test_a_clients_own_batch_is_dropped_undecoded() -> None:
    wire = events.encode(realistic_batch(origin="client-1"))
    wire["kind"] = "not even a column"
    assert events.decode_segments(wire, skip_origin="client-1") == []
    with pytest.raises(ModelError, match="kind"):
        events.decode_segments(wire, skip_origin="client-2")
    ours = events.encode(realistic_batch(origin="client-1"))
    assert len(events.decode_segments(ours, skip_origin="client-2")) == 256


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("base_offset", ["zero"] * 256, "base_offset"),
        ("records", [1] * 255, "records"),  # one short
        ("finished_at", ["noon"] * 256, "finished_at"),
        ("staged_seconds", ["x"] * 256, "staged_seconds"),
        ("partition", [99] * 256, "partition"),  # a code past the strings
        ("plan", [-2] * 256, "plan"),
        ("outcome", [0] * 256, "outcome"),  # the code of a string that is no outcome
        ("kind", [2] * 256, "kind"),
        ("strings", [1, 2], "strings"),
        ("origin", 5, "origin"),
        ("problems", [[999, {}]], "problems"),
        ("problems", [[7, {"kind": "corrupt"}]], "message"),
    ],
)
def test_a_column_that_does_not_fit_is_refused_by_name(column: str, value: object, named: str) -> None:
    wire = events.encode(realistic_batch())
    wire[column] = value
    with pytest.raises(ModelError, match=named):
        events.decode_run_event(events.SEGMENTS_TOPIC, wire)


def test_not_a_batch_at_all() -> None:
    with pytest.raises(ModelError, match="expected an object"):
        events.decode_run_event(events.SEGMENTS_TOPIC, [1, 2, 3])
