"""A source whose v2 form passes the segment size limit becomes N segments cut at batch boundaries, as Kafka's
``LocalLog.splitOverflowedSegment`` writes them (issue 25), and the whole control plane treats the 1 -> N as one unit.

The data is small: a generated v0 segment of tiny messages (each 36 bytes in v0, 78 as a v2 batch) and a small
``--max-segment-bytes``, which runs the same code as a source past 2 GiB - 1 (benchmarks/bench_split.py runs that).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from prestage_layout import gen
from runs import assert_scan_agrees, make_plan, run_verb, snapshot

from migrate import pipeline
from migrate.codec import to_json
from migrate.demo.legacy_logdir import BrokerFiles, PartitionFiles, write_broker_files
from migrate.engines import SerialEngine
from migrate.errors import ModelError
from migrate.format.digest import LogDigest
from migrate.format.entries import walk_entries
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions, SegmentPlan, TimestampPolicy
from migrate.model.run_state import SegmentTask
from migrate.run.faults import CRASH_ENV, CRASH_EXIT
from migrate.run.workspace import FENCE_NAME
from migrate.segment.indexes import IndexBuilder
from migrate.segment.split import SegmentCutter, convert_split
from migrate.segment.verify import read_back

LIMIT = 16 << 10  # --max-segment-bytes: the 91 KiB v2 form of the first segment becomes 6 segments
TOPIC = "tiny"
PART = f"{TOPIC}-0"
MTIME_NS = 1_500_000_000_123_000_000
FIRST = 1200  # records of the source that splits: offsets 0..599 and 700..1299 (a gap of 100)
SECOND = 40  # records of the partition's next segment, from offset 1300: it fits, and stays one segment


def _tiny(first: int, count: int) -> bytes:
    return gen.legacy_messages(first, count, key_bytes=6, value_bytes=4, magic=0, seed=3)


def make_tiny_logdir(root: Path, name: str = "kafka-logs") -> Path:
    """A broker log dir with one partition: a v0 segment whose v2 form passes LIMIT, then one that does not."""
    log_dir = root / name
    part = log_dir / PART
    part.mkdir(parents=True)
    (part / segment_name(0, ".log")).write_bytes(_tiny(0, FIRST // 2) + _tiny(700, FIRST // 2))
    (part / segment_name(1300, ".log")).write_bytes(_tiny(1300, SECOND))
    for log in part.glob("*.log"):
        os.utime(log, ns=(MTIME_NS, MTIME_NS))
    write_broker_files(log_dir, [PartitionFiles(TOPIC, 0, 1300 + SECOND)], BrokerFiles(broker_id=1))
    return log_dir


def _plan(tmp_path: Path, log_dir: Path, **request):
    return make_plan(tmp_path, log_dir, options=ConvertOptions(max_segment_bytes=LIMIT), **request)


def _logs(part: Path) -> list[Path]:
    return sorted(part.glob("*.log"))


@pytest.fixture
def tiny(tmp_path):
    log_dir = make_tiny_logdir(tmp_path)
    plan, plan_path = _plan(tmp_path, log_dir)
    return log_dir, plan, plan_path


def test_the_plan_says_where_it_cuts_and_converts_the_source_whole(tmp_path):
    log_dir = make_tiny_logdir(tmp_path)
    plan, _ = _plan(tmp_path, log_dir, range_bytes=8 << 10)
    segments = plan.log_dirs[0].partitions[0].segments
    split, rest = segments[0].split, segments[1].split
    assert rest is None and split is not None and split.cuts is not None
    # the cut rule over each message's v2 batch size (78 bytes, from a 36-byte v0 message): 210 batches fit
    per_output = LIMIT // 78
    assert split.outputs == len(split.cuts) + 1 == -(-FIRST // per_output) == 6
    cut_at = [per_output * k for k in range(1, 6)]
    assert [c.base_offset for c in split.cuts] == [n if n < 600 else n + 100 for n in cut_at]  # the gap is kept
    assert [c.position for c in split.cuts] == [36 * n for n in cut_at]
    # a source that splits is never cut into ranges: one task converts it, streaming
    tasks = [t for t in plan.tasks if any(r.base_offset == 0 for r in t.segments)]
    assert len(tasks) == 1 and tasks[0].byte_range is None
    # plans without splits keep their JSON, and so their ids
    assert "max_segment_bytes" not in to_json(ConvertOptions())
    assert "split" not in to_json(SegmentPlan(0, 1, 1, 1, {}, 1))
    assert to_json(plan)["options"]["max_segment_bytes"] == LIMIT
    with pytest.raises(ModelError, match="Kafka's rules only"):
        ConvertOptions(max_segment_bytes=LIMIT, pack_bytes=1000)
    with pytest.raises(ModelError, match=r"not in 1\.\.2147483647"):
        ConvertOptions(max_segment_bytes=2**31)


def test_the_cut_rule_fills_each_output_to_the_limit():
    cutter = SegmentCutter(100)
    assert cutter.cuts([40, 40, 40, 10, 60, 30]) == [2, 4]  # 80 | 40+10 (60 would pass 100) | 60+30
    assert cutter.filled == 90
    assert cutter.cuts([10, 1]) == [1]  # across calls: 90+10 fits exactly, the next byte opens an output


@pytest.mark.oracle
def test_n_outputs_kafka_reads_with_the_source_records_indexes_and_mtime(tmp_path, oracle):
    log_dir = make_tiny_logdir(tmp_path)
    # CreateTime -1 for v0 records: exactly the cleaner's bytes, so Kafka's own conversion is the reference
    options = ConvertOptions(max_segment_bytes=LIMIT, timestamps=TimestampPolicy.NONE)
    plan, _ = make_plan(tmp_path, log_dir, options=options)
    part = log_dir / PART
    source = tmp_path / "source"
    shutil.copytree(part, source)
    split = plan.log_dirs[0].partitions[0].segments[0].split
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report
    assert_scan_agrees(plan, report)
    logs = _logs(part)
    names = [0, *(c.base_offset for c in split.cuts), 1300]
    assert [p.name for p in logs] == [segment_name(b, ".log") for b in names]
    for path in part.iterdir():
        if path.suffix in (".log", ".index", ".timeindex"):
            assert path.stat().st_mtime_ns == MTIME_NS, path
    for base, log in zip(names, logs):
        data = log.read_bytes()
        assert len(data) <= LIMIT
        walk = walk_entries(data)
        assert set(walk.magics.tolist()) == {2}
        assert int.from_bytes(data[:8], "big") == base  # named after its first batch's base offset
        # each output's indexes are what Kafka's recovery builds from its batches (the project's rebuild, which the
        # index tests hold to Kafka's own)
        rebuilt = IndexBuilder(base, plan.options.index_interval_bytes)
        read_back(log, LogDigest(), rebuilt, 2)
        assert rebuilt.finish() == (log.with_suffix(".index").read_bytes(), log.with_suffix(".timeindex").read_bytes())
    # Kafka reads every output, and they hold the source's records, in order, offsets and gap kept
    dumped = oracle.dump(*logs)
    assert not [d for d in dumped if d.get("type") in ("error", "trailing")], dumped[:3]
    offsets = [d["offset"] for d in dumped if d.get("type") == "record"]
    assert offsets == [*range(600), *range(700, 1300), *range(1300, 1300 + SECOND)]
    (compared,) = oracle.compare(source, part, timestamps=False)
    assert compared["equal"] and compared["aValid"] and compared["bValid"], json.dumps(compared)
    # the N outputs, joined, are byte for byte Kafka's own conversion of the source (KAFKA-13093's cleaner rules)
    reference = tmp_path / "reference.log"
    leader_epoch = plan.log_dirs[0].partitions[0].leader_epoch
    oracle.run(
        "convert",
        "--timestamps",
        "none",
        "--leader-epoch",
        str(leader_epoch),
        source / segment_name(0, ".log"),
        reference,
    )
    assert b"".join(p.read_bytes() for p in logs[:-1]) == reference.read_bytes()


def test_replicas_of_one_source_cut_alike(tmp_path):
    outputs = []
    for broker in ("a", "b"):
        part = make_tiny_logdir(tmp_path / broker) / PART
        staging = part / "staging"
        task = SegmentTask(
            str(part / segment_name(0, ".log")),
            str(staging),
            0,
            ConvertOptions(max_segment_bytes=LIMIT, partition_leader_epoch=3),
        )
        result = convert_split(task)
        assert result.output_count == 6 and result.output_bytes == sum(p.stat().st_size for p in staging.glob("*.log"))
        outputs.append({p.name: p.read_bytes() for p in staging.iterdir()})
    assert len(outputs[0]) == 18 and outputs[0] == outputs[1]


def _segment_files(part: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in part.iterdir() if p.suffix in (".log", ".index", ".timeindex")}


def _wholly(part: Path, original: dict[str, bytes], migrated: dict[str, bytes]) -> str:
    """'original' (exactly the planned files, byte for byte: no output of ours live), 'migrated' (exactly the N
    outputs and the next segment, converted, with their indexes), else 'mixed'."""
    live = _segment_files(part)
    return "original" if live == original else "migrated" if live == migrated else "mixed"


# the split swap's and its rollback's points. The swap renames the five later outputs' 15 new files first, then
# the source's own three (its .log after a backup link), then the next segment's; the rollback puts the next segment
# back, then the source's .log (its indexes were new), then unlinks the 15 files of the later outputs
SWAP_POINTS = [
    "before:link:2",
    "after:swap-record",
    "commit:swap-begun",
    "after:new-into-fence",
    "after:exchange",
    "after:keep-original",
    "before:syncfs-swap",
    "commit:partition-migrated",
]
ROLLBACK_POINTS = [
    "commit:rollback-begun",
    "after:original-to-fence",
    "after:exchange-back",
    "after:remove-new",
    "commit:partition-rolled-back",
]


@pytest.fixture(scope="module")
def migrated_files(tmp_path_factory) -> dict[str, bytes]:
    """What the partition's live files are once migrated: from an uninterrupted run."""
    tmp = tmp_path_factory.mktemp("reference")
    log_dir = make_tiny_logdir(tmp)
    plan, _ = _plan(tmp, log_dir)
    assert pipeline.execute(plan, SerialEngine()).ok
    part = log_dir / PART
    return {p.name: p.read_bytes() for p in part.iterdir() if p.suffix in (".log", ".index", ".timeindex")}


def _cases(points: list[str], both: set[str]) -> list[tuple[str, str]]:
    """Each point recovered by one verb, in turn; the points between its two directories by both."""
    return [
        (point, then)
        for i, point in enumerate(points)
        for then in (["execute", "rollback"] if point in both else [("execute", "rollback")[i % 2]])
    ]


@pytest.mark.parametrize(("point", "then"), _cases(SWAP_POINTS, {"after:new-into-fence", "after:exchange"}))
def test_a_crash_in_a_split_swap_leaves_the_partition_old_or_new(tiny, migrated_files, point, then):
    log_dir, plan, plan_path = tiny
    part = log_dir / PART
    before, original = snapshot(log_dir), _segment_files(part)
    assert run_verb("execute", plan_path, {CRASH_ENV: point}) == CRASH_EXIT
    form = _wholly(part, original, migrated_files)
    assert form in ("original", "migrated") or (log_dir / FENCE_NAME).is_dir(), (point, form)
    _finish(then, log_dir, plan, plan_path, before, original, migrated_files)


@pytest.mark.parametrize(("point", "then"), _cases(ROLLBACK_POINTS, {"after:original-to-fence", "after:exchange-back"}))
def test_a_crash_in_a_split_rollback_leaves_the_partition_old_or_new(tiny, migrated_files, point, then):
    log_dir, plan, plan_path = tiny
    part = log_dir / PART
    before, original = snapshot(log_dir), _segment_files(part)
    assert pipeline.execute(plan, SerialEngine()).ok
    assert run_verb("rollback", plan_path, {CRASH_ENV: point}) == CRASH_EXIT
    form = _wholly(part, original, migrated_files)
    assert form in ("original", "migrated") or (log_dir / FENCE_NAME).is_dir(), (point, form)
    _finish(then, log_dir, plan, plan_path, before, original, migrated_files)


def _finish(
    then: str, log_dir: Path, plan, plan_path: Path, before: dict, original: dict, migrated: dict[str, bytes]
) -> None:
    part = log_dir / PART
    if then == "execute":
        report = pipeline.execute(plan, SerialEngine())
        assert report.ok, report
        assert_scan_agrees(plan, report)
        assert _wholly(part, original, migrated) == "migrated"
        assert not (log_dir / FENCE_NAME).exists()
        # verify re-reads the live N outputs against what was swapped in
        checked = pipeline.verify_live(plan, SerialEngine())
        assert checked.ok and checked.log_dirs[0].checked_segments == 2, checked
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert snapshot(log_dir) == before  # the extra segments gone, the original back byte for byte with its mtime
