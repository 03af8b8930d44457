"""Damaged segments never make the reader raise anything but CorruptRecordError (or a subclass).

The damage engine is benchmarks/fuzz_format.py (bit flips, overwritten bytes, truncation, zeroed ranges, cut or
doubled slices, header fields set to extremes, shrunk last entries, damaged insides of compressed entries
recompressed; half the cases with every CRC recomputed so the damage gets past the checksums). Here it runs a few
thousand seeded cases; the script runs as many as asked.
"""

from __future__ import annotations

import importlib.util
import random
import struct
import sys
import tracemalloc
import zlib
from collections import Counter

import crc32c
import pytest
from conftest import LEGACY_LOGDIR, REPO

from migrate.errors import CorruptRecordError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.entries import read_entries
from migrate.format.records import Compression, Record

# one xdist worker: the damaged corpus is made once
pytestmark = pytest.mark.xdist_group("format_fuzz")


def _load_engine():
    spec = importlib.util.spec_from_file_location("fuzz_format", REPO / "benchmarks" / "fuzz_format.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_format"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


fuzz = _load_engine()
SEGMENTS = fuzz.load_segments([LEGACY_LOGDIR])
CASES_PER_SEGMENT = 120
SEED = 20240601


@pytest.fixture(scope="module")
def reports() -> dict:
    """Each segment's seeded cases, run once for the module: segment name -> fuzz.Report."""
    return {seg.name: fuzz.fuzz([seg], CASES_PER_SEGMENT, SEED + i) for i, seg in enumerate(SEGMENTS)}


@pytest.mark.parametrize("name", [s.name for s in SEGMENTS])
def test_damaged_segment_reads_or_raises_corrupt_record_error(name, reports):
    report = reports[name]
    assert report.cases == CASES_PER_SEGMENT
    assert report.crashes == [], report.crashes[:3]
    # the damage is real: a good share of the cases are refused, with the typed error
    refused = sum(n for k, n in report.outcomes.items() if k not in ("read", "read with tail"))
    assert refused >= CASES_PER_SEGMENT // 3, report.outcomes


def test_fuzzing_reached_past_the_checksums(reports):
    reasons, outcomes, mutations = Counter(), Counter(), Counter()
    for r in reports.values():
        reasons.update(r.reasons)
        outcomes.update(r.outcomes)
        mutations.update(r.mutations)
    assert sum(outcomes.values()) == CASES_PER_SEGMENT * len(SEGMENTS) >= 3000
    assert set(mutations) == set(fuzz.MUTATIONS)
    # refused by every layer, not only by the CRC checks: sizes, codecs, offsets, magic bytes
    for kind in ("checksum", "sizes", "codec", "offsets", "magic"):
        assert reasons[kind] >= 20, reasons
    assert outcomes["UnsupportedFormatError"] > 0 and outcomes["read with tail"] > 0 and outcomes["read"] > 0


def test_cases_replay_identically():
    a = [fuzz.run_case(SEED, i, SEGMENTS) for i in range(40)]
    b = [fuzz.run_case(SEED, i, SEGMENTS) for i in range(40)]
    assert a == b
    assert len({(name, kind) for _, name, kind, _ in a}) > 10


def test_fixed_crcs_are_valid_and_let_the_damage_through():
    seg = next(s for s in SEGMENTS if s.name.startswith("already-v2-0"))
    buf = bytearray(seg.data)
    fuzz.fix_crcs(buf)
    assert bytes(buf) == seg.data  # Kafka's CRCs are what fix_crcs computes
    buf[v2.RECORD_BATCH_OVERHEAD + 3] ^= 0xFF  # inside the first (uncompressed) batch's records
    fuzz.fix_crcs(buf)
    with pytest.raises(CorruptRecordError) as info:
        read_entries(bytes(buf))
    assert "CRC" not in info.value.reason


# --- crafted cases the fuzzer found or might miss -----------------------------------------------------------


def _v2_with(count: int | None = None, **patch: int) -> bytes:
    raw = bytearray(v2.encode_batch([Record(100, 5, b"k", b"v"), Record(101, 6, None, b"")]))
    if count is not None:
        struct.pack_into(">i", raw, 57, count)
    for fmt_at, value in patch.items():
        fmt, at = fmt_at.split("_")
        struct.pack_into(">" + fmt, raw, int(at), value)
    struct.pack_into(">I", raw, v2.CRC_OFFSET, crc32c.crc32c(bytes(raw[v2.ATTRIBUTES_OFFSET :])))
    return bytes(raw)


@pytest.mark.parametrize("count", [3, 1000, 2**31 - 1, -1, -(2**31)])
def test_v2_record_count_that_the_bytes_cannot_hold(count):
    """A CRC-valid batch claiming 2^31-1 records must fail without allocating arrays for them (it used to ask
    for 6 x 16 GiB: a MemoryError wherever memory is limited)."""
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            read_entries(_v2_with(count))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_v2_offsets_beyond_int64_are_corrupt():
    """The base offset is not covered by the CRC: base + offset delta past 2^63 - 1 is damage (it used to raise
    OverflowError)."""
    raw = bytearray(_v2_with())
    struct.pack_into(">q", raw, 0, 2**63 - 1)
    with pytest.raises(CorruptRecordError, match="int64"):
        read_entries(bytes(raw))
    struct.pack_into(">q", raw, 0, 2**63 - 2)  # the last record lands exactly on the largest offset
    assert [r.offset for r in read_entries(bytes(raw)).records()] == [2**63 - 2, 2**63 - 1]


def test_v2_timestamp_deltas_wrap_like_java():
    """Kafka computes timestamp - baseTimestamp in Java long arithmetic: -1 then Long.MAX_VALUE wraps the delta,
    and reading wraps it back (it used to raise OverflowError)."""
    records = [Record(0, -1, b"a", b"b"), Record(1, 2**63 - 1, b"c", b"d")]
    for hs in [(), (("h", b"x"),)]:  # both encoders (columns without headers, rows with)
        raw = v2.encode_batch([r._replace(headers=hs) for r in records])
        assert [r.timestamp for r in read_entries(raw).records()] == [-1, 2**63 - 1]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("payload", [b"", b"\xff", b"\xff\xff", b"\xff\xff\xff"])
def test_short_compressed_legacy_message_at_the_end_of_the_buffer(magic, payload):
    """A CRC-valid wrapper too short for its key length field (it used to raise struct.error)."""
    body = bytes([magic, int(Compression.GZIP)]) + (struct.pack(">q", 5) if magic else b"") + payload
    body = body + bytes(max(0, 10 - len(body)))  # a message is at least 14 bytes: crc + 10
    entry = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError) as info:
        read_entries(entry)
    assert info.value.position == 0


@pytest.mark.parametrize("relative", [-(2**63), 2**63 - 1])
def test_magic1_inner_relative_offset_at_the_int64_limits(relative):
    """A CRC-valid magic 1 wrapper whose inner relative offset is extreme (it used to raise OverflowError)."""
    inner = legacy.encode_message(relative, 1, 0, 7, b"k", b"v")
    value = codecs.compress(Compression.GZIP, inner, 1)
    wrapper = legacy.encode_message(5, 1, int(Compression.GZIP), 7, None, value)
    with pytest.raises(CorruptRecordError) as info:
        read_entries(wrapper)
    assert info.value.position == 0 and info.value.offset == 5


@pytest.mark.parametrize("size", [0, 1, 13, -1, -(2**31)])
def test_entry_size_below_the_minimum_is_an_error_not_a_tail(size):
    good = legacy.encode_messages([Record(0, -1, b"k", b"v")], 0)
    bad = struct.pack(">qi", 1, size) + bytes(20)
    with pytest.raises(CorruptRecordError, match="below the minimum") as info:
        read_entries(good + bad)
    assert info.value.position == len(good)


def test_zero_filled_preallocated_tail():
    good = legacy.encode_messages([Record(i, -1, b"k", b"v") for i in range(3)], 0)
    with pytest.raises(CorruptRecordError) as info:
        read_entries(good + bytes(4096))
    assert info.value.position == len(good)
    entries = read_entries(good + bytes(16))  # fewer than an entry header: a tail, as Kafka stops silently
    assert entries.tail is not None and entries.tail.size == 16


def test_random_garbage_never_escapes():
    rng = random.Random(SEED)
    outcomes = Counter()
    for _ in range(300):
        data = rng.randbytes(rng.randrange(0, 300))
        try:
            outcomes[fuzz.read_everything(data)] += 1
        except CorruptRecordError as exc:
            outcomes[type(exc).__name__] += 1
    assert outcomes["CorruptRecordError"] > 50 and outcomes["read with tail"] > 50, outcomes
