"""Pass one of compaction (numpy, key digests, merges) keeps exactly the records the deliberately simple reference
(a plain dict over every record) keeps, on hypothesis-generated partitions, for every strategy."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from compaction_layout import Entry, Rec, Segment, write_partition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.compaction import facts as compaction
from migrate.compaction.facts import SegmentSource
from migrate.compaction.pass_one import pass_one
from migrate.compaction.reference import reference_survivors
from migrate.compaction.rules import Settings
from migrate.format.records import Compression
from migrate.model.plan_tree import CompactionStrategy, TimestampPolicy

KEYS = [b"a", b"b", b"c", b"d", b"", b"key-with-more-bytes"]
HEADER = "version"
FORMATS = [(0, Compression.NONE), (0, Compression.GZIP), (1, Compression.NONE), (1, Compression.LZ4)]
FORMATS += [(2, Compression.NONE), (2, Compression.GZIP)]


def _header_value(draw) -> bytes | None:
    kind = draw(st.sampled_from(["small", "small", "negative", "malformed", "null"]))
    if kind == "small":
        return draw(st.integers(0, 3)).to_bytes(8, "big", signed=True)
    if kind == "negative":
        return draw(st.integers(-(2**63), -1)).to_bytes(8, "big", signed=True)
    if kind == "malformed":
        return draw(st.binary(min_size=0, max_size=12).filter(lambda b: len(b) != 8))
    return None


@st.composite
def partitions(draw) -> list[Segment]:
    offset = draw(st.integers(0, 5))
    segments = []
    for _ in range(draw(st.integers(1, 3))):
        seg = Segment(offset, draw(st.sampled_from([1_600_000_000_000, 1_600_000_000_500, 1_600_000_001_000])))
        for _ in range(draw(st.integers(1, 4))):
            magic, codec = draw(st.sampled_from(FORMATS))
            lat = None
            if magic > 0 and draw(st.integers(0, 4)) == 0:
                lat = draw(st.sampled_from([1_600_000_000_000, 1_600_000_000_700]))
            recs = []
            for _ in range(draw(st.integers(1, 5))):
                headers: tuple = ()
                if magic == 2:
                    names = draw(st.lists(st.sampled_from([HEADER, "other"]), max_size=3))
                    headers = tuple((n, _header_value(draw)) for n in names)
                recs.append(
                    Rec(
                        offset,
                        draw(st.sampled_from(KEYS)),
                        draw(st.one_of(st.none(), st.binary(max_size=6))),
                        draw(st.sampled_from([-1, 0, 1_600_000_000_000, 1_600_000_000_400, 1_600_000_002_000])),
                        headers,
                        magic == 2 and draw(st.integers(0, 3)) == 0,
                    )
                )
                offset += 1 + draw(st.sampled_from([0, 0, 0, 1, 7]))
            seg.entries.append(Entry(magic, tuple(recs), codec, lat))
        segments.append(seg)
        offset += draw(st.integers(0, 3))
    return segments


def both(segments: list[Segment], s: Settings, merge_at: int) -> tuple[list[int], list[int]]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_partition(Path(tmp) / "t-0", segments)
        sources = [SegmentSource(str(p), seg.base_offset, seg.mtime_ms) for p, seg in zip(paths, segments)]
        fast = pass_one(sources, s, "t-0", merge_at=merge_at)
        simple = reference_survivors(sources, s.strategy, s.header, s.timestamps, s.drop_tombstones_older_than_ms)
    assert fast.records == simple.records
    assert fast.distinct_keys == simple.distinct_keys
    return fast.offsets.tolist(), simple.survivors


rules = st.builds(
    Settings,
    strategy=st.sampled_from(list(CompactionStrategy)),
    header=st.sampled_from([HEADER, HEADER, "other"]),
    timestamps=st.sampled_from(list(TimestampPolicy)),
    drop_tombstones_older_than_ms=st.sampled_from([None, None, 0, 500, 1_000_000]),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions(), rules, st.sampled_from([1, 2, 5, 1 << 18]))
def test_pass_one_keeps_what_the_simple_reference_keeps(segments, s, merge_at):
    fast, simple = both(segments, s, merge_at)
    assert fast == simple
    last = max(r.offset for seg in segments for e in seg.entries for r in e.records)
    assert fast[-1] == last  # the log end record always stays


def _weak_digests(cols):
    """Digests whose high halves collide for distinct keys (the key's length), the low half still telling them
    apart: the merge must take its general path and still agree."""
    hi, lo = REAL_DIGESTS(cols)
    return np.maximum(cols.key_len, 0).astype(np.uint64), lo ^ hi


REAL_DIGESTS = compaction.key_digests


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(partitions(), rules, st.sampled_from([1, 2, 3]))
def test_colliding_high_halves_of_key_digests_take_the_general_merge_and_still_agree(segments, s, merge_at):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction, "key_digests", _weak_digests)
        fast, simple = both(segments, s, merge_at)
    assert fast == simple
