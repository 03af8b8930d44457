"""A large segment converted in ranges by several workers, then joined: the same bytes as a one-worker conversion,
whatever the ranges, the options or the content; refusals where a whole conversion refuses; one outcome per segment,
recorded only by the join; and a crash anywhere in between resumes or rolls back cleanly."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, LEGACY_LOGDIR, fixture_id
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, run_verb, snapshot
from segment_helpers import convert_in_ranges, planned_ranges, range_cuts

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.errors import CorruptRecordError, LocatedError, ModelError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import walk_entries
from migrate.format.records import Compression, Record, TimestampType
from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ByteRange, ConvertOptions, TailDrop, content_id, dump_plan_json, load_plan_json
from migrate.model.run_state import PartitionState, SegmentOutcome, SegmentTask
from migrate.planning.plan import build_plan, make_tasks, write_plan
from migrate.planning.request import PlanRequest
from migrate.run.faults import CRASH_ENV, CRASH_EXIT
from migrate.segment.convert import convert_segment
from migrate.segment.ranges import RangeRefusedError
from migrate.segment.reader import find_entry_start
from migrate.segment.verify import verify_segment

MTIMES = json.loads((FIXTURES / "mtimes.json").read_text())
SEGMENTS = sorted(p for p in LEGACY_LOGDIR.glob("*/*.log") if not p.parent.name.startswith("truncated-tail"))
COUNTS = (2, 3, 7, 40)
OPTIONS = [
    ConvertOptions(),
    ConvertOptions(timestamps="none", digest="xxh3-128"),
    ConvertOptions(target_magic=1),
    ConvertOptions(compression="lz4", chunk_bytes=257, index_interval_bytes=100),
]


def _copy(src: Path, dst_dir: Path) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    dst.write_bytes(src.read_bytes())
    ms = MTIMES.get(fixture_id(src))
    if ms is not None:
        os.utime(dst, ns=(ms * 1_000_000, ms * 1_000_000))
    return dst


def _same_as_whole(
    src: Path,
    tmp: Path,
    options: ConvertOptions,
    cuts: list[tuple[int, int]],
    tail=None,
    run=None,
    order=None,
    outputs=None,
) -> list:
    """Ranges and a whole conversion agree: the same three files byte for byte (or the same refusal), the same
    counts, and the joined segment verifies from disk, composite digest included. Returns the range parts."""
    base = int(src.stem)
    whole_task = SegmentTask(str(src), str(tmp / "whole"), base, options, tail_drop=tail)
    ranged_task = dataclasses.replace(whole_task, staging_dir=str(tmp / "ranges"))
    try:
        whole = convert_segment(whole_task)
    except LocatedError as exc:
        with pytest.raises((LocatedError, RangeRefusedError)) as err:
            convert_in_ranges(ranged_task, cuts, run, order, outputs)
        got = err.value.problem if isinstance(err.value, RangeRefusedError) else err.value
        assert (got.position, got.kind) == (exc.position, exc.kind), (fixture_id(src), cuts)
        assert not list((tmp / "ranges").glob("*")), "a refused join leaves nothing"
        return []
    joined, parts = convert_in_ranges(ranged_task, cuts, run, order, outputs)
    assert joined.status == whole.status, (fixture_id(src), cuts)
    assert joined.outputs.keys() == whole.outputs.keys()
    for sfx, path in whole.outputs.items():
        assert Path(joined.outputs[sfx]).read_bytes() == Path(path).read_bytes(), (fixture_id(src), sfx, cuts)
    for name in ("records", "first_offset", "last_offset", "entries_in", "batches_out", "max_timestamp"):
        assert getattr(joined, name) == getattr(whole, name), (name, fixture_id(src), cuts)
    assert (joined.magics_in, joined.mtime_timestamped_records) == (whole.magics_in, whole.mtime_timestamped_records)
    assert joined.output_bytes == whole.output_bytes
    assert sorted(p.name for p in (tmp / "ranges").glob("*")) == sorted(Path(p).name for p in joined.outputs.values())
    if joined.outputs:
        check = verify_segment(joined, options)
        assert check.ok, (fixture_id(src), cuts, check.problems)
        if not joined.digest_splits:
            assert (joined.source_digest, joined.output_digest_ts) == (whole.source_digest, whole.output_digest_ts)
    return parts


@pytest.mark.parametrize("options", OPTIONS, ids=["default", "none-xxh3", "target-v1", "lz4-small-chunks"])
def test_every_fixture_converts_to_the_same_bytes_in_ranges(tmp_path, options):
    for src in SEGMENTS:
        for count in COUNTS:
            work = tmp_path / f"{src.parent.name}-{src.stem}-{count}"
            _same_as_whole(_copy(src, work / "in"), work, options, range_cuts(src.stat().st_size, count))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ranges_placing_themselves_in_any_order_give_the_same_bytes(tmp_path, seed):
    """As execute runs them: each range copies what it can into the joined file when it is done, in whatever order
    the workers finish; the join completes the rest."""
    rng = np.random.default_rng(seed)
    for src in SEGMENTS:
        for count in COUNTS:
            work = tmp_path / f"{src.parent.name}-{src.stem}-{count}"
            order = rng.permutation(count).tolist()
            cuts = range_cuts(src.stat().st_size, count)
            _same_as_whole(_copy(src, work / "in"), work, ConvertOptions(), cuts, run=f"run{seed}", order=order)


def test_the_join_removes_what_a_crashed_run_of_the_ranges_left(tmp_path):
    src = _mixed_segment(tmp_path / "in" / f"{1000:020d}.log", 5)
    task = SegmentTask(str(src), str(tmp_path / "ranges"), 1000, ConvertOptions())
    cuts = range_cuts(src.stat().st_size, 6)
    from migrate.segment.ranges import convert_range

    for i in (0, 1, 3):  # a run that crashed after three ranges: its part files, records and partly joined file
        convert_range(task, i, 6, *cuts[i], run="crashed")
    assert any(p.name.endswith(".crashed") for p in (tmp_path / "ranges").iterdir())
    joined, _ = convert_in_ranges(task, cuts, run="again", order=[5, 4, 3, 2, 1, 0])
    whole = convert_segment(dataclasses.replace(task, staging_dir=str(tmp_path / "whole")))
    assert sorted(p.name for p in (tmp_path / "ranges").iterdir()) == sorted(
        Path(p).name for p in joined.outputs.values()
    )
    for sfx, path in whole.outputs.items():
        assert Path(joined.outputs[sfx]).read_bytes() == Path(path).read_bytes()


def test_a_torn_tail_is_refused_or_dropped_as_a_whole_conversion_does(tmp_path):
    for src in sorted(LEGACY_LOGDIR.glob("truncated-tail-*/*.log")):
        size = src.stat().st_size
        consumed = walk_entries(src.read_bytes()).consumed
        for count in COUNTS:
            work = tmp_path / f"{src.parent.name}-{src.stem}-{count}"
            copy = _copy(src, work / "in")
            _same_as_whole(copy, work / "refused", ConvertOptions(), range_cuts(size, count))
            if consumed < size:
                drop = TailDrop(consumed, size - consumed, None, None)
                _same_as_whole(copy, work / "dropped", ConvertOptions(), range_cuts(size, count), tail=drop)


def _mixed_segment(path: Path, seed: int) -> Path:
    """Every entry kind and codec a segment can hold, in the order message.format.version changes leave them:
    plain v0 and v1 messages, v0 and v1 wrappers of every legacy codec, then v2 batches of every codec (headers,
    nulls, empty values), offsets with gaps, a LogAppendTime wrapper."""
    rng = np.random.default_rng(seed)
    offset = 1000
    parts: list[bytes] = []

    def records(n: int, magic: int) -> list[Record]:
        nonlocal offset
        out = []
        for _ in range(n):
            offset += 1 + int(rng.integers(0, 3))
            value = None if rng.random() < 0.05 else rng.bytes(int(rng.integers(0, 600)))
            key = None if rng.random() < 0.1 else f"key-{offset}".encode()
            ts = 1_600_000_000_000 + offset * 7 if magic else -1
            out.append(Record(offset, ts, key, value))
        return out

    for magic in (0, 1):
        for _ in range(30):
            parts.append(legacy.encode_messages(records(int(rng.integers(1, 20)), magic), magic))
            codec = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4][int(rng.integers(0, 3))]
            batch = records(int(rng.integers(1, 30)), magic)
            if magic and rng.random() < 0.2:
                parts.append(
                    legacy.encode_wrapper(batch, 1, codec, TimestampType.LOG_APPEND_TIME, 1_700_000_000_000 + offset)
                )
            else:
                parts.append(legacy.encode_wrapper(batch, magic, codec))
    for i in range(40):
        batch = records(int(rng.integers(1, 25)), 1)
        if i % 3 == 0:
            batch = [r._replace(headers=(("h", b"v"), ("n", None))) for r in batch]
        codec = list(Compression)[i % len(Compression)]
        parts.append(v2.encode_batch(batch, compression=codec, partition_leader_epoch=3))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(parts))
    os.utime(path, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    return path


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("options", OPTIONS[:3], ids=["default", "none-xxh3", "target-v1"])
def test_generated_segments_with_every_codec_convert_to_the_same_bytes_in_ranges(tmp_path, seed, options):
    src = _mixed_segment(tmp_path / "in" / f"{1000:020d}.log", seed)
    size = src.stat().st_size
    assert size > 200_000
    for count in (2, 5, 16, 97):
        _same_as_whole(src, tmp_path / str(count), options, range_cuts(size, count))
    rng = np.random.default_rng(seed)
    for trial in range(4):  # uneven ranges, some smaller than one entry
        cuts = sorted({0, size, *rng.integers(1, size, 12).tolist()})
        _same_as_whole(src, tmp_path / f"r{trial}", options, list(itertools.pairwise(cuts)))


# --- ranges written straight into their place in the joined file --------------------------------------------------


def _plain_segment(path: Path, seed: int, huge: int = 0) -> Path:
    """The segments whose layout a plan predicts: uncompressed v0 then v1 messages whose key and value lengths cross
    every varint size a v2 record gives them (63/64, 8191/8192 bytes), null and empty keys and values, offset gaps,
    then v2 batches of every codec a later broker appended (kept as they are). ``huge``: one value that large."""
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 63, 64, 65, 8191, 8192, 8193]
    offset = 5000
    parts = []
    for magic in (0, 1):
        for _ in range(40):
            batch = []
            for _ in range(int(rng.integers(1, 12))):
                offset += 1 + int(rng.integers(0, 3))
                k = int(rng.choice(sizes)) if rng.random() < 0.5 else int(rng.integers(0, 300))
                v = int(rng.choice(sizes)) if rng.random() < 0.5 else int(rng.integers(0, 3000))
                key = None if rng.random() < 0.1 else rng.bytes(k)
                value = None if rng.random() < 0.1 else rng.bytes(v)
                batch.append(Record(offset, 1_600_000_000_000 + offset if magic else -1, key, value))
            parts.append(legacy.encode_messages(batch, magic))
    if huge:
        offset += 1
        parts.append(legacy.encode_messages([Record(offset, 1_700_000_000_000, b"big", rng.bytes(huge))], 1))
    for i, codec in enumerate(Compression):
        batch = [Record(offset + j + 1, 1_700_000_000_000, b"k", rng.bytes(100)) for j in range(5 + i)]
        offset += len(batch)
        parts.append(v2.encode_batch(batch, compression=codec, partition_leader_epoch=2))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(parts))
    os.utime(path, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    return path


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_plan_predicts_where_each_ranges_converted_bytes_go(tmp_path, seed):
    src = _plain_segment(tmp_path / "in" / f"{5000:020d}.log", seed)
    data = src.read_bytes()
    whole = convert_segment(SegmentTask(str(src), str(tmp_path / "whole"), 5000, ConvertOptions()))
    out = Path(whole.outputs[FileKind.LOG]).read_bytes()
    entry_starts = set(walk_entries(data).positions.tolist())
    batch_starts = set(walk_entries(out).positions.tolist())
    for count in (2, 7, 40, 300):
        spans = planned_ranges(src, count)
        assert all(s.output is not None for s in spans)
        assert (spans[0].output_start, spans[-1].output_end, spans[-1].end) == (0, len(out), len(data))
        for s in spans:
            assert s.start in entry_starts and s.output_start in batch_starts, (count, s)
            # the entry and the batch it converts to start with the same offset
            assert data[s.start : s.start + 8] == out[s.output_start : s.output_start + 8], (count, s)


@pytest.mark.parametrize("seed", [1, 2])
def test_ranges_written_in_their_planned_place_give_the_bytes_of_a_whole_run(tmp_path, seed):
    rng = np.random.default_rng(seed)
    src = _plain_segment(tmp_path / "in" / f"{5000:020d}.log", seed)
    for count in (2, 5, 16, 97):
        spans = planned_ranges(src, count)
        order = rng.permutation(len(spans)).tolist()
        cuts, outputs = [(s.start, s.end) for s in spans], [s.output for s in spans]
        for run in (None, f"run{count}"):
            parts = _same_as_whole(src, tmp_path / f"{count}-{run}", ConvertOptions(), cuts, None, run, order, outputs)
            assert all(p.in_place for p in parts), count
    for src in SEGMENTS:  # a fixture whose layout cannot be predicted (wrappers) gets nominal ranges, as before
        spans = planned_ranges(src, 3)
        work = tmp_path / f"{src.parent.name}-{src.stem}"
        outputs = [s.output for s in spans]
        _same_as_whole(
            _copy(src, work / "in"), work, ConvertOptions(), [(s.start, s.end) for s in spans], None, "r", None, outputs
        )


def test_an_entry_larger_than_a_range_joins_the_cuts_inside_it(tmp_path):
    src = _plain_segment(tmp_path / "in" / f"{5000:020d}.log", 4, huge=300_000)
    size = src.stat().st_size
    spans = planned_ranges(src, 40)  # ranges of about 20 KB: several cuts fall inside the 300 KB message
    assert 1 < len(spans) < 40 and spans[0].count == len(spans)
    assert all(a.end == b.start and a.start < a.end for a, b in itertools.pairwise(spans)) and spans[-1].end == size
    parts = _same_as_whole(
        src, tmp_path, ConvertOptions(), [(s.start, s.end) for s in spans], None, "r", None, [s.output for s in spans]
    )
    assert all(p.in_place for p in parts)


@pytest.mark.parametrize("shift", [-1, 1, 61])
def test_a_range_whose_planned_place_is_wrong_makes_the_join_convert_the_segment_whole(tmp_path, shift):
    """A place that does not hold (a bug in the prediction, a file changed in a way its size, mtime and inode do not
    show) costs a whole conversion, never wrong bytes."""
    src = _plain_segment(tmp_path / "in" / f"{5000:020d}.log", 5)
    spans = planned_ranges(src, 6)
    outputs = [s.output for s in spans]
    outputs[2] = (outputs[2][0], outputs[2][1] + shift)
    outputs[3] = (outputs[3][0] + shift, outputs[3][1])
    parts = _same_as_whole(
        src, tmp_path, ConvertOptions(), [(s.start, s.end) for s in spans], None, "r", [5, 3, 2, 4, 0, 1], outputs
    )
    assert not parts[2].in_place and not parts[3].in_place and parts[0].in_place


def test_the_plan_predicts_no_places_where_sizes_are_known_only_once_written(tmp_path):
    plain = _plain_segment(tmp_path / "in" / f"{5000:020d}.log", 6)
    gzip = LEGACY_LOGDIR / "gzip-v0-0" / "00000000000000000092.log"
    assert all(s.output is not None for s in planned_ranges(plain, 4))
    assert all(s.output is None for s in planned_ranges(gzip, 4))  # a wrapper is recompressed
    log_dir = make_broker_logdir(tmp_path / "b", ["plain-v0-1"])
    for options, predicted in [
        (ConvertOptions(), True),
        (ConvertOptions(compression="lz4"), False),
        (ConvertOptions(target_magic=1), False),
    ]:
        plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), range_bytes=600, options=options))
        spans = [t.byte_range for t in plan.tasks if t.byte_range is not None]
        assert spans and all((s.output is not None) == predicted for s in spans), options
        segments = [s for p in plan.log_dirs[0].partitions for s in p.segments]
        assert all((s.range_cuts is not None) == predicted for s in segments if s.size > 600)


def _embedded_segment(path: Path) -> tuple[Path, int, int]:
    """v0 messages, one of which carries as the end of its value a whole message set of four messages with
    plausible offsets and valid CRCs: exactly what a range looking for its first entry can mistake for entries.
    Returns the path, where the embedded set starts and where the message holding it ends."""
    fake = legacy.encode_messages([Record(2010 + i, -1, b"k", b"fake") for i in range(4)], 0)
    real = [Record(2000 + i, -1, b"key", b"x" * 300) for i in range(20)]
    host = Record(2020, -1, b"key", b"y" * 200 + fake)
    tail = [Record(2021 + i, -1, b"key", b"z" * 300) for i in range(20)]
    head = legacy.encode_messages(real, 0)
    data = head + legacy.encode_messages([host], 0) + legacy.encode_messages(tail, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    host_end = len(head) + 12 + struct.unpack_from(">i", data, len(head) + 8)[0]
    return path, host_end - len(fake), host_end


def test_a_false_entry_start_in_a_range_is_caught_and_converted_again(tmp_path):
    src, fake_at, true_start = _embedded_segment(tmp_path / "in" / f"{2000:020d}.log")
    nominal = fake_at - 5  # inside the value that holds the message set
    with open(src, "rb") as f:
        proposed = find_entry_start(f, nominal, src.stat().st_size, 2000, 1 << 20)
    assert proposed == fake_at != true_start  # the chain from inside the value looks like entries
    cuts = [(0, nominal), (nominal, src.stat().st_size)]
    task = SegmentTask(str(src), str(tmp_path / "ranges"), 2000, ConvertOptions())
    joined, parts = convert_in_ranges(task, cuts, run="r", order=[1, 0])
    assert parts[1].start == fake_at and parts[0].stop == true_start  # the join saw the mismatch
    whole = convert_segment(dataclasses.replace(task, staging_dir=str(tmp_path / "whole")))
    for sfx, path in whole.outputs.items():
        assert Path(joined.outputs[sfx]).read_bytes() == Path(path).read_bytes()
    assert joined.records == whole.records == 41
    assert verify_segment(joined, ConvertOptions()).ok


def test_a_range_refusing_bytes_after_a_false_start_does_not_refuse_the_segment(tmp_path):
    # the fixture's gzip wrapper holds a message set whose chain runs into a "torn tail" when read from inside it
    src = _copy(LEGACY_LOGDIR / "gzip-v0-0" / "00000000000000000092.log", tmp_path / "in")
    data = src.read_bytes()
    consumed = walk_entries(data).consumed
    assert consumed == len(data)
    with open(src, "rb") as f:
        proposed = find_entry_start(f, 2084, len(data), 92, 1 << 20)
    assert proposed not in walk_entries(data).positions.tolist()
    _same_as_whole(src, tmp_path, ConvertOptions(), [(0, 2084), (2084, len(data))])


def test_a_damaged_entry_refuses_the_segment_at_its_position_whichever_range_reads_it(tmp_path):
    src = _mixed_segment(tmp_path / "in" / f"{1000:020d}.log", 3)
    data = bytearray(src.read_bytes())
    walk = walk_entries(bytes(data))
    victim = int(walk.positions[len(walk.positions) * 2 // 3])
    data[victim + 30] ^= 0xFF
    src.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as whole:
        convert_segment(SegmentTask(str(src), str(tmp_path / "w"), 1000))
    assert whole.value.position == victim
    for count in (2, 9):
        _same_as_whole(src, tmp_path / str(count), ConvertOptions(), range_cuts(len(data), count))


def test_offsets_that_go_back_across_ranges_are_refused_as_a_whole_conversion_refuses_them(tmp_path):
    first = legacy.encode_messages([Record(100 + i, -1, b"k", b"v" * 400) for i in range(20)], 0)
    second = legacy.encode_messages([Record(50 + i, -1, b"k", b"v" * 400) for i in range(20)], 0)
    src = tmp_path / "in" / f"{0:020d}.log"
    src.parent.mkdir()
    src.write_bytes(first + second)
    with pytest.raises(CorruptRecordError, match="offset 50 does not increase on offset 119") as whole:
        convert_segment(SegmentTask(str(src), str(tmp_path / "w"), 0))
    assert whole.value.position == len(first)
    with pytest.raises(CorruptRecordError, match="offset 50 does not follow offset 119") as err:
        convert_in_ranges(
            SegmentTask(str(src), str(tmp_path / "r"), 0), [(0, len(first)), (len(first), 2 * len(first))]
        )
    assert err.value.position == len(first)
    assert not list((tmp_path / "r").iterdir())


def test_the_composite_digest_is_checked_by_the_verifier(tmp_path):
    src = _mixed_segment(tmp_path / "in" / f"{1000:020d}.log", 4)
    task = SegmentTask(str(src), str(tmp_path / "r"), 1000, ConvertOptions(digest="xxh3-128"))
    joined, _ = convert_in_ranges(task, range_cuts(src.stat().st_size, 4))
    assert len(joined.digest_splits) == 3 and len(joined.output_digest_ts) == 32
    assert verify_segment(joined, task.options).ok
    moved = dataclasses.replace(joined, digest_splits=(joined.digest_splits[0] + 1, *joined.digest_splits[1:]))
    check = verify_segment(moved, task.options)
    assert not check.ok and any("differ" in p for p in check.problems)


# --- the plan ----------------------------------------------------------------------------------------------------


def _ranged_plan(tmp_path: Path, log_dir: Path, range_bytes: int, **request):
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), range_bytes=range_bytes, **request))
    path = tmp_path / "plan.json"
    write_plan(plan, path)
    return plan, path


def test_make_tasks_splits_large_segments_and_plans_keep_their_ranges(tmp_path):
    log_dir = make_broker_logdir(tmp_path, ["plain-v0-1", "gzip-v0-0", "lz4-v1-1"])
    plan, path = _ranged_plan(tmp_path, log_dir, 3000)
    ranged = [t for t in plan.tasks if t.byte_range is not None]
    assert ranged and all(len(t.segments) == 1 for t in ranged)
    by_segment: dict = {}
    for t in ranged:
        by_segment.setdefault(t.segments[0], []).append(t.byte_range)
    for ref, spans in by_segment.items():
        size = plan.partition(plan.log_dirs[0].key, ref.partition).segment_by_base[ref.base_offset].size
        assert size > 3000 and spans[0].start == 0 and spans[-1].end == size
        assert [s.index for s in spans] == list(range(len(spans))) == list(range(spans[0].count))
        assert all(s.end - s.start <= 3000 for s in spans)
    small = [t for t in plan.tasks if t.byte_range is None]
    assert all(
        plan.partition(plan.log_dirs[0].key, r.partition).segment_by_base[r.base_offset].size <= 3000
        for t in small
        for r in t.segments
    )
    assert load_plan_json(path.read_text()) == plan
    unranged = make_tasks(list(plan.log_dirs), 64 << 20, 256, range_bytes=None)
    assert all(t.byte_range is None for t in unranged)
    assert "byte_range" not in dump_plan_json(dataclasses.replace(plan, tasks=unranged))
    packed = make_tasks(list(plan.log_dirs), 64 << 20, 256, range_bytes=3000, options=ConvertOptions(pack_bytes=999))
    assert all(t.byte_range is None for t in packed)


def _second_range(plan):
    return next(t.byte_range for t in plan.tasks if t.byte_range is not None and t.byte_range.index == 1)


def _with_second_range(plan, span: ByteRange):
    """``plan`` with its first segment's second range replaced by ``span``, under a new id (edited, not stale)."""
    tasks = [dataclasses.replace(t, byte_range=span) if t.byte_range == _second_range(plan) else t for t in plan.tasks]
    bad = dataclasses.replace(plan, tasks=tuple(tasks))
    return dataclasses.replace(bad, plan_id=content_id(bad))


def test_a_plan_whose_ranges_do_not_cover_the_segment_is_refused(tmp_path):
    log_dir = make_broker_logdir(tmp_path, ["gzip-v0-0"])
    plan, _ = _ranged_plan(tmp_path, log_dir, 3000)
    span = _second_range(plan)
    bad = _with_second_range(plan, ByteRange(span.index, span.count, span.start + 1, span.end))
    with pytest.raises(ModelError, match="do not cover"):
        bad.check_integrity()


def test_a_plan_whose_range_outputs_do_not_follow_one_another_is_refused(tmp_path):
    log_dir = make_broker_logdir(tmp_path, ["plain-v0-1"])
    plan, _ = _ranged_plan(tmp_path, log_dir, 600)
    span = _second_range(plan)
    assert span.output is not None
    for wrong in (
        dataclasses.replace(span, output_start=span.output_start + 1),
        dataclasses.replace(span, output_start=None, output_end=None),
    ):
        with pytest.raises(ModelError, match="outputs do not follow"):
            _with_second_range(plan, wrong).check_integrity()


# --- execute -----------------------------------------------------------------------------------------------------

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1", "snappy-v0-0", "mixed-v0-v1-0"]


def _live_files(log_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(log_dir)): p.read_bytes()
        for p in sorted(log_dir.glob("*/*"))
        if p.suffix in (".log", ".index", ".timeindex")
    }


@pytest.fixture(scope="module")  # read only: every test compares with it
def whole_run(tmp_path_factory) -> dict[str, bytes]:
    """The live files after a migration planned without ranges: what a ranged run must leave too."""
    root = tmp_path_factory.mktemp("whole")
    log_dir = make_broker_logdir(root, PARTITIONS)
    plan, _ = _ranged_plan(root, log_dir, 0)
    assert all(t.byte_range is None for t in plan.tasks)
    assert pipeline.execute(plan, SerialEngine()).ok
    return _live_files(log_dir)


def test_execute_with_ranges_records_one_outcome_per_segment_and_the_bytes_of_a_whole_run(tmp_path, whole_run):
    log_dir = make_broker_logdir(tmp_path, PARTITIONS)
    before = snapshot(log_dir)
    plan, path = _ranged_plan(tmp_path, log_dir, 2500)
    assert sum(t.byte_range is not None for t in plan.tasks) > 10
    seen = []
    report = pipeline.execute(plan, SerialEngine(on_segment=seen.append))
    assert report.ok, (report.errors, report.problems)
    assert "join" in report.stage_seconds
    planned = sum(len(p.segments) for p in plan.log_dirs[0].partitions)
    outcomes = [o for o in seen if isinstance(o, SegmentOutcome)]  # the rest: ranges' progress (test_monitor)
    assert report.totals.verified + report.totals.unchanged == planned == len(outcomes)
    assert len({(o.partition, o.base_offset) for o in outcomes}) == planned
    assert _live_files(log_dir) == whole_run
    assert_scan_agrees(plan, report)
    assert pipeline.verify_live(plan, SerialEngine()).ok
    again = pipeline.execute(plan, SerialEngine())  # nothing left: every range task and join skips
    assert again.ok and again.totals.verified == 0
    assert pipeline.rollback(plan, SerialEngine(), path).ok
    assert snapshot(log_dir) == before


def test_a_damaged_segment_fails_its_partition_only_when_converted_in_ranges(tmp_path):
    log_dir = make_broker_logdir(tmp_path, ["plain-v0-1", "gzip-v0-0"])
    plan, _ = _ranged_plan(tmp_path, log_dir, 3000)
    # damaged after planning, in place (same inode, size and mtime): the plan cannot tell, the conversion must
    seg = sorted((log_dir / "gzip-v0-0").glob("*.log"))[0]
    st = seg.stat()
    victim = int(walk_entries(seg.read_bytes()).positions[-2])
    with open(seg, "r+b") as f:
        f.seek(victim + 40)
        byte = f.read(1)
        f.seek(victim + 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    states = {p.partition: p.state for p in report.log_dirs[0].partitions}
    assert states == {"gzip-v0-0": PartitionState.FAILED, "plain-v0-1": PartitionState.MIGRATED}
    (problem,) = [o.problem for o in report.problems]
    assert problem.kind == "corrupt" and problem.position == victim and problem.path == str(seg)
    assert "CRC" in problem.message
    assert not list(log_dir.glob("*/.kafka-log-migrate-*/*.range-*"))
    assert_scan_agrees(plan, report)


@pytest.mark.parametrize(
    "point", ["before:convert-range:3", "before:join:2", "before:syncfs", "commit:outcomes:2", "before:exchange"]
)
def test_a_crash_between_ranges_and_join_resumes_or_rolls_back(tmp_path, whole_run, point):
    log_dir = make_broker_logdir(tmp_path, PARTITIONS)
    before = snapshot(log_dir)
    plan, path = _ranged_plan(tmp_path, log_dir, 600)
    assert all(t.byte_range is not None for t in plan.tasks)  # every "before:syncfs" is a join's
    assert run_verb("execute", path, {CRASH_ENV: point}) == CRASH_EXIT
    assert run_verb("execute", path, {}) == 0
    assert _live_files(log_dir) == whole_run
    assert not list(log_dir.glob("*/.kafka-log-migrate-*/*.range-*"))  # no part file outlives its join
    assert run_verb("rollback", path, {}) == 0
    assert snapshot(log_dir) == before
    # and the other way: crash, then roll back straight away
    assert run_verb("execute", path, {CRASH_ENV: point}) == CRASH_EXIT
    assert run_verb("rollback", path, {}) == 0
    assert snapshot(log_dir) == before


def test_ranges_on_dask_workers_give_the_bytes_of_a_whole_run(tmp_path, whole_run):
    from migrate.engines.dask import DaskEngine

    log_dir = make_broker_logdir(tmp_path, PARTITIONS)
    plan, _ = _ranged_plan(tmp_path, log_dir, 2500)
    engine = DaskEngine(n_workers=2, dashboard_address="127.0.0.1:0", progress=False)
    try:
        engine.start_workers(wait=True)  # every range on a worker, none in this process
        report = pipeline.execute(plan, engine)
    finally:
        engine.close()
    assert report.ok, (report.errors, report.problems)
    assert _live_files(log_dir) == whole_run
    assert_scan_agrees(plan, report)
