"""Our writers, judged by Apache Kafka's readers (the oracle) and by an independent Python reader (kafka-python)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from conftest import VALID_FIXTURE_SEGMENTS, fixture_id
from kafka.record import MemoryRecords

from migrate.errors import UnsupportedFormatError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import read_entries
from migrate.format.records import Compression, Record, TimestampType

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
SOURCES = [s for s in VALID_FIXTURE_SEGMENTS if s.stat().st_size and not s.parent.name.startswith("already-v2")]


def fixture_records() -> list[Record]:
    """Every record of the legacy fixtures, re-offset into one increasing sequence."""
    out = []
    offset = 0
    for seg in SOURCES:
        for r in read_entries(seg.read_bytes()).records():
            out.append(Record(offset, max(r.timestamp, 0), r.key, r.value))
            offset += 1 + offset % 3  # gaps, as compaction leaves them
    return out


RECORDS = fixture_records()


def write(records: list[Record], magic: int, codec: Compression, per_batch: int = 37) -> bytes:
    parts = []
    for i in range(0, len(records), per_batch):
        chunk = records[i : i + per_batch]
        if magic == 2:
            parts.append(v2.encode_batch(chunk, compression=codec, partition_leader_epoch=3))
        elif codec == Compression.NONE:
            parts.append(legacy.encode_messages(chunk, magic))
        else:
            parts.append(legacy.encode_wrapper(chunk, magic, codec))
    return b"".join(parts)


def cases() -> list[tuple[int, Compression]]:
    return [(m, c) for m in (0, 1, 2) for c in CODECS if not (c == Compression.ZSTD and m < 2)]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[tuple[int, Compression], Path]:
    folder = tmp_path_factory.mktemp("written")
    out = {}
    for magic, codec in cases():
        path = folder / f"m{magic}-{codec.label}" / f"{0:020d}.log"
        path.parent.mkdir()
        path.write_bytes(write(RECORDS, magic, codec))
        out[(magic, codec)] = path
    return out


def _digest(records: list[Record], timestamps: bool) -> str:
    d = LogDigest()
    from migrate.format.records import RecordColumns

    cols = RecordColumns.from_records(records)
    d.update(cols)
    return d.hexdigests()[1 if timestamps else 0]


@pytest.mark.oracle
def test_kafka_reads_every_magic_and_codec_we_write(written, oracle):
    summaries = oracle.summary(*written.values())
    assert len(summaries) == len(written)
    plain = _digest(RECORDS, timestamps=False)
    for (magic, codec), summary in zip(written, summaries):
        assert summary["valid"], (magic, codec, summary["errors"])
        assert summary["records"] == len(RECORDS)
        assert summary["sha256"] == plain, (magic, codec)
        assert summary["magics"] == {str(magic): summary["batches"]}
        assert set(summary["compressions"]) == {codec.label}
        if magic >= 1:
            assert summary["sha256_ts"] == _digest(RECORDS, timestamps=True), (magic, codec)


@pytest.mark.parametrize("case", cases(), ids=lambda c: f"m{c[0]}-{c[1].label}")
def test_kafka_python_reads_what_we_write(written, case):
    data = written[case].read_bytes()
    records = MemoryRecords(data)
    got = []
    while records.has_next():
        batch = records.next_batch()
        got += [(r.offset, r.timestamp if case[0] else -1, r.key, r.value) for r in batch]
    want = [(r.offset, r.timestamp if case[0] else -1, r.key, r.value) for r in RECORDS]
    assert got == want


def test_lz4_frames_carry_the_correct_header_checksum():
    data = legacy.encode_wrapper(RECORDS[:5], 1, Compression.LZ4)
    frame = data.index(b"\x04\x22\x4d\x18")
    assert data[frame : frame + 7] == bytes.fromhex("04224d18604082")


def test_kafka_magic0_lz4_frames_with_the_broken_checksum_still_read():
    seg = next(s for s in SOURCES if s.parent.name == "lz4-v0-0")
    data = seg.read_bytes()
    frame = data.index(b"\x04\x22\x4d\x18\x60\x40")
    assert data[frame + 6] == 0x1A  # KAFKA-3160: Kafka's magic-0 writer checksummed the magic too
    assert sum(1 for _ in read_entries(data).records()) > 0


def test_zstd_is_refused_below_magic_2():
    with pytest.raises(UnsupportedFormatError, match="zstd"):
        legacy.encode_wrapper(RECORDS[:3], 1, Compression.ZSTD)


def test_headers_are_refused_below_magic_2():
    with pytest.raises(UnsupportedFormatError, match="headers"):
        legacy.encode_messages([Record(0, 0, b"k", b"v", (("h", b"x"),))], 1)


def test_log_append_time_wrapper_reports_its_time_for_every_record():
    records = [Record(i, 1000 + i, b"k", b"v") for i in range(4)]
    data = legacy.encode_wrapper(records, 1, Compression.GZIP, TimestampType.LOG_APPEND_TIME, 99_000)
    got = list(read_entries(data).records())
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(99_000, TimestampType.LOG_APPEND_TIME)] * 4


@pytest.mark.parametrize("segment", SOURCES[:6], ids=fixture_id)
def test_rewriting_fixture_records_keeps_keys_values_and_nulls(segment):
    records = list(read_entries(segment.read_bytes()).records())
    data = v2.encode_batch(records, compression=Compression.LZ4)
    back = list(read_entries(data).records())
    assert [(r.offset, r.key, r.value) for r in back] == [(r.offset, r.key, r.value) for r in records]
    assert (
        hashlib.sha256(data).hexdigest()
        == hashlib.sha256(v2.encode_batch(records, compression=Compression.LZ4)).hexdigest()
    )
