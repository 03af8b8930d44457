"""Our writers and our reader agree exactly, for every magic and codec, on random records (hypothesis) and on
Kafka's own bytes: uncompressed entries Kafka wrote re-encode byte for byte.

Timestamps -1 and huge, null vs empty keys, values and header values, binary data, offset gaps, LogAppendTime,
producer state, control and transactional batches, batches whose last offset lies beyond their last record.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter

import numpy as np
import pytest
from conftest import VALID_FIXTURE_SEGMENTS, fixture_id
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migrate.errors import CorruptRecordError, LocatedError, UnsupportedFormatError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.checksums import crc32, crc32c
from migrate.format.digest import LogDigest
from migrate.format.entries import read_entries
from migrate.format.records import NO_TIMESTAMP, Compression, Record, RecordColumns, TimestampType

CREATE, APPEND = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME
V2_CODECS = list(Compression)
LEGACY_CODECS = [c for c in Compression if c != Compression.ZSTD]
INT64_MAX = 2**63 - 1

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# keys, values and header values: null, empty, short binary, long (compressible or random) binary
payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(min_size=1, max_size=24),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=6), st.integers(1, 600)),
    st.binary(min_size=100, max_size=1200),
)
small_payloads = st.one_of(st.none(), st.just(b""), st.binary(max_size=16))
header_lists = st.lists(st.tuples(st.text(max_size=8), small_payloads), max_size=3).map(tuple)
timestamps = st.one_of(
    st.just(NO_TIMESTAMP), st.just(0), st.integers(0, 2**41), st.integers(2**41, 2**62), st.just(INT64_MAX)
)
gaps = st.one_of(st.just(1), st.integers(1, 5), st.integers(6, 100_000))


@st.composite
def record_lists(draw, magic: int, min_size: int = 1, max_size: int = 12, headers: bool = True) -> list[Record]:
    n = draw(st.integers(min_size, max_size))
    offset = draw(st.one_of(st.just(0), st.integers(0, 2**31), st.integers(2**31, 2**62)))
    out = []
    for _ in range(n):
        ts = NO_TIMESTAMP if magic == 0 else draw(timestamps)
        hs = draw(header_lists) if (magic == 2 and headers) else ()
        out.append(Record(offset, ts, draw(payloads), draw(payloads), hs))
        offset += draw(gaps)
    return out


def exact(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]


def stamped(records: list[Record], ts: int) -> list[Record]:
    return [r._replace(timestamp=ts) for r in records]


# --- v2 batches ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: c.label)
@SETTINGS
@given(data=st.data())
def test_v2_batch_round_trip(codec, data):
    records = data.draw(record_lists(2))
    tstype = data.draw(st.sampled_from([CREATE, APPEND]))
    append_time = data.draw(st.one_of(st.just(0), st.integers(0, INT64_MAX))) if tstype == APPEND else None
    base = records[0].offset - data.draw(st.sampled_from([0, 0, 1, 17]))
    last = records[-1].offset + data.draw(st.sampled_from([0, 0, 3]))  # compacted batches keep their last offset
    producer = data.draw(st.sampled_from([(-1, -1, -1, False), (4242, 0, 0, False), (777, 3, 12, True)]))
    epoch = data.draw(st.sampled_from([-1, 0, 5, 2**31 - 1]))
    raw = v2.encode_batch(
        records,
        base_offset=base,
        last_offset=last,
        partition_leader_epoch=epoch,
        compression=codec,
        timestamp_type=tstype,
        log_append_time=append_time,
        carried=v2.CarriedHeader(
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            is_transactional=producer[3],
        ),
    )
    entries = read_entries(raw)
    assert entries.tail is None and entries.consumed == len(raw)
    (batch,) = entries.items
    want = records if tstype == CREATE else stamped(records, append_time)
    got = list(entries.records())
    assert exact(got) == exact(want)
    assert {r.timestamp_type for r in got} == {tstype}
    max_ts = append_time if tstype == APPEND else max(r.timestamp for r in records)
    assert (batch.position, batch.size, batch.base_offset, batch.last_offset) == (0, len(raw), base, last)
    assert (batch.compression, batch.timestamp_type, batch.max_timestamp) == (codec, tstype, max_ts)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional) == producer
    assert (batch.partition_leader_epoch, batch.records_count, batch.is_control) == (epoch, len(records), False)
    assert batch.crc == crc32c(raw[v2.ATTRIBUTES_OFFSET :]) == struct.unpack_from(">I", raw, v2.CRC_OFFSET)[0]
    assert struct.unpack_from(">i", raw, 8)[0] == len(raw) - 12
    # columns (the hot path's input) and rows encode to the same bytes
    kwargs = dict(
        base_offset=base,
        last_offset=last,
        partition_leader_epoch=epoch,
        compression=codec,
        timestamp_type=tstype,
        log_append_time=append_time,
        carried=v2.CarriedHeader(
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            is_transactional=producer[3],
        ),
    )
    if codec == Compression.NONE or codec == Compression.GZIP:  # deterministic codecs: compare the bytes
        assert v2.encode_batch(RecordColumns.from_records(records), **kwargs) == raw


@SETTINGS
@given(records=record_lists(2, headers=False), flag=st.booleans())
def test_kip87_tombstone_flag_is_written_and_ignored_on_read(records, flag):
    raw = v2.encode_batch(
        records, record_attributes=v2.new_record_attributes(RecordColumns.from_records(records), flag)
    )
    assert exact(read_entries(raw).records()) == exact(records)
    first_attributes = raw[v2.RECORD_BATCH_OVERHEAD + len(_varint_prefix(raw))]
    assert first_attributes == (v2.KIP87_TOMBSTONE_BIT if flag and records[0].value is None else 0)


def _varint_prefix(raw: bytes) -> bytes:
    """The length varint of the first record of an uncompressed batch."""
    end = v2.RECORD_BATCH_OVERHEAD
    while raw[end] & 0x80:
        end += 1
    return raw[v2.RECORD_BATCH_OVERHEAD : end + 1]


def test_v2_delete_horizon_and_control_fields():
    records = [Record(10, 1000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")]
    raw = v2.encode_batch(
        records,
        carried=v2.CarriedHeader(9, 2, is_transactional=True, is_control=True, delete_horizon_ms=5000),
    )
    (batch,) = read_entries(raw).items
    assert batch.is_control and batch.is_transactional and batch.delete_horizon_ms == 5000
    assert batch.base_timestamp == 5000
    assert batch.attributes == v2.TRANSACTIONAL_BIT | v2.CONTROL_BIT | v2.DELETE_HORIZON_BIT


def test_empty_v2_batch():
    raw = v2.encode_batch([], base_offset=40, last_offset=49)
    (batch,) = read_entries(raw).items
    assert (batch.base_offset, batch.last_offset, batch.records_count, len(raw)) == (40, 49, 0, 61)
    assert batch.max_timestamp == NO_TIMESTAMP and list(read_entries(raw).records()) == []


# --- single-record batches (the fast path for uncompressed legacy messages) ---------------------------------


@SETTINGS
@given(
    records=record_lists(2, max_size=25, headers=False),
    data=st.data(),
    epoch=st.sampled_from([-1, 0, 7]),
    flag=st.booleans(),
)
def test_single_record_batches_equal_one_encode_batch_per_record(records, data, epoch, flag):
    types = np.array([data.draw(st.sampled_from([0, 1])) for _ in records], np.int64)
    cols = RecordColumns.from_records(records)
    fast, sizes = v2.encode_single_record_batches(cols, types, partition_leader_epoch=epoch, tombstone_flag=flag)
    slow = [
        v2.encode_batch(
            [r],
            partition_leader_epoch=epoch,
            timestamp_type=TimestampType(int(t)),
            log_append_time=r.timestamp if t else None,
            record_attributes=v2.new_record_attributes(RecordColumns.from_records([r]), flag),
        )
        for r, t in zip(records, types.tolist())
    ]
    assert fast == b"".join(slow)
    assert sizes.tolist() == [len(s) for s in slow]
    entries = read_entries(fast)
    assert len(entries.items) == len(records)
    assert exact(entries.records()) == exact(records)
    assert [r.timestamp_type for r in entries.records()] == [TimestampType(int(t)) for t in types]


PLAIN_LEGACY = [
    s
    for s in VALID_FIXTURE_SEGMENTS
    if any(isinstance(i, legacy.LegacyRun) for i in read_entries(s.read_bytes()).items)
]


@pytest.mark.parametrize("segment", PLAIN_LEGACY, ids=fixture_id)
def test_single_record_batches_over_fixture_columns(segment):
    """The conversion hot path: columns over the segment buffer straight into v2 batches."""
    data = segment.read_bytes()
    for run in (i for i in read_entries(data).items if isinstance(i, legacy.LegacyRun)):
        types = np.maximum(run.timestamp_types(), 0)
        fast, sizes = v2.encode_single_record_batches(run.records, types)
        rows = run.records.rows()
        slow = [
            v2.encode_batch([r], timestamp_type=TimestampType(int(t)), log_append_time=r.timestamp if t else None)
            for r, t in zip(rows, types.tolist())
        ]
        assert fast == b"".join(slow) and sizes.tolist() == [len(s) for s in slow]
        assert exact(read_entries(fast).records()) == exact(rows)


def test_single_record_batches_refuse_headers_and_accept_nothing():
    cols = RecordColumns.from_records([Record(0, 0, None, b"v", (("h", None),))])
    with pytest.raises(ValueError, match="headers"):
        v2.encode_single_record_batches(cols, np.zeros(1, np.int64))
    out, sizes = v2.encode_single_record_batches(RecordColumns.from_records([]), np.zeros(0, np.int64))
    assert out == b"" and len(sizes) == 0


# --- legacy messages and wrappers ---------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.label)
@SETTINGS
@given(data=st.data())
def test_legacy_round_trip(magic, codec, data):
    records = data.draw(record_lists(magic))
    tstype = data.draw(st.sampled_from([CREATE, APPEND])) if magic == 1 else CREATE
    append_time = data.draw(st.integers(0, INT64_MAX)) if tstype == APPEND else None
    if codec == Compression.NONE:
        raw = legacy.encode_messages(records, magic, tstype)
        want = records  # an uncompressed LogAppendTime message carries its own (broker-set) timestamp
    else:
        raw = legacy.encode_wrapper(records, magic, codec, tstype, append_time)
        want = stamped(records, append_time) if tstype == APPEND else records
    entries = read_entries(raw)
    assert entries.tail is None and entries.consumed == len(raw)
    got = list(entries.records())
    assert exact(got) == exact(want)
    want_type = TimestampType.NO_TIMESTAMP_TYPE if magic == 0 else tstype
    assert {r.timestamp_type for r in got} == {want_type}
    if codec == Compression.NONE:
        (run,) = entries.items
        assert isinstance(run, legacy.LegacyRun) and len(run) == len(records)
        assert run.magics.tolist() == [magic] * len(records)
        assert run.sizes.sum() == len(raw) and run.positions[0] == 0
        assert [crc32(raw[p + 16 : p + s]) for p, s in zip(run.positions.tolist(), run.sizes.tolist())] == (
            run.crcs.tolist()
        )
    else:
        (wrapper,) = entries.items
        assert isinstance(wrapper, legacy.LegacyWrapper)
        assert (wrapper.magic, wrapper.compression, wrapper.offset, wrapper.size) == (
            magic,
            codec,
            records[-1].offset,
            len(raw),
        )
        if magic == 0:
            assert wrapper.timestamp == NO_TIMESTAMP
        else:
            assert wrapper.timestamp == (append_time if tstype == APPEND else max(r.timestamp for r in records))
        assert wrapper.crc == crc32(raw[16:])


@pytest.mark.parametrize(
    ("magic", "codec"),
    [(m, c) for m in (0, 1, 2) for c in V2_CODECS if c != Compression.NONE and (m == 2 or c != Compression.ZSTD)],
    ids=lambda x: x.label if isinstance(x, Compression) else f"m{x}",
)
def test_big_payloads_span_several_snappy_chunks_and_lz4_blocks(magic, codec):
    rng = np.random.default_rng(magic * 10 + int(codec))
    records = [
        Record(5, 1 if magic else -1, b"k", rng.integers(0, 256, 150_000, np.uint8).tobytes()),  # incompressible
        Record(6, 2 if magic else -1, None, b"abc" * 50_000),
        Record(9, 3 if magic else -1, b"", b""),
    ]
    raw = v2.encode_batch(records, compression=codec) if magic == 2 else legacy.encode_wrapper(records, magic, codec)
    assert exact(read_entries(raw).records()) == exact(records)


@SETTINGS
@given(data=st.data())
def test_mixed_entries_in_one_buffer(data):
    """v0, v1 and v2 entries of every kind back to back, as a segment holds them after format upgrades."""
    kinds = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from([0, 1, 2]), st.sampled_from(list(Compression)), st.sampled_from([CREATE, APPEND])
            ),
            min_size=1,
            max_size=6,
        )
    )
    offset = data.draw(st.integers(0, 2**40))
    raw = b""
    want: list[Record] = []
    n_entries = 0
    for magic, codec, tstype in kinds:
        if magic < 2 and codec == Compression.ZSTD:
            codec = Compression.SNAPPY
        if magic == 0:
            tstype = CREATE
        chunk = data.draw(record_lists(magic, max_size=5))
        chunk = [r._replace(offset=offset + r.offset - chunk[0].offset) for r in chunk]
        offset = chunk[-1].offset + 1
        append_time = data.draw(st.integers(0, 2**45)) if tstype == APPEND else None
        if magic == 2:
            raw += v2.encode_batch(chunk, compression=codec, timestamp_type=tstype, log_append_time=append_time)
            n_entries += 1
        elif codec == Compression.NONE:
            raw += legacy.encode_messages(chunk, magic, tstype)
            n_entries += len(chunk)
            append_time = None
        else:
            raw += legacy.encode_wrapper(chunk, magic, codec, tstype, append_time)
            n_entries += 1
        want += stamped(chunk, append_time) if append_time is not None else chunk
    entries = read_entries(raw)
    assert exact(entries.records()) == exact(want)
    assert sum(len(i) if isinstance(i, legacy.LegacyRun) else 1 for i in entries.items) == n_entries
    assert entries.consumed == len(raw) and entries.tail is None
    # every prefix that cuts an entry leaves the complete entries and a tail of the rest
    cut = data.draw(st.integers(1, len(raw) - 1))
    part = read_entries(raw[:cut])
    assert part.consumed + (part.tail.size if part.tail else 0) == cut
    got = exact(part.records())
    assert got == exact(want)[: len(got)]


# --- the content digest -------------------------------------------------------------------------------------


def reference_digest(records: list[Record]) -> tuple[str, str]:
    """fixtures/README.md's definition of sha256 / sha256_ts, written out independently of migrate.format.digest."""

    def b(x: bytes | None) -> bytes:
        return b"\x01" if x is None else b"\x00" + struct.pack(">i", len(x)) + x

    plain, timed = hashlib.sha256(), hashlib.sha256()
    for r in records:
        rest = b(r.key) + b(r.value) + struct.pack(">i", len(r.headers))
        for name, value in r.headers:
            nb = name.encode("utf-8")
            rest += struct.pack(">i", len(nb)) + nb + b(value)
        plain.update(struct.pack(">q", r.offset) + rest)
        timed.update(struct.pack(">qq", r.offset, r.timestamp) + rest)
    return plain.hexdigest(), timed.hexdigest()


@SETTINGS
@given(records=record_lists(2, max_size=20), codec=st.sampled_from(V2_CODECS))
def test_digest_follows_the_readme_definition(records, codec):
    digest = LogDigest()
    digest.update(RecordColumns.from_records(records))
    assert digest.hexdigests() == reference_digest(records)
    # fed in chunks, from columns over a decoded batch (not a fresh buffer), the digest is the same
    chunked = LogDigest()
    half = len(records) // 2
    for part in (records[:half], records[half:]):
        if part:
            (batch,) = read_entries(v2.encode_batch(part, compression=codec)).items
            chunked.update(batch.records)
    assert chunked.hexdigests() == reference_digest(records) and chunked.records == len(records)


def test_digest_tells_null_from_empty():
    def digests(key, value, headers=()):
        d = LogDigest()
        d.update(RecordColumns.from_records([Record(0, -1, key, value, headers)]))
        return d.hexdigests()

    variants = [
        digests(None, b"v"),
        digests(b"", b"v"),
        digests(b"k", None),
        digests(b"k", b""),
        digests(b"k", b"v", (("h", None),)),
        digests(b"k", b"v", (("h", b""),)),
    ]
    assert len({p for p, _ in variants}) == len(variants)


# --- Kafka's own bytes as the reference ---------------------------------------------------------------------


@pytest.mark.parametrize("segment", PLAIN_LEGACY, ids=fixture_id)
def test_kafkas_uncompressed_legacy_messages_re_encode_byte_for_byte(segment):
    data = segment.read_bytes()
    for run in (i for i in read_entries(data).items if isinstance(i, legacy.LegacyRun)):
        cols = run.records
        for j in range(len(run)):
            p, s = int(run.positions[j]), int(run.sizes[j])
            ours = legacy.encode_message(
                int(cols.offsets[j]),
                int(run.magics[j]),
                int(run.attributes[j]),
                int(cols.timestamps[j]),
                cols.key(j),
                cols.value(j),
            )
            assert ours == data[p : p + s], (p, j)
        # and the list writer, per stretch of one magic and timestamp type
        types = run.timestamp_types()
        rows = run.records.rows()
        j = 0
        while j < len(run):
            k = j
            while k < len(run) and run.magics[k] == run.magics[j] and types[k] == types[j]:
                k += 1
            tstype = APPEND if types[j] == 1 else CREATE
            start, end = int(run.positions[j]), int(run.positions[k - 1] + run.sizes[k - 1])
            assert legacy.encode_messages(rows[j:k], int(run.magics[j]), tstype) == data[start:end]
            j = k


V2_SEGMENTS = [
    s for s in VALID_FIXTURE_SEGMENTS if any(isinstance(i, v2.V2Batch) for i in read_entries(s.read_bytes()).items)
]


def reencode(b: v2.V2Batch) -> bytes:
    return v2.encode_batch(
        b.records.rows(),
        base_offset=b.base_offset,
        last_offset=b.last_offset,
        partition_leader_epoch=b.partition_leader_epoch,
        compression=b.compression,
        timestamp_type=b.timestamp_type,
        log_append_time=b.max_timestamp if b.timestamp_type == APPEND else None,
        carried=v2.CarriedHeader(
            producer_id=b.producer_id,
            producer_epoch=b.producer_epoch,
            base_sequence=b.base_sequence,
            is_transactional=b.is_transactional,
            is_control=b.is_control,
        ),
    )


@pytest.mark.parametrize("segment", V2_SEGMENTS, ids=fixture_id)
def test_kafkas_v2_batches_re_encode_with_every_header_field(segment):
    """Uncompressed CreateTime batches come out byte for byte; the others hold the same records and header fields.

    (Under LogAppendTime Kafka keeps the producer's timestamp deltas, which no reader reports; we write the append
    time for every record, so only the base timestamp differs.)
    """
    data = segment.read_bytes()
    for b in (i for i in read_entries(data).items if isinstance(i, v2.V2Batch)):
        ours = reencode(b)
        if b.compression == Compression.NONE and b.timestamp_type == CREATE:
            assert ours == data[b.position : b.position + b.size]
        (back,) = read_entries(ours).items
        assert exact(back.records.rows()) == exact(b.records.rows())
        fields = ["base_offset", "last_offset", "partition_leader_epoch", "attributes", "max_timestamp"]
        fields += ["producer_id", "producer_epoch", "base_sequence", "records_count"]
        fields += ["base_timestamp"] if b.timestamp_type == CREATE else []
        assert [getattr(back, f) for f in fields] == [getattr(b, f) for f in fields]


def test_fixtures_hold_uncompressed_v2_batches_to_compare_bytes_with():
    kinds = Counter(
        (b.compression, b.timestamp_type, b.is_control)
        for s in V2_SEGMENTS
        for b in read_entries(s.read_bytes()).items
        if isinstance(b, v2.V2Batch)
    )
    assert kinds[(Compression.NONE, CREATE, False)] >= 2 and kinds[(Compression.NONE, CREATE, True)] == 1
    assert sum(n for (_, t, _), n in kinds.items() if t == APPEND) >= 1


# --- codec framing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_our_lz4_frames_carry_the_correct_header_checksum(magic):
    records = [Record(i, 100 + i, b"key", b"value %d " % i * 30) for i in range(50)]
    if magic == 2:
        raw = v2.encode_batch(records, compression=Compression.LZ4)
        at = v2.RECORD_BATCH_OVERHEAD
    else:
        raw = legacy.encode_wrapper(records, magic, Compression.LZ4)
        at = legacy.KEY_LENGTH_OFFSET[magic] + 8
    # magic, FLG (v01, independent blocks, no checksums, no size), BD (64 KiB), then xxh32(FLG BD) >> 8 = 0x82
    assert raw[at : at + 7] == bytes.fromhex("04224d18604082")
    assert codecs._xxh32(bytes.fromhex("6040")) >> 8 & 0xFF == 0x82
    assert codecs._xxh32(bytes.fromhex("04224d186040")) >> 8 & 0xFF == 0x1A  # what Kafka's magic-0 writer put


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_our_snappy_and_gzip_framing_is_kafkas(magic):
    records = [Record(i, 7, None, bytes(range(256)) * 300) for i in range(3)]  # 3 x 76.8 KB
    for codec, prefix in [
        (Compression.SNAPPY, codecs.XERIAL_HEADER),
        (Compression.GZIP, bytes.fromhex("1f8b08000000000000ff")),
    ]:
        if magic == 2:
            raw = v2.encode_batch(records, compression=codec)
            at = v2.RECORD_BATCH_OVERHEAD
        else:
            raw = legacy.encode_wrapper(records, magic, codec)
            at = legacy.KEY_LENGTH_OFFSET[magic] + 8
        assert raw[at : at + len(prefix)] == prefix
        if codec == Compression.SNAPPY:  # xerial chunks of at most 32 KiB uncompressed
            body, pos, chunks = raw[at + 16 :], 0, 0
            while pos < len(body):
                (n,) = struct.unpack_from(">i", body, pos)
                pos += 4 + n
                chunks += 1
            assert pos == len(body) and chunks >= 7


# --- what must be refused -----------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_is_refused_below_magic_2(magic):
    records = [Record(0, 0 if magic else -1, b"k", b"v")]
    with pytest.raises(UnsupportedFormatError, match="zstd"):
        legacy.encode_wrapper(records, magic, Compression.ZSTD)
    with pytest.raises(UnsupportedFormatError, match="zstd"):
        codecs.compress(Compression.ZSTD, b"data", magic)
    # and read: a legacy message whose attributes say zstd
    inner = legacy.encode_messages(records, magic)
    raw = legacy.encode_message(0, magic, int(Compression.ZSTD), 0, None, codecs.compress(Compression.ZSTD, inner))
    with pytest.raises(UnsupportedFormatError, match="codec 4") as info:
        read_entries(raw)
    assert info.value.position == 0


@pytest.mark.parametrize("magic", [0, 1])
def test_headers_are_refused_below_magic_2(magic):
    records = [Record(3, 0, b"k", b"v", (("h", b"x"),))]
    with pytest.raises(UnsupportedFormatError, match="headers"):
        legacy.encode_messages(records, magic)
    with pytest.raises(UnsupportedFormatError, match="headers"):
        legacy.encode_wrapper(records, magic, Compression.GZIP)


def test_writer_argument_errors():
    r = [Record(0, 5, b"k", b"v")]
    with pytest.raises(ValueError, match="Invalid negative timestamp"):
        v2.encode_batch([Record(0, -2, b"k", b"v")])
    with pytest.raises(ValueError, match="log_append_time"):
        v2.encode_batch(r, timestamp_type=APPEND)
    with pytest.raises(ValueError, match="log_append_time"):
        legacy.encode_wrapper(r, 1, Compression.GZIP, APPEND)
    with pytest.raises(ValueError, match="outside"):
        v2.encode_batch(r, base_offset=1)
    with pytest.raises(ValueError, match="empty batch"):
        v2.encode_batch([])
    with pytest.raises(ValueError, match="codec"):
        legacy.encode_wrapper(r, 1, Compression.NONE)
    with pytest.raises(ValueError, match="at least one"):
        legacy.encode_wrapper([], 1, Compression.GZIP)
    with pytest.raises(ValueError, match="magic 0 or 1"):
        legacy.encode_message(0, 2, 0, 0, b"k", b"v")


def test_unknown_magic_is_refused_where_it_is():
    good = legacy.encode_messages([Record(0, -1, b"k", b"v")], 0)
    bad = bytearray(legacy.encode_messages([Record(1, -1, b"k", b"v")], 0))
    bad[16] = 3
    with pytest.raises(UnsupportedFormatError, match="magic byte 3") as info:
        read_entries(good + bytes(bad))
    assert info.value.position == len(good)
    assert isinstance(info.value, LocatedError) and not isinstance(info.value, CorruptRecordError)


# lengths on both sides of every varint size a record's key, value and length take (1, 2 and 3 bytes), and null
lengths = st.one_of(st.just(-1), st.sampled_from([0, 1, 63, 64, 65, 8191, 8192, 8193]), st.integers(0, 20_000))


@SETTINGS
@given(st.lists(st.tuples(lengths, lengths), min_size=1, max_size=20), st.booleans())
def test_single_record_batch_sizes_are_the_sizes_of_the_batches_written(rows, flag):
    """The plan places a range's output with these sizes: they must be exactly what the writer writes."""
    records = [
        Record(i, 1_600_000_000_000 + i, None if k < 0 else b"k" * k, None if v < 0 else b"v" * v)
        for i, (k, v) in enumerate(rows)
    ]
    cols = RecordColumns.from_records(records)
    _, sizes = v2.encode_single_record_batches(
        cols, np.zeros(len(records), np.int64), partition_leader_epoch=0, tombstone_flag=flag
    )
    assert v2.single_record_batch_sizes(cols.key_len, cols.value_len).tolist() == sizes.tolist()
    # what the plan knows of a legacy message is the bytes its value takes: null and empty must size alike
    assert v2.single_record_batch_sizes(cols.key_len, np.maximum(cols.value_len, 0)).tolist() == sizes.tolist()
