"""Property tests: every write -> read round trip is exact; damaged bytes only ever raise the typed error."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import FIXTURE_SEGMENTS, fixture_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.errors import CorruptRecordError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import read_entries
from migrate.format.records import Compression, Record, RecordColumns, TimestampType

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
payload = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20)))


@st.composite
def record_lists(draw, magic: int):
    n = draw(st.integers(1, 25))
    offset = draw(st.integers(0, 2**40))
    out = []
    for _ in range(n):
        ts = -1 if magic == 0 else draw(st.one_of(st.just(-1), st.integers(0, 2**62)))
        hs = tuple(draw(st.lists(header, max_size=3))) if magic == 2 else ()
        out.append(Record(offset, ts, draw(payload), draw(payload), hs))
        offset += draw(st.integers(1, 1000))  # offset gaps
    return out


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(got: list[Record], want: list[Record], timestamps: bool = True) -> None:
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [(r.offset, r.key, r.value, r.headers) for r in want]
    if timestamps:
        assert [r.timestamp for r in got] == [r.timestamp for r in want]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.label)
@SETTINGS
@given(data=st.data())
def test_v2_round_trip(codec, data):
    records = data.draw(record_lists(2))
    tstype = data.draw(st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]))
    append = data.draw(st.integers(0, 2**50)) if tstype == TimestampType.LOG_APPEND_TIME else None
    raw = v2.encode_batch(
        records,
        compression=codec,
        timestamp_type=tstype,
        log_append_time=append,
        partition_leader_epoch=data.draw(st.integers(-1, 2**31 - 1)),
    )
    got = list(read_entries(raw).records())
    _same(got, records, timestamps=tstype == TimestampType.CREATE_TIME)
    if append is not None:
        assert {r.timestamp for r in got} == {append}


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS[:4], ids=lambda c: c.label)
@SETTINGS
@given(data=st.data())
def test_legacy_round_trip(magic, codec, data):
    records = data.draw(record_lists(magic))
    raw = (
        legacy.encode_messages(records, magic)
        if codec == Compression.NONE
        else legacy.encode_wrapper(records, magic, codec)
    )
    _same(list(read_entries(raw).records()), records)


@SETTINGS
@given(records=record_lists(1), types=st.data())
def test_single_record_batches_equal_one_batch_per_record(records, types):
    records = [r._replace(timestamp=max(r.timestamp, -1)) for r in records]
    tstypes = np.array([types.draw(st.sampled_from([0, 1])) for _ in records], np.int64)
    cols = RecordColumns.from_records(records)
    fast, sizes = v2.encode_single_record_batches(cols, tstypes, partition_leader_epoch=7)
    slow = [
        v2.encode_batch(
            [r],
            partition_leader_epoch=7,
            timestamp_type=TimestampType(int(t)),
            log_append_time=r.timestamp if t == 1 else None,
        )
        for r, t in zip(records, tstypes)
    ]
    assert fast == b"".join(slow)
    assert sizes.tolist() == [len(s) for s in slow]


@pytest.mark.parametrize("segment", [s for s in FIXTURE_SEGMENTS if s.stat().st_size > 0], ids=fixture_id)
def test_damaged_fixture_bytes_raise_only_the_typed_error(segment):
    """Random byte flips and truncations: a valid read or CorruptRecordError, never an IndexError or struct.error."""
    data = segment.read_bytes()
    rng = random.Random(fixture_id(segment))
    for _ in range(60):
        damaged = bytearray(data)
        if rng.random() < 0.3:
            damaged = damaged[: rng.randrange(len(damaged))]
        for _ in range(rng.randint(1, 4)):
            if damaged:
                damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
        try:
            entries = read_entries(bytes(damaged))
            list(entries.records())
        except CorruptRecordError as exc:
            assert exc.position is None or 0 <= exc.position <= len(damaged)
