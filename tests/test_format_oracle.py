"""Our writers, judged by Apache Kafka's own readers (kafka-clients 3.9.1, the oracle).

Every fixture segment's records are written again by our writers, in every magic and codec Kafka allows
(``legacy.encode_messages`` / ``encode_wrapper`` for magic 0 and 1, ``batch.encode_batch`` and
``batch.encode_single_record_batches`` for v2) and in three shapes: one entry per source entry (timestamp types,
v2 producer state, control and transactional flags and compacted last offsets carried over), all records in one
entry, and one uncompressed batch per record. All the files go to ONE ``oracle dump --summary`` and ONE ``oracle
dump`` call (a JVM start costs about a second). Kafka must find every batch and record valid, the same records
(``sha256``) and, where the target format keeps timestamps, the same timestamps (``sha256_ts``) as in the source,
and exactly the entries our own reader sees. test_format_kafka_python.py reads the same files with kafka-python.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURE_SEGMENTS, expected_lines, expected_summaries, fixture_id
from test_format_fixtures import our_dump, project_kafka_dump

from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest
from migrate.format.entries import iter_records, read_entries
from migrate.format.records import Compression, Record, RecordColumns, TimestampType

# one xdist worker: Kafka's readers run once over the rewritten fixtures
pytestmark = [pytest.mark.oracle, pytest.mark.xdist_group("format_oracle")]

CREATE, APPEND = TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME
LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
SUMMARIES = expected_summaries()
# every segment with records (the truncated-tail ones too: their complete entries are the valid part)
SOURCES = [s for s in FIXTURE_SEGMENTS if SUMMARIES[fixture_id(s)]["records"]]


@dataclass(frozen=True)
class Target:
    magic: int
    codec: Compression
    shape: str  # "entries" (one per source entry), "one" (all records in one entry), "single" (one batch per record)

    @property
    def name(self) -> str:
        return f"m{self.magic}-{self.codec.label}-{self.shape}"


TARGETS = (
    [Target(m, c, "entries") for m in (0, 1) for c in LEGACY_CODECS]
    + [Target(2, c, "entries") for c in Compression]
    + [Target(m, c, "one") for m in (0, 1) for c in LEGACY_CODECS[1:]]
    + [Target(2, c, "one") for c in Compression]
    + [Target(2, Compression.NONE, "single")]
)


@dataclass
class Copy:
    """A fixture segment rewritten by our writers, and what any reader must find in it."""

    path: Path
    source: Path
    target: Target
    records: list[Record]  # Kafka's view: offsets, effective timestamps, keys, values, headers
    entries: int = 0
    timestamp_types: Counter = field(default_factory=Counter)
    v2_sources: dict[int, dict] = field(default_factory=dict)  # written batch index -> source v2 batch line


def _write_entries(copy: Copy, items: list, kafka_batches: list[dict]) -> bytes:
    """One written entry per source entry (an uncompressed legacy target writes one message per record)."""
    t = copy.target
    out = []
    by_position = {b["position"]: b for b in kafka_batches}
    for item in items:
        rows = list(iter_records([item]))
        groups = [[r] for r in rows] if isinstance(item, legacy.LegacyRun) else [rows]
        for group in groups:
            tstype = group[0].timestamp_type
            lat = tstype == APPEND
            if t.magic == 0:
                tstype = TimestampType.NO_TIMESTAMP_TYPE
            elif tstype == TimestampType.NO_TIMESTAMP_TYPE:
                tstype = CREATE
            append_time = group[0].timestamp if lat else None
            if t.magic == 2:
                source = by_position[item.position] if isinstance(item, v2.V2Batch) else None
                if source is not None:
                    copy.v2_sources[copy.entries] = source
                out.append(
                    v2.encode_batch(
                        group,
                        base_offset=source["baseOffset"] if source else None,
                        last_offset=source["lastOffset"] if source else None,
                        partition_leader_epoch=source["partitionLeaderEpoch"] if source else -1,
                        compression=t.codec,
                        timestamp_type=tstype,
                        log_append_time=append_time,
                        carried=v2.CarriedHeader(
                            producer_id=source["producerId"] if source else -1,
                            producer_epoch=source["producerEpoch"] if source else -1,
                            base_sequence=source["baseSequence"] if source else -1,
                            is_transactional=source["isTransactional"] if source else False,
                            is_control=source["isControl"] if source else False,
                        ),
                    )
                )
                copy.entries += 1
                copy.timestamp_types[tstype.name] += 1
            elif t.codec == Compression.NONE:
                out.append(legacy.encode_messages(group, t.magic, tstype))
                copy.entries += len(group)
                copy.timestamp_types[tstype.name] += len(group)
            else:
                out.append(legacy.encode_wrapper(group, t.magic, t.codec, tstype, append_time))
                copy.entries += 1
                copy.timestamp_types[tstype.name] += 1
    return b"".join(out)


def write_copy(folder: Path, source: Path, target: Target) -> Copy | None:
    data = source.read_bytes()
    entries = read_entries(data)
    records = list(entries.records())
    if target.magic < 2 and any(r.headers for r in records):
        return None  # headers need v2
    if target.shape == "single" and any(r.headers for r in records):
        return None
    want = [r._replace(timestamp=-1) if target.magic == 0 else r for r in records]
    copy = Copy(folder / target.name / source.parent.name / source.name, source, target, want)
    if target.shape == "entries":
        kafka_batches = [x for x in expected_lines(source) if x["type"] == "batch"]
        raw = _write_entries(copy, entries.items, kafka_batches)
    elif target.shape == "single":
        types = np.concatenate([i.timestamp_types() for i in entries.items])
        raw, sizes = v2.encode_single_record_batches(RecordColumns.from_records(records), np.maximum(types, 0))
        copy.entries = len(sizes)
        copy.timestamp_types.update(TimestampType(int(max(x, 0))).name for x in types)
    else:
        # everything as CreateTime with the timestamps Kafka reported (an append time becomes a create time)
        if target.magic == 2:
            raw = v2.encode_batch(records, compression=target.codec)
        else:
            raw = legacy.encode_wrapper(records, target.magic, target.codec)
        copy.entries = 1
        copy.timestamp_types["NO_TIMESTAMP_TYPE" if target.magic == 0 else "CREATE_TIME"] = 1
    copy.path.parent.mkdir(parents=True, exist_ok=True)
    copy.path.write_bytes(raw)
    return copy


def write_copies(folder: Path) -> list[Copy]:
    copies = [write_copy(folder, s, t) for t in TARGETS for s in SOURCES]
    return [c for c in copies if c is not None]


@dataclass
class Edge:
    """A hand-made or seeded-random file: records Kafka must read back exactly (timestamps included)."""

    path: Path
    records: list[Record]


INT64_MAX = 2**63 - 1


def _random_records(rng: random.Random, magic: int, n: int) -> list[Record]:
    def payload() -> bytes | None:
        kind = rng.randrange(5)
        return [None, b"", rng.randbytes(rng.randrange(1, 20)), b"xy" * rng.randrange(1, 400), rng.randbytes(900)][kind]

    out, offset = [], rng.choice([0, rng.randrange(2**40)])
    for _ in range(n):
        ts = -1 if magic == 0 else rng.choice([-1, 0, rng.randrange(2**41), rng.randrange(2**62)])
        headers = ()
        if magic == 2:
            names = ["", "trace-id", "ünïcode-名前", "x" * 40]
            headers = tuple(
                (rng.choice(names), rng.choice([None, b"", rng.randbytes(8)])) for _ in range(rng.randrange(4))
            )
        out.append(Record(offset, ts, payload(), payload(), headers))
        offset += rng.choice([1, 1, 2, rng.randrange(1, 10_000)])
    return out


def write_edges(folder: Path) -> list[Edge]:
    folder.mkdir(parents=True, exist_ok=True)
    edges: list[Edge] = []

    def add(name: str, raw: bytes, records: list[Record]) -> None:
        path = folder / f"{name}.log"  # not <20 digits>.log: no segment base offset rules
        path.write_bytes(raw)
        edges.append(Edge(path, records))

    wrap = [Record(7, -1, b"a", b"b"), Record(8, INT64_MAX, b"c", None)]
    add("v2-timestamp-delta-wraps", v2.encode_batch(wrap), wrap)
    with_headers = [r._replace(headers=(("h", b""),)) for r in wrap]
    add("v2-timestamp-delta-wraps-headers", v2.encode_batch(with_headers, compression=Compression.ZSTD), with_headers)
    add("v1-wrapper-huge-timestamp", legacy.encode_wrapper(wrap, 1, Compression.SNAPPY), wrap)
    add("v2-empty-batch", v2.encode_batch([], base_offset=5, last_offset=9), [])
    far = [Record(2**62, 1, b"k", b"v"), Record(2**62 + 2**31 - 1, 2, None, b"")]
    add("v2-offset-delta-int32-max", v2.encode_batch(far, compression=Compression.LZ4), far)
    add("v1-wrapper-far-offsets", legacy.encode_wrapper(far, 1, Compression.GZIP), far)
    zero = [Record(0, 5, b"k", b"v")]
    add("v1-wrapper-at-offset-0", legacy.encode_wrapper(zero, 1, Compression.LZ4), zero)
    add("v0-wrapper-at-offset-0", legacy.encode_wrapper(zero, 0, Compression.LZ4), [zero[0]._replace(timestamp=-1)])
    at0 = [Record(3, 100, b"k", b"v"), Record(9, 50, None, None)]
    lat = v2.encode_batch(at0, timestamp_type=APPEND, log_append_time=0, compression=Compression.GZIP)
    add("v2-log-append-time-0", lat, [r._replace(timestamp=0) for r in at0])
    lat1 = legacy.encode_wrapper(at0, 1, Compression.GZIP, APPEND, 0)
    add("v1-log-append-time-0", lat1, [r._replace(timestamp=0) for r in at0])
    rng = random.Random(20240601)
    for i in range(60):
        magic = i % 3
        codec = rng.choice([c for c in Compression if magic == 2 or c != Compression.ZSTD])
        records = _random_records(rng, magic, rng.randrange(1, 30))
        tstype = rng.choice([CREATE, APPEND]) if magic else CREATE
        append_time = rng.randrange(2**42) if tstype == APPEND else None
        if magic == 2:
            raw = v2.encode_batch(records, compression=codec, timestamp_type=tstype, log_append_time=append_time)
        elif codec == Compression.NONE:
            raw, append_time = legacy.encode_messages(records, magic, tstype), None
        else:
            raw = legacy.encode_wrapper(records, magic, codec, tstype, append_time)
        want = records if append_time is None else [r._replace(timestamp=append_time) for r in records]
        add(f"random-{i:02d}-m{magic}-{codec.label}", raw, want)
    return edges


_SESSION_COPIES: list[Copy] = []


def session_copies(tmp_path_factory: pytest.TempPathFactory) -> list[Copy]:
    """The copies, written once per test session (test_format_kafka_python.py reads the same files)."""
    if not _SESSION_COPIES:
        _SESSION_COPIES.extend(write_copies(tmp_path_factory.mktemp("written")))
    return _SESSION_COPIES


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> list[Copy]:
    out = session_copies(tmp_path_factory)
    assert len(out) > 500
    return out


@pytest.fixture(scope="module")
def edges(tmp_path_factory) -> list[Edge]:
    return write_edges(tmp_path_factory.mktemp("edges"))


@pytest.fixture(scope="module")
def kafka_summaries(copies, edges, oracle) -> dict[Path, dict]:
    """ONE `oracle dump --summary` over every file written here."""
    paths = [c.path for c in copies] + [e.path for e in edges]
    lines = oracle.summary(*paths)
    assert len(lines) == len(paths)
    return {Path(line["path"]): line for line in lines}


@pytest.fixture(scope="module")
def kafka_dumps(copies, edges, oracle) -> dict[Path, list[dict]]:
    """ONE `oracle dump` over every file written here: path -> its batch and record lines."""
    paths = [c.path for c in copies] + [e.path for e in edges]
    out: dict[Path, list[dict]] = {}
    current = None
    for line in oracle.dump(*paths):
        if line["type"] == "file":
            current = out.setdefault(Path(line["path"]), [])
        else:
            current.append(line)
    assert len(out) == len(paths)
    return out


def test_every_target_is_written():
    assert len(TARGETS) == 25
    assert {(t.magic, t.codec) for t in TARGETS} == {
        (m, c) for m in (0, 1, 2) for c in Compression if not (m < 2 and c == Compression.ZSTD)
    }


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_kafka_finds_the_source_records_in_what_we_wrote(target, copies, kafka_summaries):
    """sha256 (and sha256_ts when the target keeps timestamps) of Kafka's reading equal the source's."""
    mine = [c for c in copies if c.target == target]
    with_headers = [s for s in SOURCES if SUMMARIES[fixture_id(s)]["headers"]]
    assert len(with_headers) >= 2
    assert len(mine) == len(SOURCES) - (len(with_headers) if target.magic < 2 or target.shape == "single" else 0)
    for c in mine:
        got = kafka_summaries[c.path]
        want = SUMMARIES[fixture_id(c.source)]
        where = f"{target.name} {fixture_id(c.source)}: {got['errors']}"
        assert got["valid"] and got["invalidBatches"] == 0 and got["invalidRecords"] == 0, where
        assert got["trailingBytes"] == 0 and got["offsetsMonotonic"], where
        assert got["records"] == len(c.records) == want["records"], where
        assert got["sha256"] == want["sha256"], where
        if target.magic > 0:
            assert got["sha256_ts"] == want["sha256_ts"], where
        for key in ("nullKeys", "nullValues", "emptyValues", "headers"):
            assert got[key] == want[key], (where, key)
        assert got["batches"] == c.entries, where
        assert got["magics"] == {str(target.magic): c.entries}, where
        assert got["compressions"] == {target.codec.label: c.entries}, where
        assert got["timestampTypes"] == dict(c.timestamp_types), where


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_kafka_sees_every_entry_as_our_reader_does(target, copies, kafka_dumps):
    """Line for line: positions, sizes, CRCs, offsets, timestamps and types, producer fields, and every record."""
    for c in (c for c in copies if c.target == target):
        data = c.path.read_bytes()
        ours = our_dump(read_entries(data))
        assert ours == project_kafka_dump(kafka_dumps[c.path]), f"{target.name} {fixture_id(c.source)}"
        got = list(read_entries(data).records())
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in c.records
        ]


V2_HEADER_FIELDS = ("baseOffset", "lastOffset", "timestampType", "maxTimestamp", "records", "producerId")
V2_HEADER_FIELDS += ("producerEpoch", "baseSequence", "isTransactional", "isControl", "partitionLeaderEpoch")


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.label)
def test_v2_batch_header_fields_survive_a_rewrite(codec, copies, kafka_dumps):
    """Idempotent and transactional producer state, the COMMIT marker, LogAppendTime, leader epochs and compacted
    batches whose last offset lies beyond their records: Kafka reads back what the source batch had."""
    checked = Counter()
    for c in copies:
        if c.target != Target(2, codec, "entries") or not c.v2_sources:
            continue
        batches = [x for x in kafka_dumps[c.path] if x["type"] == "batch"]
        for index, source in c.v2_sources.items():
            assert {k: batches[index][k] for k in V2_HEADER_FIELDS} == {k: source[k] for k in V2_HEADER_FIELDS}
            checked["batches"] += 1
            checked["transactional"] += source["isTransactional"]
            checked["control"] += source["isControl"]
            checked["idempotent"] += source["producerId"] >= 0 and not source["isTransactional"]
            checked["log append time"] += source["timestampType"] == "LOG_APPEND_TIME"
            checked["last offset beyond records"] += source["lastOffset"] > source["baseOffset"] + source["records"] - 1
    assert checked["batches"] >= 15 and all(checked[k] for k in list(checked)), checked
    assert set(checked) == {
        "batches",
        "transactional",
        "control",
        "idempotent",
        "log append time",
        "last offset beyond records",
    }


def test_our_lz4_frames_in_the_written_files_carry_0x82(copies):
    """Kafka's magic-0 writer put 0x1a; ours always puts the correct header checksum 0x82 (Kafka reads both)."""
    frames = Counter()
    for c in copies:
        if c.target.codec != Compression.LZ4:
            continue
        data = c.path.read_bytes()
        for item in read_entries(data).items:
            if isinstance(item, v2.V2Batch):
                at = item.position + v2.RECORD_BATCH_OVERHEAD
            elif isinstance(item, legacy.LegacyWrapper):
                at = item.position + legacy.KEY_LENGTH_OFFSET[item.magic] + 8
            else:
                continue
            frames[(c.target.magic, data[at : at + 7].hex())] += 1
    assert set(frames) == {(m, "04224d18604082") for m in (0, 1, 2)}, frames


def test_kafka_compare_of_a_log_append_time_partition(copies, oracle, tmp_path):
    """lz4-v1-1 (LogAppendTime wrappers, one stamped in place by a broker) rewritten as v2: Kafka's logical
    comparison, timestamps included, finds no difference."""
    partition = next(s.parent for s in SOURCES if s.parent.name == "lz4-v1-1")
    ours = next(c.path.parent for c in copies if c.source.parent == partition and c.target.name == "m2-lz4-entries")
    (result,) = oracle.compare(partition, ours, timestamps=True)
    assert result["equal"] and result["aValid"] and result["bValid"], json.dumps(result)
    assert result["records"] == [SUMMARIES["lz4-v1-1"]["records"]] * 2


def test_kafka_reads_edge_cases_and_random_records_exactly(edges, kafka_summaries, kafka_dumps):
    """Timestamp deltas that wrap (Kafka computes them in Java longs, as we do), an empty batch, offset deltas of
    2^31-1, wrappers at offset 0, LogAppendTime 0, and 60 seeded random files: null vs empty, binary and unicode
    header names, gaps, -1 and huge timestamps."""
    assert len(edges) == 70
    for e in edges:
        got = kafka_summaries[e.path]
        digest = LogDigest()
        digest.update(RecordColumns.from_records(e.records))
        assert got["valid"] and got["invalidRecords"] == 0, (e.path.name, got["errors"])
        assert got["records"] == len(e.records), e.path.name
        assert (got["sha256"], got["sha256_ts"]) == digest.hexdigests(), e.path.name
        assert our_dump(read_entries(e.path.read_bytes())) == project_kafka_dump(kafka_dumps[e.path]), e.path.name
