"""``dump`` of .index and .timeindex files: their entries as kafka-dump-log prints them, DumpLogSegments' checks
against the .log, and the sanity check, on indexes our converter wrote and on indexes damaged on purpose."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from conftest import LEGACY_LOGDIR, run_cli

from migrate.kafka.names import FileKind
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentTask
from migrate.reports.dump import index_files
from migrate.segment import offset_index, time_index
from migrate.segment.convert import convert_segment

# one xdist worker: the fixtures convert once
pytestmark = pytest.mark.xdist_group("dump_index")

SOURCES = [
    "plain-v1-0/00000000000000000000.log",  # v1 CreateTime, timestamps out of order: the time index skips some
    "lz4-v1-0/00000000000000000000.log",  # big LZ4 wrappers, one v2 batch each
    "mixed-v1-v2-0/00000000000000000018.log",  # v2 batches copied as they are, base offset 18
    "plain-v0-0/00000000000000000040.log",  # v0: LogAppendTime at the segment's mtime, a one-entry time index
]
INTERVAL = 256  # small, so that every segment gets several offset index entries


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each source converted by migrate.segment.convert: its staged .log (with .index and .timeindex beside)."""
    out = {}
    for name in SOURCES:
        src = LEGACY_LOGDIR / name
        staging = tmp_path_factory.mktemp(name.split("/")[0])
        task = SegmentTask(str(src), str(staging), int(src.stem), ConvertOptions(index_interval_bytes=INTERVAL))
        result = convert_segment(task)
        out[name] = Path(result.outputs[FileKind.LOG])
    return out


def writable_copy(log: Path, into: Path) -> Path:
    into.mkdir()
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(log.with_suffix(suffix), into)
        (into / log.with_suffix(suffix).name).chmod(0o644)
    return into / log.name


@pytest.mark.parametrize("name", SOURCES)
def test_index_dumps_list_the_entries_the_files_hold(
    name: str, converted: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    log = converted[name]
    base = int(log.stem)
    index, timeindex = log.with_suffix(".index"), log.with_suffix(".timeindex")
    offsets, positions = offset_index.decode(index.read_bytes(), base)
    timestamps, time_offsets = time_index.decode(timeindex.read_bytes(), base)
    assert len(offsets) >= 3 and len(timestamps) >= 1
    ran = run_cli(capsys, "dump", index, timeindex)
    assert (ran.code, ran.err) == (0, "")
    assert ran.lines == [
        f"Dumping {index}",
        *(f"offset: {o} position: {p}" for o, p in zip(offsets.tolist(), positions.tolist())),
        f"Dumping {timeindex}",
        *(f"timestamp: {t} offset: {o}" for t, o in zip(timestamps.tolist(), time_offsets.tolist())),
    ]


def test_index_dump_spot_values(converted: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    log = converted["plain-v1-0/00000000000000000000.log"]
    ran = run_cli(capsys, "dump", "--files", f"{log.with_suffix('.index')},{log.with_suffix('.timeindex')}")
    assert ran.lines[1:4] == ["offset: 3 position: 298", "offset: 7 position: 737", "offset: 9 position: 1096"]
    at = ran.lines.index(f"Dumping {log.with_suffix('.timeindex')}")
    # the first entry names offset 2: its batch holds the largest timestamp up to the first indexed batch
    assert ran.lines[at + 1 : at + 3] == ["timestamp: 1515542460000 offset: 2", "timestamp: 1515542640000 offset: 7"]
    assert ran.lines[-1] == "timestamp: 1515544560000 offset: 39"  # the roll entry: the segment's max timestamp


@pytest.mark.oracle
def test_converted_index_entries_agree_with_kafkas_reading_of_the_log(converted: dict[str, Path], oracle) -> None:
    """What DumpLogSegments checks, judged by Kafka's own reader rather than ours."""
    for name, log in converted.items():
        base = int(log.stem)
        lines = oracle.dump(log)
        batches = {x["position"]: x for x in lines if x["type"] == "batch"}
        max_ts: dict[int, int] = {}
        for x in lines:
            if x["type"] == "batch":
                last = x["lastOffset"]
            else:
                max_ts[last] = max(max_ts.get(last, -1), x["timestamp"])
        offsets, positions = offset_index.decode(log.with_suffix(".index").read_bytes(), base)
        for offset, position in zip(offsets.tolist(), positions.tolist()):
            assert batches[position]["lastOffset"] == offset, (name, offset)
        timestamps, time_offsets = time_index.decode(log.with_suffix(".timeindex").read_bytes(), base)
        assert all(a < b for a, b in itertools.pairwise(timestamps.tolist()))
        for timestamp, offset in zip(timestamps.tolist(), time_offsets.tolist()):
            assert max_ts[offset] == timestamp, (name, offset)


def test_verify_index_only_and_sanity_check_pass_on_converted_segments(
    converted: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files = [log.with_suffix(s) for log in converted.values() for s in (".index", ".timeindex")]
    ran = run_cli(capsys, "dump", "--verify-index-only", *files)
    assert (ran.code, ran.err) == (0, "")
    assert ran.lines == [f"Dumping {f}" for f in files]  # verified, nothing printed
    ran = run_cli(capsys, "dump", "--index-sanity-check", *files)
    assert (ran.code, ran.err) == (0, "")
    assert ran.lines == [line for f in files for line in (f"Dumping {f}", f"{f} passed sanity check.")]


def test_index_json_lines(converted: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    log = converted["mixed-v1-v2-0/00000000000000000018.log"]
    ran = run_cli(capsys, "dump", "--json", log.with_suffix(".index"), log.with_suffix(".timeindex"))
    lines = [json.loads(x) for x in ran.lines]
    offsets, positions = offset_index.decode(log.with_suffix(".index").read_bytes(), 18)
    index_lines = [x for x in lines if x["type"] == "index"]
    assert index_lines == [
        {"type": "index", "entry": i, "offset": o, "position": p}
        for i, (o, p) in enumerate(zip(offsets.tolist(), positions.tolist()))
    ]
    assert lines[0] == {"type": "file", "path": str(log.with_suffix(".index")), "bytes": 8 * len(offsets)}
    assert {x["type"] for x in lines} == {"file", "index", "timeindex"} and ran.code == 0


# --- damaged on purpose -----------------------------------------------------------------------------------------


def patch(path: Path, at: int, fmt: str, value: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, at, value)
    path.write_bytes(data)


@pytest.fixture
def damaged(converted: dict[str, Path], tmp_path: Path) -> Path:
    """A writable copy of plain-v1-0's converted segment (18 offset index entries, 19 time index entries)."""
    return writable_copy(converted["plain-v1-0/00000000000000000000.log"], tmp_path / "seg")


def test_entry_whose_offset_is_not_the_logs_is_named(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = damaged.with_suffix(".index")
    patch(index, 3 * 8, ">i", 10)  # entry 3 is (11, 1444); 10 still lies between its neighbours 9 and 13
    ran = run_cli(capsys, "dump", "--verify-index-only", index)
    assert ran.code == 1 and ran.lines == [f"Dumping {index}"]
    assert ran.err.splitlines()[:2] == [
        f"Mismatches in :{os.path.abspath(index)}",
        "  Index offset: 10, log offset: 11 (entry 3 at byte 24, position 1444)",
    ]
    assert "delete this segment's .index and .timeindex" in ran.err
    ran = run_cli(capsys, "dump", index)  # dumped as it is, and the same report
    assert (
        "offset: 10 position: 1444" in ran.lines and "Index offset: 10, log offset: 11 (entry 3 at byte 24" in ran.err
    )
    # Kafka's sanity check does not read the log, and this entry is well-formed: it passes
    sane = run_cli(capsys, "dump", "--index-sanity-check", index)
    assert (sane.code, sane.lines) == (
        0,
        [f"Dumping {index}", f"{index} passed sanity check."],
    )


def test_non_increasing_entry_is_named(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = damaged.with_suffix(".index")
    patch(index, 6 * 8, ">i", 15)  # entry 6 (18, 2765) now repeats entry 5's offset 15
    ran = run_cli(capsys, "dump", "--index-sanity-check", index)
    assert ran.code == 1 and ran.lines == [f"Dumping {index}"]
    assert ran.err.splitlines()[:2] == [
        f"Corrupt index entries in :{index}",
        "  entry 6 at byte 48: offset 15 does not increase on entry 5's offset 15",
    ]
    assert f"kafka-log-migrate: error: {index} failed the index sanity check: 1 problem (listed above)." in ran.err
    ran = run_cli(capsys, "dump", "--verify-index-only", index)
    assert ran.code == 1
    assert "  entry 6 at byte 48: offset 15 does not increase on entry 5's offset 15" in ran.err.splitlines()
    assert "  Index offset: 15, log offset: 18 (entry 6 at byte 48, position 2765)" in ran.err.splitlines()


def test_truncated_index_names_its_cut_last_entry(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = damaged.with_suffix(".index")
    index.write_bytes(index.read_bytes()[:-3])  # 141 bytes: 17 entries and 5 bytes of the 18th
    ran = run_cli(capsys, "dump", "--index-sanity-check", index)
    assert ran.code == 1 and ran.lines == [f"Dumping {index}"]
    assert ran.err.splitlines()[1] == (
        "  entry 17 at byte 136 is cut: the offset index is 141 bytes, not a multiple of 8 (5 of the entry's 8 bytes "
        "are present)"
    )
    ran = run_cli(capsys, "dump", index)
    assert ran.code == 1 and len(ran.lines) == 1 + 17  # like Kafka, the whole entries are dumped
    assert "entry 17 at byte 136 is cut" in ran.err


def test_time_index_with_a_decreasing_timestamp_is_named(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    timeindex = damaged.with_suffix(".timeindex")
    patch(timeindex, 4 * 12, ">q", 1515542000000)  # entry 4 (1515543000000, 13) goes back before entry 3
    ran = run_cli(capsys, "dump", "--index-sanity-check", timeindex)
    assert ran.code == 1
    assert ran.err.splitlines()[:2] == [
        f"Found out of order timestamp in :{timeindex}",
        "  Index timestamp: 1515542000000, Previously indexed timestamp: 1515542880000 (entry 4 at byte 48, previous: "
        "entry 3)",
    ]
    ran = run_cli(capsys, "dump", timeindex)
    assert ran.code == 1 and "timestamp: 1515542000000 offset: 13" in ran.lines
    lines = ran.err.splitlines()
    assert f"Found timestamp mismatch in :{os.path.abspath(timeindex)}" in lines
    assert (
        "  Index timestamp: 1515542000000, log timestamp: 1515543000000 (entry 4 at byte 48, offset 13, log position "
        "1956)"
    ) in lines


def test_time_index_entry_not_ending_a_batch_is_named(
    converted: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = writable_copy(converted["lz4-v1-0/00000000000000000000.log"], tmp_path / "lz4")
    timeindex = log.with_suffix(".timeindex")
    patch(timeindex, 2 * 12 + 8, ">i", 50)  # entry 2 (1519862483000, 86): 50 is inside the batch 17..86
    ran = run_cli(capsys, "dump", "--verify-index-only", timeindex)
    assert ran.code == 1
    assert ran.err.splitlines()[:2] == [
        f"The following indexed offsets are not found in the log :{os.path.abspath(timeindex)}",
        "  Indexed offset: 50, found log offset: 86 (entry 2 at byte 24, timestamp 1519862483000)",
    ]


def test_positions_off_entry_starts_or_past_the_log_are_named(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = damaged.with_suffix(".index")
    patch(index, 1 * 8 + 4, ">i", 740)  # entry 1 (7, 737): 3 bytes into the batch
    patch(index, 17 * 8 + 4, ">i", 999_999)  # the last entry (38, 6198)
    ran = run_cli(capsys, "dump", "--verify-index-only", index)
    assert ran.code == 1
    lines = ran.err.splitlines()
    assert (
        "  entry 1 at byte 8: offset 7 at position 740, which is not where an entry of 00000000000000000000.log "
        "starts (the entry around it starts at 737)"
    ) in lines
    assert (
        "  entry 17 at byte 136: offset 38 at position 999999, beyond the end of 00000000000000000000.log (6714 bytes)"
    ) in lines


def test_zero_filled_preallocated_rest_is_not_damage(damaged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An active segment's index is preallocated with zeros; Kafka's dump stops at the first zero entry."""
    index = damaged.with_suffix(".index")
    entries = run_cli(capsys, "dump", index).lines
    index.write_bytes(index.read_bytes() + bytes(8 * 100))
    again = run_cli(capsys, "dump", index)
    assert (again.code, again.lines, again.err) == (0, entries, "")
    sane = run_cli(capsys, "dump", "--index-sanity-check", index)
    assert (sane.code, sane.err) == (0, "")
    index.write_bytes(index.read_bytes()[: 8 * 18] + bytes(8) + index.read_bytes()[: 8 * 2])  # zeros, then data
    ran = run_cli(capsys, "dump", "--index-sanity-check", index)
    assert ran.code == 1 and "  entry 18 at byte 144: offset 0 does not increase on entry 17's offset 38" in ran.err


def test_index_without_its_log_is_dumped_and_the_missing_log_named(
    damaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damaged.unlink()
    index = damaged.with_suffix(".index")
    ran = run_cli(capsys, "dump", index)
    assert ran.code == 1 and len(ran.lines) == 1 + 18
    assert ran.err.startswith(f"kafka-log-migrate: error: {index}: its log segment {damaged} does not exist")
    assert run_cli(capsys, "dump", "--index-sanity-check", index).code == 0  # the structure alone needs no log


def test_empty_and_misnamed_index_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "00000000000000000000.index"
    empty.write_bytes(b"")
    dumped = run_cli(capsys, "dump", empty)
    assert (dumped.code, dumped.lines, dumped.err) == (0, [f"Dumping {empty}", f"{empty} is empty."], "")
    misnamed = tmp_path / "orders.index"
    misnamed.write_bytes(bytes(8))
    ran = run_cli(capsys, "dump", misnamed)
    assert ran.code == 1 and "cannot tell the segment's base offset from the file name" in ran.err


def test_unsupported_kafka_files_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    txn = tmp_path / "00000000000000000000.txnindex"
    txn.write_bytes(b"")
    ran = run_cli(capsys, "dump", txn)
    assert ran.code == 1 and "does not dump a transaction index (.txnindex); use Kafka's kafka-dump-log.sh" in ran.err


# --- the checks as pure functions -------------------------------------------------------------------------------


def offset_entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in pairs)


def test_offset_index_sanity_names_every_bad_entry() -> None:
    data = offset_entries((5, 100), (-3, 200), (9, 150), (9, 400)) + b"\x00\x01"
    texts = [(p.entry, p.byte, p.text) for p in index_files.offset_index_sanity(data, 1000)]
    assert texts == [
        (
            4,
            32,
            "entry 4 at byte 32 is cut: the offset index is 34 bytes, not a multiple of 8 (2 of the entry's 8 "
            "bytes are present)",
        ),
        (1, 8, "entry 1 at byte 8: offset 997 is below the base offset 1000"),
        (1, 8, "entry 1 at byte 8: offset 997 does not increase on entry 0's offset 1005"),
        (2, 16, "entry 2 at byte 16: position 150 does not increase on entry 1's position 200"),
        (3, 24, "entry 3 at byte 24: offset 1009 does not increase on entry 2's offset 1009"),
    ]
    assert index_files.offset_index_sanity(offset_entries((0, 0), (4, 90)), 1000) == []
    # Kafka's own rule: a last offset below the base offset fails, whatever came before
    assert [p.entry for p in index_files.offset_index_sanity(offset_entries((-1, 0)), 7)] == [0]


def test_time_index_sanity_names_every_bad_entry() -> None:
    data = b"".join(struct.pack(">qi", ts, rel) for ts, rel in ((100, 2), (100, 3), (90, 1), (120, -1)))
    problems = index_files.time_index_sanity(data, 50)
    assert [(p.heading, p.entry, p.text) for p in problems] == [
        (
            index_files.TIME_OUT_OF_ORDER,
            1,
            "Index timestamp: 100, Previously indexed timestamp: 100 (entry 1 at byte 12, previous: entry 0)",
        ),
        (
            index_files.TIME_OUT_OF_ORDER,
            2,
            "Index timestamp: 90, Previously indexed timestamp: 100 (entry 2 at byte 24, previous: entry 1)",
        ),
        (index_files.CORRUPT, 2, "entry 2 at byte 24: offset 51 is below entry 1's offset 53"),
        (index_files.CORRUPT, 3, "entry 3 at byte 36: offset 49 is below the base offset 50"),
        (index_files.CORRUPT, 3, "entry 3 at byte 36: offset 49 is below entry 2's offset 51"),
    ]
