"""Every fixture segment (bytes written by Apache Kafka's own builders, or by a real 0.8 broker) reads to exactly
Kafka's view of it: every entry, every record, the partial tail, the summary counters and the content digests.

Kafka's view is ``fixtures/expected`` (``oracle dump`` / ``dump --summary`` output). ``our_dump`` renders what
``read_entries`` makes of a buffer in the same JSON shape, so the comparison is line for line; the oracle and
kafka-python tests reuse it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import lz4.frame
import numpy as np
import pytest
from conftest import FIXTURE_SEGMENTS, REAL_BROKER, expected_lines, expected_summaries, fixture_id

from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import Entries, iter_records, read_entries, walk_entries
from migrate.format.records import Record, TimestampType

SUMMARIES = expected_summaries()
REAL_BROKER_SEGMENTS = sorted((REAL_BROKER / "logdir").glob("*/*.log"))
REAL_BROKER_SUMMARIES = {
    d["path"]: d for d in map(json.loads, (REAL_BROKER / "expected" / "summary.jsonl").read_text().splitlines())
}
PARTITIONS = sorted({s.parent for s in FIXTURE_SEGMENTS})
TRUNCATED = {
    # README: 9 complete magic 0 messages, then the first 60 bytes of a 69-byte one
    "truncated-tail-0/00000000000000000015.log": (9, 9, 621, 60),
    # README: 2 complete magic 1 LZ4 wrappers, then 2163 bytes of one
    "truncated-tail-1/00000000000000000015.log": (2, 10, 751, 2163),
}

RECORD_KEYS = ("offset", "timestamp", "keyNull", "keySize", "key_sha256", "valueNull", "valueSize", "value_sha256")
LEGACY_BATCH_KEYS = (
    "position",
    "baseOffset",
    "lastOffset",
    "magic",
    "compression",
    "timestampType",
    "maxTimestamp",
    "sizeInBytes",
    "crc",
    "records",
)
V2_BATCH_KEYS = (
    *LEGACY_BATCH_KEYS,
    "producerId",
    "producerEpoch",
    "baseSequence",
    "isTransactional",
    "isControl",
    "partitionLeaderEpoch",
)
SUMMARY_KEYS = (
    "batches",
    "records",
    "nullKeys",
    "nullValues",
    "emptyValues",
    "headers",
    "trailingBytes",
    "firstOffset",
    "lastOffset",
    "magics",
    "compressions",
    "timestampTypes",
    "valid",
    "sha256",
    "sha256_ts",
)


def sha(b: bytes | None) -> str | None:
    return None if b is None else hashlib.sha256(b).hexdigest()


def record_line(r: Record) -> dict:
    """A record as Kafka's dump prints it, plus the batch it was reported in (position and timestamp type)."""
    return {
        "type": "record",
        "offset": r.offset,
        "timestamp": r.timestamp,
        "keyNull": r.key is None,
        "keySize": -1 if r.key is None else len(r.key),
        "key_sha256": sha(r.key),
        "valueNull": r.value is None,
        "valueSize": -1 if r.value is None else len(r.value),
        "value_sha256": sha(r.value),
        "headers": [[name, sha(value)] for name, value in r.headers],
        "batchPosition": r.batch_position,
        "batchTimestampType": r.timestamp_type.name,
    }


def entry_lines(item) -> list[dict]:
    """One ``batch`` line per log entry (a LegacyRun holds one per message), each followed by its records."""
    out: list[dict] = []
    if isinstance(item, legacy.LegacyRun):
        types = item.timestamp_types()
        rows = list(iter_records([item]))
        for j, r in enumerate(rows):
            out.append(
                {
                    "type": "batch",
                    "position": int(item.positions[j]),
                    "baseOffset": r.offset,
                    "lastOffset": r.offset,
                    "magic": int(item.magics[j]),
                    "compression": "none",
                    "timestampType": TimestampType(int(types[j])).name,
                    "maxTimestamp": r.timestamp,
                    "sizeInBytes": int(item.sizes[j]),
                    "crc": int(item.crcs[j]),
                    "records": 1,
                }
            )
            out.append(record_line(r))
        return out
    if isinstance(item, legacy.LegacyWrapper):
        batch = {
            "type": "batch",
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
    else:
        batch = {
            "type": "batch",
            "position": item.position,
            "baseOffset": item.base_offset,
            "lastOffset": item.last_offset,
            "magic": v2.MAGIC,
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
    out.append(batch)
    out.extend(record_line(r) for r in iter_records([item]))
    return out


def our_dump(entries: Entries) -> list[dict]:
    """What read_entries made of a buffer, in the shape of ``oracle dump`` lines."""
    lines = [line for item in entries.items for line in entry_lines(item)]
    if entries.tail is not None:
        lines.append({"type": "trailing", "position": entries.tail.position, "bytes": entries.tail.size})
    return lines


def project_kafka_dump(lines: list[dict]) -> list[dict]:
    """Kafka's dump lines cut to what our model holds; records also get the position and type of their batch."""
    out = []
    batch = None
    for x in lines:
        if x["type"] == "batch":
            assert x["valid"] and x["error"] is None, x
            batch = x
            keys = V2_BATCH_KEYS if x["magic"] == v2.MAGIC else LEGACY_BATCH_KEYS
            out.append({"type": "batch", **{k: x[k] for k in keys}})
        elif x["type"] == "record":
            assert x["valid"] and batch is not None, x
            out.append(
                {
                    "type": "record",
                    **{k: x[k] for k in RECORD_KEYS},
                    "headers": x["headers"],
                    "batchPosition": batch["position"],
                    "batchTimestampType": batch["timestampType"],
                }
            )
        elif x["type"] == "trailing":
            out.append({"type": "trailing", "position": x["position"], "bytes": x["bytes"]})
        else:
            raise AssertionError(f"unexpected dump line {x}")
    return out


def our_summary(segments: list[Path]) -> dict:
    """The counters of ``oracle dump --summary`` for a list of segment files read in order."""
    digest = LogDigest()
    s = Counter()
    magics: Counter = Counter()
    compressions: Counter = Counter()
    types: Counter = Counter()
    first = last = None
    valid = True
    for seg in segments:
        entries = read_entries(seg.read_bytes())
        for line in our_dump(entries):
            if line["type"] == "batch":
                s["batches"] += 1
                magics[str(line["magic"])] += 1
                compressions[line["compression"]] += 1
                types[line["timestampType"]] += 1
                last = line["lastOffset"]
            elif line["type"] == "record":
                s["records"] += 1
                s["nullKeys"] += line["keyNull"]
                s["nullValues"] += line["valueNull"]
                s["emptyValues"] += line["valueSize"] == 0
                s["headers"] += len(line["headers"])
                first = line["offset"] if first is None else first
            else:
                s["trailingBytes"] += line["bytes"]
                valid = False
        for item in entries.items:
            digest.update(item.records)
    plain, timed = digest.hexdigests()
    assert digest.records == s["records"]
    return {
        **{k: s[k] for k in ("batches", "records", "nullKeys", "nullValues", "emptyValues", "headers")},
        "trailingBytes": s["trailingBytes"],
        "firstOffset": first,
        "lastOffset": last,
        "magics": dict(magics),
        "compressions": dict(compressions),
        "timestampTypes": dict(types),
        "valid": valid,
        "sha256": plain,
        "sha256_ts": timed,
    }


def kafka_summary(line: dict) -> dict:
    assert line["invalidBatches"] == 0 and line["invalidRecords"] == 0 and line["offsetsMonotonic"]
    return {k: line[k] for k in SUMMARY_KEYS}


# --- every record and every entry, line for line -----------------------------------------------------------


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_segment_reads_to_kafkas_dump(segment):
    """Entries (position, offsets, magic, codec, timestamp type, max timestamp, size, CRC, count, v2 producer
    fields) and the records inside each (offset, timestamp, null flags, sizes, sha256s, headers), in order."""
    data = segment.read_bytes()
    want = project_kafka_dump(expected_lines(segment))
    got = our_dump(read_entries(data))
    assert len(got) == len(want)
    assert got == want


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_walk_finds_kafkas_entries(segment):
    data = segment.read_bytes()
    batches = [x for x in expected_lines(segment) if x["type"] == "batch"]
    trailing = [x for x in expected_lines(segment) if x["type"] == "trailing"]
    walk = walk_entries(data)
    assert walk.positions.tolist() == [b["position"] for b in batches]
    assert walk.sizes.tolist() == [b["sizeInBytes"] for b in batches]
    assert walk.magics.tolist() == [b["magic"] for b in batches]
    assert walk.consumed == (trailing[0]["position"] if trailing else len(data))


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_tail_is_where_kafka_stops(segment):
    data = segment.read_bytes()
    trailing = [x for x in expected_lines(segment) if x["type"] == "trailing"]
    entries = read_entries(data)
    if trailing:
        assert entries.tail is not None
        assert (entries.tail.position, entries.tail.size) == (trailing[0]["position"], trailing[0]["bytes"])
        assert entries.tail.position + entries.tail.size == len(data)
        assert entries.consumed == entries.tail.position
    else:
        assert entries.tail is None
        assert entries.consumed == len(data)
    # streaming (not the end of the file): no tail, reading just stops where the complete entries end
    streaming = read_entries(data, final=False)
    assert streaming.tail is None and streaming.consumed == entries.consumed


@pytest.mark.parametrize("name", sorted(TRUNCATED))
def test_truncated_tail_fixtures(name):
    entries_n, records_n, position, size = TRUNCATED[name]
    segment = next(s for s in FIXTURE_SEGMENTS if fixture_id(s) == name)
    data = segment.read_bytes()
    entries = read_entries(data)
    assert sum(len(i) if isinstance(i, legacy.LegacyRun) else 1 for i in entries.items) == entries_n
    assert len(list(entries.records())) == records_n
    assert (entries.tail.position, entries.tail.size) == (position, size)
    # the complete entries alone read the same, without a tail
    head = read_entries(data[:position])
    assert head.tail is None and list(head.records()) == list(entries.records())


@pytest.mark.parametrize("segment", [s for s in FIXTURE_SEGMENTS if s.stat().st_size], ids=fixture_id)
def test_shallow_read_has_the_same_entries(segment):
    data = segment.read_bytes()
    deep = read_entries(data)
    shallow = read_entries(data, deep=False)
    assert len(shallow.items) == len(deep.items)
    for a, b in zip(shallow.items, deep.items):
        assert type(a) is type(b)
        if isinstance(a, v2.V2Batch):
            assert a.records is None
            assert (a.position, a.size, a.base_offset, a.last_offset, a.crc, a.records_count) == (
                b.position,
                b.size,
                b.base_offset,
                b.last_offset,
                b.crc,
                b.records_count,
            )
    if any(isinstance(i, v2.V2Batch) for i in shallow.items):
        with pytest.raises(ValueError, match="deep=False"):
            list(shallow.records())


# --- summary counters and digests ---------------------------------------------------------------------------


@pytest.mark.parametrize("segment", FIXTURE_SEGMENTS, ids=fixture_id)
def test_segment_digest_and_counters_match_kafkas_summary(segment):
    want = kafka_summary(SUMMARIES[fixture_id(segment)])
    got = our_summary([segment])
    assert (got["sha256"], got["sha256_ts"]) == (want["sha256"], want["sha256_ts"])
    assert got == want


@pytest.mark.parametrize("partition", PARTITIONS, ids=lambda p: p.name)
def test_partition_digest_and_counters_match_kafkas_summary(partition):
    """One digest fed segment after segment equals Kafka's digest of the whole partition."""
    segments = sorted(partition.glob("*.log"))
    want = SUMMARIES[partition.name]
    assert want["files"] == len(segments)
    assert our_summary(segments) == kafka_summary(want)


@pytest.mark.parametrize("segment", REAL_BROKER_SEGMENTS, ids=fixture_id)
def test_real_0_8_broker_segment_matches_kafkas_summary(segment):
    want = REAL_BROKER_SUMMARIES[segment.parent.name]
    assert want["files"] == 1 and want["bytes"] == segment.stat().st_size
    got = our_summary([segment])
    assert (got["sha256"], got["sha256_ts"]) == (want["sha256"], want["sha256_ts"])
    assert got == kafka_summary(want)


def test_every_fixture_file_is_covered():
    assert len(FIXTURE_SEGMENTS) == 42 and len(REAL_BROKER_SEGMENTS) == 4
    assert {fixture_id(s) for s in FIXTURE_SEGMENTS} <= set(SUMMARIES)
    assert {p.name for p in PARTITIONS} <= set(SUMMARIES)


# --- the facts the fixtures README spells out, checked directly ---------------------------------------------


def _segment(name: str) -> Path:
    return next(s for s in FIXTURE_SEGMENTS if fixture_id(s) == name)


def _lz4_frame_bytes(segment: Path) -> list[tuple[int, bytes]]:
    """(magic, first 7 bytes of the value) of every LZ4 legacy wrapper and v2 batch in a segment."""
    data = segment.read_bytes()
    out = []
    for item in read_entries(data).items:
        if isinstance(item, legacy.LegacyWrapper) and item.compression.label == "lz4":
            at = item.position + legacy.KEY_LENGTH_OFFSET[item.magic] + 8  # null key, then the value length
            out.append((item.magic, data[at : at + 7]))
        elif isinstance(item, v2.V2Batch) and item.compression.label == "lz4":
            at = item.position + v2.RECORD_BATCH_OVERHEAD
            out.append((2, data[at : at + 7]))
    return out


@pytest.mark.parametrize("name", ["lz4-v0-0/00000000000000000000.log", "lz4-v0-0/00000000000000000114.log"])
def test_kafkas_magic0_lz4_frames_carry_the_wrong_checksum_and_still_read(name):
    frames = _lz4_frame_bytes(_segment(name))
    assert frames and {f for _, f in frames} == {bytes.fromhex("04224d1860401a")}
    data = _segment(name).read_bytes()
    item = next(i for i in read_entries(data).items if isinstance(i, legacy.LegacyWrapper))
    value_at = item.position + legacy.KEY_LENGTH_OFFSET[0] + 8
    # a standard frame decoder refuses Kafka's magic-0 frame (KAFKA-3160); ours reads it
    frame = data[value_at : item.position + item.size]
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(frame)
    # with the checksum byte corrected, the standard decoder gets what ours gets from Kafka's bytes
    assert codecs.decompress(3, frame, 0) == lz4.frame.decompress(frame[:6] + b"\x82" + frame[7:])
    assert sum(1 for _ in read_entries(data).records()) == SUMMARIES[name]["records"]


@pytest.mark.parametrize(
    "name",
    ["lz4-v1-0/00000000000000000000.log", "lz4-v1-1/00000000000000000000.log", "already-v2-0/00000000000000000000.log"],
)
def test_kafkas_magic1_and_v2_lz4_frames_carry_the_correct_checksum(name):
    frames = _lz4_frame_bytes(_segment(name))
    assert frames and {f for _, f in frames} == {bytes.fromhex("04224d18604082")}


def test_log_append_time_wrapper_stamped_in_place_reports_the_wrapper_time():
    """lz4-v1-1: a broker stamped only the wrapper; its inner messages keep producer CreateTime timestamps."""
    data = _segment("lz4-v1-1/00000000000000000000.log").read_bytes()
    wrappers = [i for i in read_entries(data).items if isinstance(i, legacy.LegacyWrapper)]
    assert wrappers and all(w.timestamp_type.name == "LOG_APPEND_TIME" for w in wrappers)
    in_place = 0
    for w in wrappers:
        assert set(w.records.timestamps.tolist()) == {w.timestamp}
        inner = codecs.decompress(w.compression, data[w.position + 34 : w.position + w.size], 1)
        inner_attributes = inner[17]
        in_place += not inner_attributes & legacy.TIMESTAMP_TYPE_BIT
    assert 0 < in_place < len(wrappers)  # both real-world shapes are present


def test_magic1_inner_offsets_are_relative_and_magic0_absolute():
    for name, magic in [("lz4-v1-0/00000000000000000097.log", 1), ("gzip-v0-0/00000000000000000092.log", 0)]:
        data = _segment(name).read_bytes()
        w = next(i for i in read_entries(data).items if isinstance(i, legacy.LegacyWrapper))
        inner = codecs.decompress(w.compression, data[w.position + 26 + 8 * magic : w.position + w.size], magic)
        first_inner_offset = int.from_bytes(inner[:8], "big", signed=True)
        assert w.offset > 0 and len(w.records) > 1
        assert first_inner_offset == (0 if magic == 1 else int(w.records.offsets[0]))


def test_compacted_wrappers_keep_their_offset_gaps():
    data = _segment("compacted-v0-0/00000000000000000100.log").read_bytes()
    entries = read_entries(data)
    offsets = np.array([r.offset for r in entries.records()])
    assert offsets[0] == 104 and (np.diff(offsets) > 1).any()
    for w in (i for i in entries.items if isinstance(i, legacy.LegacyWrapper)):
        assert w.offset == int(w.records.offsets[-1])


def test_null_and_empty_keys_and_values_stay_distinct():
    records = [
        r
        for s in FIXTURE_SEGMENTS
        if s.parent.name.startswith("plain-v0")
        for r in read_entries(s.read_bytes()).records()
    ]
    kinds = {(r.key is None, r.key == b"", r.value is None, r.value == b"") for r in records}
    assert (True, False, False, False) in kinds  # null key
    assert (False, True, False, False) in kinds  # empty key
    assert any(k[2] for k in kinds) and any(k[3] for k in kinds)  # tombstone and empty value


def test_v2_transactional_batch_and_its_commit_marker():
    data = _segment("already-v2-0/00000000000000000000.log").read_bytes()
    batches = read_entries(data).items
    txn = [b for b in batches if b.is_transactional and not b.is_control]
    control = [b for b in batches if b.is_control]
    assert len(txn) == 1 and len(control) == 1
    assert (control[0].producer_id, control[0].producer_epoch) == (txn[0].producer_id, txn[0].producer_epoch)
    assert control[0].base_offset == txn[0].last_offset + 1
    marker = control[0].records
    # control record key: version int16 0, type int16 1 = COMMIT
    assert len(marker) == 1 and marker.key(0) == b"\x00\x00\x00\x01"
