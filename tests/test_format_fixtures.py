"""Every fixture segment (bytes written by Apache Kafka's own builders) reads to exactly Kafka's view of it."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import FIXTURE_SEGMENTS, REAL_BROKER, expected_lines, expected_summaries, fixture_id

from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import read_entries

SUMMARIES = expected_summaries()


def _sha(b: bytes | None) -> str | None:
    return None if b is None else hashlib.sha256(b).hexdigest()


def _batch_view(item) -> list[dict]:
    """Our view of each log entry, in the keys of Kafka's dump."""
    if isinstance(item, legacy.LegacyRun):
        types = item.timestamp_types()
        names = {-1: "NO_TIMESTAMP_TYPE", 0: "CREATE_TIME", 1: "LOG_APPEND_TIME"}
        return [
            {
                "position": int(item.positions[j]),
                "baseOffset": int(item.records.offsets[j]),
                "lastOffset": int(item.records.offsets[j]),
                "magic": int(item.magics[j]),
                "compression": "none",
                "timestampType": names[int(types[j])],
                "maxTimestamp": int(item.records.timestamps[j]),
                "sizeInBytes": int(item.sizes[j]),
                "crc": int(item.crcs[j]),
                "records": 1,
            }
            for j in range(len(item))
        ]
    if isinstance(item, legacy.LegacyWrapper):
        return [
            {
                "position": item.position,
                "baseOffset": int(item.records.offsets[0]),
                "lastOffset": item.offset,
                "magic": item.magic,
                "compression": item.compression.label,
                "timestampType": item.timestamp_type.name,
                "maxTimestamp": item.timestamp,
                "sizeInBytes": item.size,
                "crc": item.crc,
                "records": len(item.records),
            }
        ]
    return [
        {
            "position": item.position,
            "baseOffset": item.base_offset,
            "lastOffset": item.last_offset,
            "magic": 2,
            "compression": item.compression.label,
            "timestampType": item.timestamp_type.name,
            "maxTimestamp": item.max_timestamp,
            "sizeInBytes": item.size,
            "crc": item.crc,
            "records": item.records_count,
            "producerId": item.producer_id,
            "producerEpoch": item.producer_epoch,
            "baseSequence": item.base_sequence,
            "isTransactional": item.is_transactional,
            "isControl": item.is_control,
            "partitionLeaderEpoch": item.partition_leader_epoch,
        }
    ]


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_records_match_kafkas_view(segment):
    expected = expected_lines(segment)
    entries = read_entries(segment.read_bytes())
    got = [
        {
            "offset": r.offset,
            "timestamp": r.timestamp,
            "keyNull": r.key is None,
            "keySize": -1 if r.key is None else len(r.key),
            "key_sha256": _sha(r.key),
            "valueNull": r.value is None,
            "valueSize": -1 if r.value is None else len(r.value),
            "value_sha256": _sha(r.value),
            "headers": [[k, _sha(v)] for k, v in r.headers],
        }
        for r in entries.records()
    ]
    want = [{k: x[k] for k in got[0]} for x in expected if x["type"] == "record"] if got else []
    assert got == want
    assert len(got) == sum(1 for x in expected if x["type"] == "record")


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_batches_match_kafkas_view(segment):
    expected = [x for x in expected_lines(segment) if x["type"] == "batch"]
    got = [b for item in read_entries(segment.read_bytes()).items for b in _batch_view(item)]
    assert len(got) == len(expected)
    for g, x in zip(got, expected):
        assert g == {k: x[k] for k in g}


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_truncated_tail_is_reported_where_kafka_stops(segment):
    trailing = [x for x in expected_lines(segment) if x["type"] == "trailing"]
    tail = read_entries(segment.read_bytes()).tail
    if trailing:
        assert tail is not None and (tail.position, tail.size) == (trailing[0]["position"], trailing[0]["bytes"])
    else:
        assert tail is None


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_digest_matches_kafkas_summary(segment):
    digest = LogDigest()
    for item in read_entries(segment.read_bytes()).items:
        digest.update(item.records)
    want = SUMMARIES[fixture_id(segment)]
    assert digest.hexdigests() == (want["sha256"], want["sha256_ts"])
    assert digest.records == want["records"] - want["invalidRecords"]


def test_segments_written_by_a_real_0_8_broker():
    summaries = {
        d["path"]: d for d in map(json.loads, (REAL_BROKER / "expected" / "summary.jsonl").read_text().splitlines())
    }
    for part in sorted((REAL_BROKER / "logdir").iterdir()):
        digest = LogDigest()
        for log in sorted(part.glob("*.log")):
            for item in read_entries(log.read_bytes()).items:
                digest.update(item.records)
        want = summaries[part.name]
        assert digest.records == want["records"] and digest.hexdigests()[0] == want["sha256"], part.name


def test_v2_batch_fields_of_a_transactional_fixture():
    seg = next(s for s in FIXTURE_SEGMENTS if fixture_id(s) == "already-v2-0/00000000000000000000.log")
    batches = [i for i in read_entries(seg.read_bytes()).items if isinstance(i, v2.V2Batch)]
    assert any(b.is_transactional for b in batches)
    control = [b for b in batches if b.is_control]
    assert len(control) == 1 and control[0].records_count == 1
