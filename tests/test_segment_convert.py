"""Segment up-conversion, judged by Apache Kafka's own readers and builders (the oracle) and by our verifier."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import EXPECTED, FIXTURES, LEGACY_LOGDIR, VALID_FIXTURE_SEGMENTS, expected_summaries, fixture_id
from segment_helpers import convert_logdir

from migrate.errors import CorruptRecordError, SegmentRefusedError, SourceChangedError, TruncatedTailError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import read_entries, walk_entries
from migrate.format.records import Compression, Record, TimestampType
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ConvertOptions, TailDrop
from migrate.model.run_state import SegmentTask
from migrate.model.segment_files import SegmentFiles
from migrate.segment import offset_index, time_index
from migrate.segment.convert import convert_segment
from migrate.segment.verify import verify_segment

# one xdist worker: each option set converts the fixtures once
pytestmark = pytest.mark.xdist_group("segment_convert")

MTIMES = json.loads((FIXTURES / "mtimes.json").read_text())
SUMMARIES = expected_summaries()
# partitions holding only legacy data, which every conversion rewrites
LEGACY_ONLY = [
    p
    for p in VALID_FIXTURE_SEGMENTS
    if not p.parent.name.startswith(("already-v2", "mixed-v1-v2")) and p.stat().st_size > 0
]
V1_ONLY = ("plain-v1-0", "plain-v1-1", "lz4-v1-0", "lz4-v1-1")


def rewritten(options: ConvertOptions) -> list[Path]:
    """Segments a conversion to ``options.target_magic`` must rewrite (v1-only data is already at target v1)."""
    return [p for p in LEGACY_ONLY if any(int(m) < options.target_magic for m in SUMMARIES[fixture_id(p)]["magics"])]


@pytest.fixture(scope="module", params=[(2, "mtime"), (2, "none"), (1, "mtime"), (1, "none")], ids=str)
def converted(request, tmp_path_factory) -> tuple[ConvertOptions, Path, Path, dict]:
    target, policy = request.param
    root = tmp_path_factory.mktemp(f"conv-v{target}-{policy}")
    src = root / "in"
    import shutil

    shutil.copytree(LEGACY_LOGDIR, src)
    for p in src.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    for rel, ms in MTIMES.items():
        os.utime(src / rel, ns=(ms * 1_000_000, ms * 1_000_000))
    options = ConvertOptions(target_magic=target, timestamps=policy, digest="sha256")  # Kafka's summary digest
    out = root / "out"
    return options, src, out, convert_logdir(src, out, options)


def test_every_legacy_segment_is_rewritten_and_verifies(converted):
    options, _, _, results = converted
    for seg in rewritten(options):
        result = results[fixture_id(seg)]
        assert result.status == "converted", fixture_id(seg)
        check = verify_segment(result, options)
        assert check.ok, (fixture_id(seg), check.problems)
        assert result.source_digest == SUMMARIES[fixture_id(seg)]["sha256"]
        assert check.records == SUMMARIES[fixture_id(seg)]["records"]


def test_segments_already_at_target_are_left_alone(converted):
    options, _, out, results = converted
    if options.target_magic == 1:
        assert {results[fixture_id(p)].status for p in LEGACY_ONLY if p not in rewritten(options)} == {"unchanged"}
    for name in ("already-v2-0/00000000000000000000.log", "already-v2-1/00000000000000000000.log"):
        assert results[name].status == "unchanged"
        assert results[name].outputs == SegmentFiles()
    assert not (out / "already-v2-0" / "00000000000000000000.log").exists()


def test_outputs_keep_the_source_mtime(converted):
    options, _, _, results = converted
    for seg in rewritten(options):
        result = results[fixture_id(seg)]
        want = MTIMES[fixture_id(seg)] * 1_000_000
        for path in result.outputs.values():
            assert os.stat(path).st_mtime_ns == want, path


@pytest.mark.oracle
def test_kafka_reads_every_output_with_the_source_records(converted, oracle):
    options, _, _, results = converted
    segments = rewritten(options)
    outputs = [results[fixture_id(s)].outputs[FileKind.LOG] for s in segments]
    summaries = {Path(s["path"]).parent.name + "/" + Path(s["path"]).name: s for s in oracle.summary(*outputs)}
    assert len(summaries) == len(segments)
    for seg in segments:
        got = summaries[fixture_id(seg)]
        want = SUMMARIES[fixture_id(seg)]
        assert got["valid"], (fixture_id(seg), got["errors"])
        assert got["sha256"] == want["sha256"], fixture_id(seg)
        assert got["records"] == want["records"]
        assert set(got["magics"]) == {str(options.target_magic)}
        v0_data = want["magics"].get("0", 0) > 0
        if options.timestamps == "none" or not v0_data:
            # v1 timestamps are kept exactly, and v0 keeps Kafka's -1 under the "none" policy
            assert got["sha256_ts"] == want["sha256_ts"], fixture_id(seg)
        else:
            assert got["sha256_ts"] != want["sha256_ts"]


@pytest.mark.oracle
@pytest.mark.parametrize("target", [1, 2])
def test_mtime_policy_stamps_v0_records_with_the_segment_mtime(legacy_logdir, tmp_path, target, oracle):
    seg = "plain-v0-0/00000000000000000040.log"
    src = legacy_logdir / seg
    result = convert_segment(SegmentTask(str(src), str(tmp_path), 40, ConvertOptions(target_magic=target)))
    lines = oracle.dump(result.outputs[FileKind.LOG])
    records = [x for x in lines if x["type"] == "record"]
    batches = [x for x in lines if x["type"] == "batch"]
    assert len(records) == 40
    assert {r["timestamp"] for r in records} == {MTIMES[seg]}
    assert {b["timestampType"] for b in batches} == {"LOG_APPEND_TIME"}
    assert {b["magic"] for b in batches} == {target}


def _read_back(path: str) -> list[Record]:
    return list(read_entries(Path(path).read_bytes()).records())


@pytest.mark.parametrize("policy", ["mtime", "none"])
def test_v1_sources_keep_timestamps_and_types(legacy_logdir, tmp_path, policy):
    results = convert_logdir(legacy_logdir, tmp_path, ConvertOptions(timestamps=policy))
    for seg in ("plain-v1-1/00000000000000000000.log", "lz4-v1-1/00000000000000000000.log"):
        expected = [
            x
            for x in json.loads("[" + ",".join((EXPECTED / (seg[:-4] + ".jsonl")).read_text().split("\n")[:-1]) + "]")
            if x["type"] == "record"
        ]
        got = _read_back(results[seg].outputs[FileKind.LOG])
        assert [r.timestamp for r in got] == [x["timestamp"] for x in expected]
        assert {r.timestamp_type for r in got} == {TimestampType.LOG_APPEND_TIME}


@pytest.mark.oracle
@pytest.mark.parametrize(
    "seg",
    [
        "plain-v0-0/00000000000000000000.log",
        "plain-v1-0/00000000000000000000.log",
        "plain-v1-1/00000000000000000017.log",
        "gzip-v0-0/00000000000000000000.log",
        "lz4-v0-0/00000000000000000000.log",
        "lz4-v1-1/00000000000000000000.log",
        "compacted-v0-0/00000000000000000100.log",
        "compacted-v0-1/00000000000000000000.log",
        "mixed-v0-v1-0/00000000000000000000.log",
    ],
)
def test_kafka_rules_mode_is_byte_identical_to_kafkas_own_conversion(seg, legacy_logdir, tmp_path, oracle):
    """With --timestamps none, Kafka's cleaner rules give exactly the bytes Kafka's MemoryRecordsBuilder writes.

    Snappy batches are left out: python-snappy and snappy-java may compress the same bytes differently; the
    records are the same (checked above).
    """
    src = legacy_logdir / seg
    reference = tmp_path / "kafka.log"
    proc = oracle.run("convert", "--leader-epoch", "0", src, reference)
    assert proc.returncode == 0, proc.stderr
    result = convert_segment(
        SegmentTask(str(src), str(tmp_path / "ours"), int(src.stem), ConvertOptions(timestamps="none"))
    )
    assert Path(result.outputs[FileKind.LOG]).read_bytes() == reference.read_bytes()


def test_conversion_is_deterministic(legacy_logdir, tmp_path):
    options = ConvertOptions()
    a = convert_logdir(legacy_logdir, tmp_path / "a", options)
    b = convert_logdir(legacy_logdir, tmp_path / "b", options)
    for key, ra in a.items():
        rb = b[key]
        for sfx, path in ra.outputs.items():
            assert Path(path).read_bytes() == Path(rb.outputs[sfx]).read_bytes(), (key, sfx)


def test_partition_leader_epoch_defaults_to_zero_and_can_be_minus_one(legacy_logdir, tmp_path):
    src = legacy_logdir / "gzip-v0-0" / "00000000000000000000.log"
    for epoch in (0, -1, 5):
        r = convert_segment(
            SegmentTask(str(src), str(tmp_path / str(epoch)), 0, ConvertOptions(partition_leader_epoch=epoch))
        )
        batches = read_entries(Path(r.outputs[FileKind.LOG]).read_bytes()).items
        assert {b.partition_leader_epoch for b in batches} == {epoch}


# --- indexes -------------------------------------------------------------------------------------------------


def _kafka_recover_indexes(log: bytes, base: int, interval: int) -> tuple[list, list]:
    """A literal transcription of LogSegment.recover's index loop over shallow batches (reference model)."""
    offsets, times = [], []
    valid = last_entry = 0
    max_ts, off_of_max = -1, -1
    for item in read_entries(log).items:
        subs = []
        if isinstance(item, legacy.LegacyRun):
            subs = list(zip(item.sizes.tolist(), item.records.offsets.tolist(), item.records.timestamps.tolist()))
        elif isinstance(item, v2.V2Batch):
            subs = [(item.size, item.last_offset, item.max_timestamp)]
        else:
            subs = [(item.size, item.offset, item.timestamp)]
        for size, last, ts in subs:
            if ts > max_ts:
                max_ts, off_of_max = ts, last
            if valid - last_entry > interval:
                offsets.append((last - base, valid))
                if max_ts > (times[-1][0] if times else -1):
                    times.append((max_ts, off_of_max - base))
                last_entry = valid
            valid += size
    if max_ts > (times[-1][0] if times else -1):
        times.append((max_ts, off_of_max - base))
    return offsets, times


def _generated_segment(path: Path, n: int, magic: int, base: int = 1000, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    records = []
    offset = base
    for i in range(n):
        offset += 1 + int(rng.integers(0, 3))  # compaction-like gaps
        size = int(rng.integers(0, 400))
        value = None if i % 17 == 0 else rng.bytes(size)
        key = None if i % 11 == 0 else f"k{i % 50}".encode()
        ts = 1_600_000_000_000 + int(rng.integers(-5000, 5000)) + i * 10 if magic == 1 else -1
        records.append(Record(offset, ts, key, value))
    data = bytearray()
    i = 0
    while i < n:
        chunk = records[i : i + int(rng.integers(1, 30))]
        codec = [Compression.NONE, Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.SNAPPY][i % 5]
        data += (
            legacy.encode_messages(chunk, magic)
            if codec == Compression.NONE
            else legacy.encode_wrapper(chunk, magic, codec)
        )
        i += len(chunk)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    os.utime(path, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    return path


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("interval", [4096, 100])
def test_indexes_are_what_kafka_recovery_builds(tmp_path, magic, interval):
    src = _generated_segment(tmp_path / "in" / "t-0" / f"{1000:020d}.log", 3000, magic)
    options = ConvertOptions(index_interval_bytes=interval)
    result = convert_segment(SegmentTask(str(src), str(tmp_path / "out"), 1000, options))
    log = Path(result.outputs[FileKind.LOG]).read_bytes()
    want_offsets, want_times = _kafka_recover_indexes(log, 1000, interval)
    index = Path(result.outputs[FileKind.INDEX]).read_bytes()
    timeindex = Path(result.outputs[FileKind.TIME_INDEX]).read_bytes()
    assert len(index) == 8 * len(want_offsets) and len(index) > 8 * 20
    assert len(timeindex) == 12 * len(want_times)
    assert [struct.unpack_from(">ii", index, 8 * i) for i in range(len(want_offsets))] == want_offsets
    assert [struct.unpack_from(">qi", timeindex, 12 * i) for i in range(len(want_times))] == want_times
    assert verify_segment(result, options).ok


def test_v0_only_segment_under_none_policy_has_an_empty_time_index(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    r = convert_segment(
        SegmentTask(str(src), str(tmp_path), 0, ConvertOptions(timestamps="none", index_interval_bytes=500))
    )
    assert r.output_sizes[FileKind.TIME_INDEX] == 0
    assert r.output_sizes[FileKind.INDEX] > 0
    offsets, positions = offset_index.decode(Path(r.outputs[FileKind.INDEX]).read_bytes(), 0)
    assert (np.diff(offsets) > 0).all() and (np.diff(positions) > 0).all()


def test_mtime_policy_time_index_ends_with_the_mtime(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    r = convert_segment(SegmentTask(str(src), str(tmp_path), 0, ConvertOptions()))
    ts, offs = time_index.decode(Path(r.outputs[FileKind.TIME_INDEX]).read_bytes(), 0)
    assert ts.tolist() == [MTIMES["plain-v0-0/00000000000000000000.log"]]
    assert offs.tolist() == [0]  # the first batch that reached the max


# --- refusals --------------------------------------------------------------------------------------------------


def test_truncated_tail_is_refused_with_file_and_position(legacy_logdir, tmp_path):
    src = legacy_logdir / "truncated-tail-0" / "00000000000000000015.log"
    with pytest.raises(TruncatedTailError) as err:
        convert_segment(SegmentTask(str(src), str(tmp_path / "s"), 15))
    assert err.value.position == 621 and err.value.path == str(src)
    assert "621" in str(err.value) and str(src) in str(err.value) and "--truncate-tail" in str(err.value)
    assert "which the plan does not list to drop" in str(err.value)
    assert list((tmp_path / "s").glob("*")) == []  # nothing staged (the dir is made for a first output only)


def test_a_tail_the_plan_lists_is_dropped_and_no_other(legacy_logdir, tmp_path):
    src = legacy_logdir / "truncated-tail-1" / "00000000000000000015.log"
    at = src.stat().st_size - 2163
    r = convert_segment(SegmentTask(str(src), str(tmp_path), 15, tail_drop=TailDrop(at, 2163, 24, None)))
    assert r.truncated_tail_bytes == 2163
    assert r.records == 10 and r.last_offset == 24
    # a plan that listed a different tail (the file changed since) drops nothing
    with pytest.raises(TruncatedTailError, match=f"byte position {at}"):
        convert_segment(SegmentTask(str(src), str(tmp_path / "x"), 15, tail_drop=TailDrop(at - 1, 2164, 24, None)))


def test_crc_mismatch_is_refused_with_file_and_position(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    data = bytearray(src.read_bytes())
    second = 12 + struct.unpack_from(">i", data, 8)[0]
    data[second + 40] ^= 0xFF  # inside the second message's value
    src.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as err:
        convert_segment(SegmentTask(str(src), str(tmp_path / "s"), 0, ConvertOptions(chunk_bytes=64)))
    assert err.value.position == second and err.value.offset == 1
    assert "CRC" in str(err.value) and str(src) in str(err.value)
    assert list((tmp_path / "s").glob("*")) == []  # nothing staged (the dir is made for a first output only)


def test_changed_source_is_refused(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    st = src.stat()
    with pytest.raises(SourceChangedError, match="is not the file that was planned"):
        convert_segment(
            SegmentTask(str(src), str(tmp_path), 0, expected_size=st.st_size + 1, expected_mtime_ns=st.st_mtime_ns)
        )


def test_a_batch_conversion_made_larger_than_the_limit_and_its_source_is_refused(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    first = 12 + struct.unpack_from(">i", src.read_bytes(), 8)[0]  # the first v0 message, log overhead included
    with pytest.raises(SegmentRefusedError, match=rf"exceeds max\.message\.bytes {first} and its source entry") as e:
        convert_segment(SegmentTask(str(src), str(tmp_path), 0, ConvertOptions(max_message_bytes=first)))
    assert e.value.position == 0 and str(src) in str(e.value)


def test_a_batch_no_larger_than_its_source_passes_whatever_the_limit(legacy_logdir, tmp_path):
    # a broker accepted the source entry, so the topic's limit was at least its size: a converted batch that did
    # not grow is no risk, even above the configured limit
    src = legacy_logdir / "gzip-v0-0" / "00000000000000000000.log"
    unlimited = convert_segment(SegmentTask(str(src), str(tmp_path / "a"), 0))
    sources = walk_entries(src.read_bytes()).sizes
    outputs = walk_entries(Path(unlimited.outputs[FileKind.LOG]).read_bytes()).sizes
    assert len(sources) == len(outputs)  # one v2 batch per wrapper or message
    biggest = int(np.argmax(outputs))
    assert outputs[biggest] < sources[biggest]  # 17+ inner v0 messages: v2 record framing is smaller
    limit = int(outputs[biggest]) - 1
    assert (outputs[outputs > limit] <= sources[outputs > limit]).all()
    r = convert_segment(SegmentTask(str(src), str(tmp_path / "b"), 0, ConvertOptions(max_message_bytes=limit)))
    assert Path(r.outputs[FileKind.LOG]).read_bytes() == Path(unlimited.outputs[FileKind.LOG]).read_bytes()


def test_offsets_below_the_segment_base_are_refused(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000040.log"
    with pytest.raises(CorruptRecordError, match=r"below the segment's base offset 41"):
        convert_segment(SegmentTask(str(src), str(tmp_path), 41))


def test_small_chunks_give_the_same_bytes(legacy_logdir, tmp_path):
    src = legacy_logdir / "mixed-v0-v1-0" / "00000000000000000015.log"
    big = convert_segment(SegmentTask(str(src), str(tmp_path / "big"), 15))
    small = convert_segment(SegmentTask(str(src), str(tmp_path / "small"), 15, ConvertOptions(chunk_bytes=100)))
    for sfx in (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX):
        assert Path(big.outputs[sfx]).read_bytes() == Path(small.outputs[sfx]).read_bytes()


def test_empty_segment_gives_empty_outputs(legacy_logdir, tmp_path):
    src = legacy_logdir / "empty-segment-0" / "00000000000000000040.log"
    r = convert_segment(SegmentTask(str(src), str(tmp_path), 40))
    assert r.status == "empty"
    assert r.output_sizes == SegmentFiles(log=0, index=0, time_index=0)


# --- options -----------------------------------------------------------------------------------------------------


@pytest.mark.oracle
def test_pack_bytes_and_recompression_keep_every_record(legacy_logdir, tmp_path, oracle):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    plain = convert_segment(SegmentTask(str(src), str(tmp_path / "plain"), 0, ConvertOptions(digest="sha256")))
    packed = convert_segment(SegmentTask(str(src), str(tmp_path / "packed"), 0, ConvertOptions(pack_bytes=16384)))
    zstd = convert_segment(
        SegmentTask(str(src), str(tmp_path / "zstd"), 0, ConvertOptions(pack_bytes=16384, compression="zstd"))
    )
    assert packed.batches_out < plain.batches_out == 40
    assert zstd.output_bytes < packed.output_bytes < plain.output_bytes
    for r in (packed, zstd):
        assert verify_segment(r, ConvertOptions()).ok
    sums = oracle.summary(packed.outputs[FileKind.LOG], zstd.outputs[FileKind.LOG])
    assert all(s["valid"] and s["sha256"] == plain.source_digest for s in sums)
    assert sums[1]["compressions"] == {"zstd": packed.batches_out}


def test_kip87_tombstone_flag_marks_null_values_only(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v0-0" / "00000000000000000000.log"
    r = convert_segment(SegmentTask(str(src), str(tmp_path), 0, ConvertOptions(tombstone_flag=True)))
    data = Path(r.outputs[FileKind.LOG]).read_bytes()
    flagged = []
    for b in read_entries(data).items:
        record_attributes = data[b.position + v2.RECORD_BATCH_OVERHEAD + 1]  # after the 1-byte length varint
        flagged.append((record_attributes == v2.KIP87_TOMBSTONE_BIT, b.records.value_len[0] < 0))
    assert any(f for f, _ in flagged)
    assert all(f == null for f, null in flagged)


# --- the record digest -------------------------------------------------------------------------------------------


def _tamper_value(log: Path) -> None:
    """Change one value byte of the first batch of a converted log and fix its CRC-32C: a record that reads fine
    but is no longer the source's."""
    import crc32c

    data = bytearray(log.read_bytes())
    data[-3] ^= 0x01  # inside the last record's value (a single-record batch ends with value, header count 0)
    walk = walk_entries(bytes(data))
    last = int(walk.positions[-1])
    struct.pack_into(">I", data, last + 17, crc32c.crc32c(bytes(data[last + 21 :])))
    log.write_bytes(bytes(data))


@pytest.mark.parametrize("digest", ["sha256", "xxh3-128"])
def test_the_digest_option_is_what_the_run_checks_with(legacy_logdir, tmp_path, digest):
    src = legacy_logdir / "plain-v0-1" / "00000000000000000030.log"
    options = ConvertOptions(digest=digest)
    result = convert_segment(SegmentTask(str(src), str(tmp_path), 30, options))
    assert result.digest == digest
    assert len(result.source_digest) == len(result.output_digest_ts) == (64 if digest == "sha256" else 32)
    if digest == "sha256":  # what Kafka's own reader prints for the source
        assert result.source_digest == SUMMARIES["plain-v0-1/00000000000000000030.log"]["sha256"]
    assert verify_segment(result, options).ok
    log = Path(result.outputs[FileKind.LOG])
    mtime = log.stat().st_mtime_ns
    _tamper_value(log)
    os.utime(log, ns=(mtime, mtime))
    check = verify_segment(result, options)
    assert not check.ok
    assert any(f"records differ from the source {src}: {digest}" in p for p in check.problems), check.problems


def test_a_timestamp_changed_after_conversion_is_named_as_such(legacy_logdir, tmp_path):
    src = legacy_logdir / "plain-v1-0" / "00000000000000000000.log"
    result = convert_segment(SegmentTask(str(src), str(tmp_path), 0, ConvertOptions(timestamps="none")))
    log = Path(result.outputs[FileKind.LOG])
    data = bytearray(log.read_bytes())
    first_size = 12 + struct.unpack_from(">i", data, 8)[0]
    struct.pack_into(">q", data, 27, struct.unpack_from(">q", data, 27)[0] + 1)  # base timestamp of batch 1
    struct.pack_into(">q", data, 35, struct.unpack_from(">q", data, 35)[0] + 1)  # and its max
    import crc32c

    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:first_size])))
    mtime = log.stat().st_mtime_ns
    log.write_bytes(bytes(data))
    os.utime(log, ns=(mtime, mtime))
    check = verify_segment(result, ConvertOptions(timestamps="none"))
    assert any(p.startswith("timestamps differ from what the conversion wrote") for p in check.problems), check.problems


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "gzip-wrapper"])
def test_a_timestamp_below_minus_one_is_refused_at_its_record_as_kafka_refuses_it(tmp_path, wrapped, oracle):
    records = [
        Record(0, 1_600_000_000_000, b"a", b"1"),
        Record(1, -5, b"b", b"2"),
        Record(2, 1_600_000_000_001, b"c", b"3"),
    ]
    first = legacy.encode_messages(records[:1], 1)
    rest = (
        legacy.encode_wrapper(records[1:], 1, Compression.GZIP) if wrapped else legacy.encode_messages(records[1:], 1)
    )
    src = tmp_path / "src" / "00000000000000000000.log"
    src.parent.mkdir()
    src.write_bytes(first + rest)
    with pytest.raises(SegmentRefusedError, match=r"timestamp -5 is below -1") as refused:
        convert_segment(SegmentTask(str(src), str(tmp_path / "out"), 0))
    # the plain message's own position; inside a wrapper, the wrapper's
    assert (refused.value.position, refused.value.offset, refused.value.path) == (len(first), 1, str(src))
    assert "Invalid negative timestamp" in oracle.run("convert", src, tmp_path / "kafka.log").stderr
