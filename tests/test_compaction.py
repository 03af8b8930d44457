"""Compaction during migration (KIP-280 strategies, KIP-87 deletes): the rules on generated partitions, the
conversion that drops the losers (judged by Kafka's own readers), and plan -> execute -> verify -> rollback."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from compaction_layout import Entry, Rec, Segment, write_partition
from conftest import Oracle, have_java, run_cli
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, make_plan, snapshot

from migrate import pipeline
from migrate.compaction.facts import SegmentSource
from migrate.compaction.pass_one import pass_one
from migrate.compaction.reference import expected_records, reference_survivors
from migrate.compaction.rules import CompactionRefusedError, CompactionRule, Settings
from migrate.engines import SerialEngine
from migrate.format.records import Compression
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import CompactionStrategy, ConvertOptions, TimestampPolicy, load_plan_json
from migrate.model.run_state import Outcome, PartitionState, SegmentTask
from migrate.planning.plan import PlanRefusedError, build_plan
from migrate.planning.request import PlanRequest
from migrate.run.partition.places import PartitionPlaces
from migrate.run.workspace import work_dir
from migrate.segment.convert import convert_segment
from migrate.segment.verify import verify_segment
from migrate.stages.compact import compact_partition, record_path, survivors_path
from migrate.units import parse_duration_ms, parse_memory_bytes

OFFSET, TIMESTAMP, HEADER = CompactionStrategy.OFFSET, CompactionStrategy.TIMESTAMP, CompactionStrategy.HEADER
MTIME = 1_600_000_000_000
T = 1_700_000_000_000  # a v1/v2 producer timestamp


def version(n: int) -> tuple[tuple[str, bytes], ...]:
    return (("version", n.to_bytes(8, "big", signed=True)),)


def sources_of(directory: Path, segments: list[Segment]) -> list[SegmentSource]:
    return [SegmentSource(str(directory / f"{s.base_offset:020d}.log"), s.base_offset, s.mtime_ms) for s in segments]


@pytest.fixture
def kafka():
    """Kafka's own readers when Java is here; without it the outputs are judged by our reader alone."""
    return Oracle() if have_java() else None


def survivors(
    tmp_path: Path,
    segments: list[Segment],
    strategy: CompactionStrategy,
    header: str = "",
    policy: TimestampPolicy = TimestampPolicy.MTIME,
    horizon: int | None = None,
    *,
    kafka: Oracle | None,
) -> list[int]:
    """Both implementations on the partition; they must agree, and their answer is returned. The partition is then
    converted with those survivors: each output verifies record by record, Kafka reads every batch of it as valid,
    and the records it holds are the survivors at their offsets."""
    directory = tmp_path / "topic-0"
    write_partition(directory, segments)
    sources = sources_of(directory, segments)
    fast = pass_one(sources, Settings(strategy, header, policy, horizon), "topic-0", merge_at=1)
    simple = reference_survivors(sources, strategy, header, policy, horizon)
    assert fast.offsets.tolist() == simple.survivors
    np.save(tmp_path / "survivors.npy", fast.offsets)
    options = ConvertOptions(timestamps=policy)
    written: list[Path] = []
    for src, seg in zip(sources, segments):
        task = SegmentTask(
            src.path, str(tmp_path / "out"), seg.base_offset, options, survivors=str(tmp_path / "survivors.npy")
        )
        result = convert_segment(task)
        expected = list(expected_records(src.path, fast.offsets, seg.mtime_ms, policy))
        if result.status.value == "unchanged":
            assert result.records_dropped == 0 and len(expected) == result.records
            written.append(Path(src.path))
            continue
        check = verify_segment(result, options, expected=expected)
        assert check.ok, check.problems
        written.append(Path(result.outputs[FileKind.LOG]))
    if kafka is not None:
        dump = kafka.dump(*written)
        assert all(line["valid"] for line in dump if line["type"] in ("batch", "record")), dump
        assert [line["offset"] for line in dump if line["type"] == "record"] == simple.survivors
    return simple.survivors


def one_segment(*entries: Entry, mtime: int = MTIME) -> list[Segment]:
    return [Segment(entries[0].records[0].offset, mtime, list(entries))]


# --- the KIP's rules --------------------------------------------------------------------------------------------

# KIP-280's example: producer 1 sends <K1, V1> and producer 2 then <K1, V2>; the broker receives V2 first. The
# versions (header) and timestamps say V2 is the newer; the offsets say V1.
KIP_EXAMPLE = (
    Rec(0, b"K1", b"V2", T + 2000, version(2)),
    Rec(1, b"K1", b"V1", T + 1000, version(1)),
    Rec(2, b"K2", b"other", T + 1500, version(1)),
)


@pytest.mark.parametrize(
    "magic, codec",
    [(1, Compression.NONE), (1, Compression.GZIP), (2, Compression.NONE), (2, Compression.LZ4)],
)
def test_the_kips_example_two_producers_arriving_in_the_other_order(tmp_path, kafka, magic, codec):
    segments = one_segment(Entry(magic, KIP_EXAMPLE, codec))
    assert survivors(tmp_path / "o", segments, OFFSET, kafka=kafka) == [1, 2]  # offset keeps V1, the stale one
    assert survivors(tmp_path / "t", segments, TIMESTAMP, kafka=kafka) == [0, 2]  # timestamp keeps V2
    expected = [0, 2] if magic == 2 else [1, 2]  # v1 records have no headers: header falls back to offset
    assert survivors(tmp_path / "h", segments, HEADER, "version", kafka=kafka) == expected


def test_equal_timestamps_and_equal_versions_go_to_the_highest_offset(tmp_path, kafka):
    recs = (
        Rec(10, b"K", b"first", T, version(7)),
        Rec(11, b"K", b"second", T, version(7)),
        Rec(12, b"K", b"older", T - 1, version(6)),
        Rec(13, b"Z", b"end", T - 5, version(0)),
    )
    segments = one_segment(Entry(2, recs))
    assert survivors(tmp_path / "t", segments, TIMESTAMP, kafka=kafka) == [11, 13]
    assert survivors(tmp_path / "h", segments, HEADER, "version", kafka=kafka) == [11, 13]
    assert survivors(tmp_path / "o", segments, OFFSET, kafka=kafka) == [12, 13]


def test_header_rules_missing_malformed_last_occurrence_signed_and_blank(tmp_path, kafka):
    recs = (
        # K1: the only record with a well-formed header wins over later ones without
        Rec(0, b"K1", b"has", T, version(1)),
        Rec(1, b"K1", b"missing", T),
        Rec(2, b"K1", b"four bytes", T, (("version", b"\x00\x00\x00\x09"),)),
        Rec(3, b"K1", b"null value", T, (("version", None),)),
        Rec(4, b"K1", b"other header", T, (("revision", (99).to_bytes(8, "big")),)),
        # K2: the last occurrence counts: a well-formed 100 followed by a malformed one is missing
        Rec(5, b"K2", b"nine", T, version(9)),
        Rec(6, b"K2", b"last is bad", T, (*version(100), ("version", b"bad"))),
        Rec(7, b"K2", b"last is good", T, (("version", b"bad"), *version(8))),
        # K3: neither has it: highest offset
        Rec(8, b"K3", b"a", T),
        Rec(9, b"K3", b"b", T, (("version", b""),)),
        # K4: a big-endian signed long: 3 beats -5, and -5 (present) beats missing
        Rec(10, b"K4", b"three", T, version(3)),
        Rec(11, b"K4", b"minus five", T, version(-5)),
        Rec(12, b"K4", b"none", T),
        Rec(13, b"K5", b"end", T, version(0)),
    )
    segments = one_segment(Entry(2, recs[:7]), Entry(2, recs[7:], Compression.GZIP))
    # K1 keeps 0; K2 keeps 5 (9 beats the missing 6, and 8 at offset 7 loses to 9); K3 keeps 9; K4 keeps 10
    assert survivors(tmp_path / "h", segments, HEADER, "version", kafka=kafka) == [0, 5, 9, 10, 13]
    # a blank header name is KIP-280's fallback to offset
    assert survivors(tmp_path / "blank", segments, HEADER, "  ", kafka=kafka) == [4, 7, 9, 12, 13]


def test_deletes_with_and_without_the_kip87_flag_are_kept_unless_older_than_the_horizon(tmp_path, kafka):
    hour = 3_600_000
    old_mtime = T - 48 * hour
    segments = [
        # v0: no timestamps; their tombstone clock is the segment's mtime (two days before the newest record)
        Segment(0, old_mtime, [Entry(0, (Rec(0, b"v0-deleted", b"x"), Rec(1, b"v0-deleted", None)))]),
        Segment(
            2,
            T,
            [
                Entry(
                    2,
                    (
                        Rec(2, b"null-old", b"x", T - 30 * hour),
                        Rec(3, b"null-old", None, T - 25 * hour),  # a null value: a delete, a day old
                        Rec(4, b"flag-old", b"x", T - 30 * hour),
                        Rec(5, b"flag-old", b"bye", T - 25 * hour, flag=True),  # KIP-87: a delete with a value
                        Rec(6, b"flag-new", b"bye", T - 1 * hour, flag=True),
                        Rec(7, b"null-new", None, T - 1 * hour),
                        Rec(8, b"revived", b"x", T - 40 * hour, flag=True),
                        Rec(9, b"revived", b"back", T - 39 * hour),  # a later value beats the delete
                        Rec(10, b"end", b"newest", T),
                    ),
                )
            ],
        ),
    ]
    everything = [1, 3, 5, 6, 7, 9, 10]
    assert survivors(tmp_path / "keep", segments, OFFSET, kafka=kafka) == everything
    day = parse_duration_ms("1d")
    assert survivors(tmp_path / "1d", segments, OFFSET, horizon=day, kafka=kafka) == [6, 7, 9, 10]
    assert survivors(tmp_path / "3d", segments, OFFSET, horizon=3 * day, kafka=kafka) == everything
    # under the timestamp strategy the v0 delete compares by mtime (or -1) but its clock is the mtime either way
    assert survivors(tmp_path / "ts", segments, TIMESTAMP, policy=TimestampPolicy.NONE, horizon=day, kafka=kafka) == [
        6,
        7,
        9,
        10,
    ]


def test_the_log_end_record_always_stays(tmp_path, kafka):
    recs = (
        Rec(0, b"K", b"newest by time", T + 10),
        Rec(1, b"X", b"x", T),
        Rec(2, b"K", b"stale, but at the log end", T),
    )
    segments = one_segment(Entry(1, recs))
    assert survivors(tmp_path / "t", segments, TIMESTAMP, kafka=kafka) == [0, 1, 2]
    # an old delete at the log end stays too
    deletes = one_segment(Entry(2, (Rec(5, b"A", b"a", T), Rec(6, b"B", None, T - 10**9))))
    assert survivors(tmp_path / "d", deletes, OFFSET, horizon=1, kafka=kafka) == [5, 6]


def test_v0_records_compare_by_the_timestamp_the_conversion_gives_them(tmp_path, kafka):
    segments = [
        Segment(0, T + 5, [Entry(0, (Rec(0, b"K", b"v0, mtime T+5"),))]),
        Segment(1, T + 100, [Entry(1, (Rec(1, b"K", b"v1 at T", T), Rec(2, b"Z", b"end", T)))]),
    ]
    assert survivors(tmp_path / "mtime", segments, TIMESTAMP, policy=TimestampPolicy.MTIME, kafka=kafka) == [0, 2]
    assert survivors(tmp_path / "none", segments, TIMESTAMP, policy=TimestampPolicy.NONE, kafka=kafka) == [1, 2]


def test_keyless_records_refuse_the_partition_with_their_offsets(tmp_path):
    recs = tuple(Rec(o, None if o in (3, 4, 5, 9) else b"k", b"v") for o in range(12))
    directory = tmp_path / "topic-0"
    segments = one_segment(Entry(0, recs))
    write_partition(directory, segments)
    with pytest.raises(CompactionRefusedError) as info:
        pass_one(sources_of(directory, segments), Settings(OFFSET), "topic-0")
    message = str(info.value)
    assert "partition topic-0: 4 records without a key" in message
    assert "offsets 3-5, 9" in message
    assert "leave this topic out of --compact" in message
    assert reference_survivors(sources_of(directory, segments), OFFSET, "", TimestampPolicy.MTIME, None).keyless == [
        3,
        4,
        5,
        9,
    ]


def test_a_transactional_batch_refuses_compaction(tmp_path):
    directory = tmp_path / "topic-0"
    segments = one_segment(Entry(2, (Rec(0, b"k", b"v", T),), transactional=True, producer_id=7))
    write_partition(directory, segments)
    with pytest.raises(CompactionRefusedError, match=r"transactional batch .*byte position 0, offset 0"):
        pass_one(sources_of(directory, segments), Settings(OFFSET), "topic-0")


def test_pass_one_refuses_past_its_memory_limit_naming_the_partition(tmp_path):
    recs = tuple(Rec(o, b"key-%d" % o, b"v") for o in range(100))
    directory = tmp_path / "orders-3"
    segments = one_segment(Entry(0, recs))
    write_partition(directory, segments)
    sources = sources_of(directory, segments)
    assert Settings(OFFSET).bytes_per_key == 24 and Settings(TIMESTAMP).bytes_per_key == 32
    assert Settings(HEADER, "v").bytes_per_key == 33
    assert Settings(OFFSET, drop_tombstones_older_than_ms=1).bytes_per_key == 24 + 1 + 8
    assert pass_one(sources, Settings(OFFSET, memory_limit_bytes=2400), "orders-3").distinct_keys == 100
    with pytest.raises(CompactionRefusedError) as info:
        pass_one(sources, Settings(OFFSET, memory_limit_bytes=2399), "orders-3", merge_at=10)
    assert "partition orders-3: pass one of compaction holds" in str(info.value)
    assert "over the memory limit of 2399 bytes" in str(info.value)


def test_rules_durations_and_sizes_parse_as_an_operator_writes_them():
    assert CompactionRule.parse("orders.*=offset") == CompactionRule("orders.*", OFFSET)
    assert CompactionRule.parse("a=b=timestamp") == CompactionRule("a=b", TIMESTAMP)
    assert CompactionRule.parse("users=header:x=y") == CompactionRule("users", HEADER, "x=y")
    assert CompactionRule.parse("users=header:") == CompactionRule("users", HEADER, "")
    assert str(CompactionRule.parse("users=header:version")) == "users=header:version"
    for bad in ("orders", "orders=newest", "(=offset"):
        with pytest.raises(ValueError, match="--compact"):
            CompactionRule.parse(bad)
    assert parse_duration_ms("7d") == 7 * 86_400_000 and parse_duration_ms("1500ms") == 1500
    assert parse_duration_ms("90m") == 5_400_000 and parse_duration_ms("250") == 250
    assert (
        parse_memory_bytes("512M") == 512 << 20
        and parse_memory_bytes("2GiB") == 2 << 30
        and parse_memory_bytes("1000") == 1000
    )
    for bad in ("soon", "-1d"):
        with pytest.raises(ValueError, match="not a duration"):
            parse_duration_ms(bad)
    with pytest.raises(ValueError, match="not a size"):
        parse_memory_bytes("lots")


# --- pass two: the conversion drops the losers ---------------------------------------------------------------


def mixed_partition() -> list[Segment]:
    """Every format, deletes with and without the flag, headers, gaps: K-keys updated across segments."""
    return [
        Segment(
            0,
            MTIME,
            [
                Entry(0, (Rec(0, b"A", b"a0"), Rec(1, b"B", b"b0"), Rec(2, b"C", b"c0"))),
                Entry(0, (Rec(3, b"A", b"a1"), Rec(4, b"D", None), Rec(5, b"E", b"e0")), Compression.GZIP),
            ],
        ),
        Segment(
            6,
            MTIME + 60_000,
            [
                Entry(1, (Rec(6, b"B", b"b1", T + 5), Rec(8, b"F", b"f0", T)), Compression.LZ4),
                Entry(1, (Rec(9, b"C", b"c1", T - 5), Rec(10, b"G", b"g0", T + 1))),
                Entry(1, (Rec(11, b"F", b"f1", T + 2), Rec(12, b"H", b"h0", T)), log_append_time=T + 7),
            ],
        ),
        Segment(
            13,
            MTIME + 120_000,
            [
                Entry(
                    2,
                    (
                        Rec(13, b"A", b"a2", T + 3, version(2)),
                        Rec(14, b"E", b"bye", T + 3, version(5), flag=True),
                        Rec(15, b"G", b"g1", T - 9, version(1)),
                        Rec(16, b"H", b"h-", T - 20, version(0)),  # loses to offset 19 by every strategy
                        Rec(17, b"B", b"b2", T + 1, version(3)),
                    ),
                    last_offset=18,  # a batch the cleaner already compacted keeps its last offset
                ),
                Entry(2, (Rec(19, b"H", b"h1", T + 9, version(4)), Rec(20, b"A", b"a3", T + 2)), Compression.GZIP),
                Entry(2, (Rec(21, b"Z", b"z", T + 4),), log_append_time=T + 4),
            ],
        ),
    ]


def convert_compacted(tmp_path: Path, segments: list[Segment], s: Settings, options: ConvertOptions):
    directory = tmp_path / "topic-0"
    paths = write_partition(directory, segments)
    sources = sources_of(directory, segments)
    kept = pass_one(sources, s, "topic-0").offsets
    assert kept.tolist() == reference_survivors(sources, s.strategy, s.header, s.timestamps, None).survivors
    np.save(tmp_path / "survivors.npy", kept)
    results = []
    for path, seg in zip(paths, segments):
        task = SegmentTask(
            str(path), str(tmp_path / "out"), seg.base_offset, options, survivors=str(tmp_path / "survivors.npy")
        )
        result = convert_segment(task)
        if result.outputs:
            expected = expected_records(str(path), kept, seg.mtime_ms, options.timestamps)
            check = verify_segment(result, options, expected=expected)
            assert check.ok, check.problems
        results.append(result)
    return kept, results


@pytest.mark.parametrize("strategy", list(CompactionStrategy))
@pytest.mark.oracle
def test_converted_outputs_are_valid_for_kafka_and_survivors_keep_their_offsets(tmp_path, oracle, strategy):
    segments = mixed_partition()
    for path in write_partition(tmp_path / "source", segments):
        assert all(line["valid"] for line in oracle.dump(path)), path
    options = ConvertOptions(tombstone_flag=True)
    kept, results = convert_compacted(tmp_path, segments, Settings(strategy, "version"), options)
    records = []
    for result in results:
        assert result.status.value == "converted"
        dump = oracle.dump(result.outputs[FileKind.LOG])
        assert dump and all(line["valid"] for line in dump), dump
        records += [line for line in dump if line["type"] == "record"]
        assert result.records + result.records_dropped == sum(
            len(e.records) for seg in segments if seg.base_offset == result.base_offset for e in seg.entries
        )
    assert [r["offset"] for r in records] == kept.tolist()  # survivors keep their offsets; the rest are gaps
    assert kept[-1] == 21
    # a v2 batch that lost records is rebuilt with its base offset and last offset delta (Kafka's cleaner rule)
    last = oracle.dump(results[2].outputs[FileKind.LOG])
    batches = [b for b in last if b["type"] == "batch"]
    first = batches[0]
    assert (first["baseOffset"], first["lastOffset"]) == (13, 18)
    assert first["records"] == sum(1 for o in kept.tolist() if 13 <= o <= 18) < 5


def test_a_rewritten_v2_batch_keeps_the_kip87_flag_codec_and_timestamps(tmp_path):
    from migrate.format import batch as v2
    from migrate.segment.reader import read_file

    segments = [
        Segment(
            0,
            MTIME,
            [
                Entry(
                    2,
                    (
                        Rec(0, b"A", b"old", T),
                        Rec(1, b"B", b"gone", T + 1, flag=True),
                        Rec(2, b"A", b"new", T + 2),
                        Rec(3, b"C", b"c", T + 3),
                    ),
                    Compression.GZIP,
                ),
                Entry(2, (Rec(4, b"C", b"c2", T + 4),)),
            ],
        )
    ]
    kept, results = convert_compacted(tmp_path, segments, Settings(OFFSET), ConvertOptions())
    assert kept.tolist() == [1, 2, 4]
    batch, single = [item for chunk in read_file(results[0].outputs[FileKind.LOG]) for item in chunk.entries.items]
    assert isinstance(batch, v2.V2Batch) and batch.compression == Compression.GZIP
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (0, 3, 2)
    assert batch.records.offsets.tolist() == [1, 2] and batch.records.timestamps.tolist() == [T + 1, T + 2]
    assert (batch.base_timestamp, batch.max_timestamp) == (T + 1, T + 2)
    assert batch.record_attributes().tolist() == [v2.KIP87_TOMBSTONE_BIT, 0]  # the delete flag survives
    assert single.records.offsets.tolist() == [4]


def test_a_segment_losing_every_record_becomes_empty_and_one_losing_none_is_unchanged(tmp_path):
    segments = [
        Segment(0, MTIME, [Entry(2, (Rec(0, b"A", b"1", T), Rec(1, b"B", b"1", T)))]),
        Segment(2, MTIME, [Entry(2, (Rec(2, b"A", b"2", T), Rec(3, b"B", b"2", T)))]),
    ]
    kept, results = convert_compacted(tmp_path, segments, Settings(OFFSET), ConvertOptions())
    assert kept.tolist() == [2, 3]
    assert results[0].status.value == "converted" and results[0].records_dropped == 2
    assert Path(results[0].outputs[FileKind.LOG]).stat().st_size == 0
    assert results[1].status.value == "unchanged"  # v2 and nothing lost: the live file stays as it is


def test_verification_names_a_record_the_survivors_do_not_hold(tmp_path):
    segments = one_segment(Entry(0, (Rec(0, b"A", b"1"), Rec(1, b"A", b"2"), Rec(2, b"B", b"3"))))
    kept, results = convert_compacted(tmp_path, segments, Settings(OFFSET), ConvertOptions())
    path = str(tmp_path / "topic-0" / "00000000000000000000.log")
    wrong = np.array([0, 1, 2], np.int64)  # as if offset 0 had to survive too
    check = verify_segment(results[0], ConvertOptions(), expected=expected_records(path, wrong, MTIME, "mtime"))
    assert not check.ok
    assert check.problems[0].startswith("record 0 (offset 0): offset is 1, the survivor's is 0")
    shifted = expected_records(path, kept, MTIME + 1, TimestampPolicy.MTIME)
    check = verify_segment(results[0], ConvertOptions(), expected=shifted)
    assert "timestamp is 1600000000000, the survivor's is 1600000000001" in check.problems[0]


# --- plan, execute, verify, rollback ---------------------------------------------------------------------------


def add_partition(log_dir: Path, name: str, segments: list[Segment]) -> None:
    write_partition(log_dir / name, segments)
    (log_dir / name / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    (log_dir / name / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")


def v2_only_partition() -> list[Segment]:
    return [
        Segment(0, MTIME, [Entry(2, (Rec(0, b"A", b"1", T, version(1)), Rec(1, b"B", b"1", T, version(1))))]),
        Segment(2, MTIME, [Entry(2, (Rec(2, b"A", b"0", T, version(0)), Rec(3, b"B", b"2", T, version(2))))]),
    ]


@pytest.fixture
def broker(tmp_path: Path) -> Path:
    log_dir = make_broker_logdir(tmp_path, partitions=["compacted-v0-0", "plain-v0-0", "already-v2-1"])
    add_partition(log_dir, "orders-0", mixed_partition())
    add_partition(log_dir, "users-0", v2_only_partition())
    return log_dir


RULES = (
    CompactionRule.parse("orders=header:version"),
    CompactionRule.parse("users|compacted-v0|already-v2=header:version"),
)


def test_plan_records_each_compacted_partition_with_what_it_keeps(broker, tmp_path):
    plan, path = make_plan(tmp_path, broker, compact=RULES, compact_memory_limit=1 << 20)
    parts = plan.log_dirs[0].partition_by_name
    assert parts["plain-v0-0"].compaction is None
    written = {p["name"]: p for p in json.loads(path.read_text())["log_dirs"][0]["partitions"]}
    assert "compaction" not in written["plain-v0-0"] and "compaction" in written["orders-0"]
    users = parts["users-0"]  # v2 only, planned because its topic is compacted
    assert [s.base_offset for s in users.segments] == [0, 2]
    c = users.compaction
    assert (c.rule, c.strategy, c.header) == ("users|compacted-v0|already-v2=header:version", HEADER, "version")
    # 1-byte keys and values and a 15-byte header per record
    assert (c.records, c.distinct_keys, c.records_kept, c.bytes, c.bytes_kept) == (4, 2, 2, 4 * 17, 2 * 17)
    assert c.pass_one_bytes == 2 * 33 and c.memory_limit_bytes == 1 << 20
    orders = parts["orders-0"].compaction
    # A-H and Z: D's null value (v0) and E's KIP-87 flag (version 5 beats E's v0 record) are the kept deletes
    assert (orders.records, orders.distinct_keys, orders.tombstones_kept, orders.tombstones_dropped) == (20, 9, 2, 0)
    assert orders.records_kept == 9  # one per key: the log end record (Z) is its key's winner
    # the fixture's compacted topic: 46 records, 12 of them deletes (v0: null values)
    fixture = parts["compacted-v0-0"].compaction
    assert fixture.records == 46 and fixture.tombstones_kept > 0
    # a v2-only fixture partition with no key written twice: planned, and it keeps every record
    v2 = parts["already-v2-1"].compaction
    assert (v2.records, v2.distinct_keys, v2.records_kept) == (9, 9, 9)
    assert load_plan_json(path.read_text()) == plan


def test_plan_refuses_keyless_records_and_a_memory_limit_naming_the_partition(broker, tmp_path):
    add_partition(
        broker, "orders-1", one_segment(Entry(0, (Rec(0, b"k", b"v"), Rec(1, None, b"v"), Rec(2, b"k", b"w"))))
    )
    with pytest.raises(PlanRefusedError) as info:
        build_plan(PlanRequest(log_dirs=(str(broker),), compact=RULES, compact_memory_limit=40))
    text = str(info.value)
    assert "partition orders-1: 1 records without a key, which Kafka refuses on a compacted topic, at offsets 1" in text
    assert "partition users-0: pass one of compaction holds 2 distinct keys" in text
    with pytest.raises(PlanRefusedError, match="--compact writes v2 batches"):
        build_plan(PlanRequest(log_dirs=(str(broker),), options=ConvertOptions(target_magic=1), compact=RULES))


def test_execute_compacts_verifies_and_rollback_restores(broker, tmp_path, oracle):
    before = snapshot(broker)
    plan, plan_path = make_plan(tmp_path, broker, compact=RULES, drop_tombstones_older_than_ms=3_600_000)
    engine = SerialEngine()
    report = pipeline.execute(plan, engine)
    assert report.ok, report
    assert "compact" in report.stage_seconds
    assert_scan_agrees(plan, report)
    assert {o.partition for o in report.problems} == set()
    unchanged = plan.log_dirs[0].partition_by_name["already-v2-1"]
    assert not list(work_dir(unchanged.dir, plan.plan_id).glob("*.log"))  # nothing lost: nothing rewritten
    for name in ("orders-0", "users-0", "compacted-v0-0", "already-v2-1"):
        part = plan.log_dirs[0].partition_by_name[name]
        c = part.compaction
        dump = oracle.dump(*(broker / name / s.file for s in part.segments))
        assert all(line["valid"] for line in dump if line["type"] in ("batch", "record")), name
        offsets = [line["offset"] for line in dump if line["type"] == "record"]
        assert len(offsets) == c.records_kept, name
        # computed in the original's work dir, kept inside the converted directory with the original until finalize
        kept = PartitionPlaces(str(broker), name, plan.plan_id).kept
        stored = np.load(survivors_path(kept, plan.plan_id))
        assert offsets == stored.tolist(), name
    assert pipeline.verify_live(plan, engine).ok
    rolled = pipeline.rollback(plan, engine, plan_path)
    assert rolled.ok, rolled
    assert snapshot(broker) == before


def test_a_partition_the_compact_stage_refuses_fails_alone(broker, tmp_path, monkeypatch):
    plan, _ = make_plan(tmp_path, broker, compact=RULES)
    from migrate.compaction.reference import ReferenceResult
    from migrate.stages import compact

    real = compact.reference_survivors

    def disagreeing(sources, *args):
        result = real(sources, *args)
        if "orders-0" in sources[0].path:
            return ReferenceResult(result.survivors[1:], [], result.records, result.distinct_keys)
        return result

    monkeypatch.setattr(compact, "reference_survivors", disagreeing)
    report = pipeline.execute(plan, SerialEngine())
    states = {p.partition: p for p in report.log_dirs[0].partitions}
    assert states["orders-0"].state == PartitionState.FAILED
    assert "differ from those of the simple reference implementation" in states["orders-0"].problem.message
    assert {n: s.state for n, s in states.items() if n != "orders-0"} == {
        "users-0": PartitionState.MIGRATED,
        "compacted-v0-0": PartitionState.MIGRATED,
        "plain-v0-0": PartitionState.MIGRATED,
        "already-v2-1": PartitionState.MIGRATED,
    }
    assert [o.outcome for o in report.problems] == [Outcome.REFUSED]
    assert not record_path(broker / "orders-0", plan.plan_id).exists()
    # the next run computes them again (the reference agrees now) and finishes
    monkeypatch.setattr(compact, "reference_survivors", real)
    again = pipeline.execute(plan, SerialEngine())
    assert again.ok, again


def test_a_resumed_run_reuses_stored_survivors(broker, tmp_path):
    plan, _ = make_plan(tmp_path, broker, compact=RULES)
    log_dir = plan.log_dirs[0].log_dir
    from migrate.stages.prepare import prepare_log_dir

    prepare_log_dir(plan, log_dir)
    first = compact_partition(plan, log_dir, "orders-0")
    assert (
        first.outcome == Outcome.VERIFIED
        and first.survivors == plan.partition(log_dir, "orders-0").compaction.records_kept
    )
    second = compact_partition(plan, log_dir, "orders-0")
    assert second.outcome == Outcome.SKIPPED and second.reused
    assert compact_partition(plan, log_dir, "plain-v0-0").outcome == Outcome.SKIPPED  # not compacted


def test_the_plan_command_maps_its_compaction_options(broker, tmp_path, capsys):
    from migrate.cli import main

    plan = tmp_path / "plan.json"
    args = ["plan", "--log-dirs", str(broker), "-o", str(plan), "--compact", "orders=timestamp"]
    args += ["--compact", "users=header:version", "--drop-tombstones-older-than", "7d"]
    assert main([*args, "--compact-memory-limit", "64M"]) == 0
    written = {p["name"]: p for p in json.loads(plan.read_text())["log_dirs"][0]["partitions"]}
    orders, users = written["orders-0"]["compaction"], written["users-0"]["compaction"]
    assert (orders["rule"], orders["strategy"], orders["drop_tombstones_older_than_ms"]) == (
        "orders=timestamp",
        "timestamp",
        7 * 86_400_000,
    )
    assert (users["strategy"], users["header"], users["memory_limit_bytes"]) == ("header", "version", 64 << 20)
    assert "compaction" not in written["compacted-v0-0"]  # no rule names its topic
    capsys.readouterr()
    ran = run_cli(capsys, "plan", "--log-dirs", str(broker), "-o", str(plan), "--compact", "orders=newest")
    assert ran.code == 2
    assert "expected TOPIC_REGEX=offset, TOPIC_REGEX=timestamp or TOPIC_REGEX=header:NAME" in ran.err
    ran = run_cli(capsys, "plan", "--log-dirs", str(broker), "-o", str(plan), "--drop-tombstones-older-than", "1h")
    assert ran.code == 1
    assert "apply to compacted partitions only" in ran.err
