"""``dump`` through the real command line: JSON equal to Kafka's own dump of the fixtures (the oracle's
``expected/*.jsonl``), text with kafka-dump-log.sh's fields holding Kafka's values, and the exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURE_SEGMENTS, LEGACY_LOGDIR, REPO, expected_lines, fixture_id, run_cli
from kafka.record import MemoryRecords

from migrate.cli import build_parser

JSON_SAMPLES = [
    LEGACY_LOGDIR / name
    for name in (
        "gzip-v0-0/00000000000000000000.log",  # v0 gzip wrappers and an uncompressed message between them
        "lz4-v1-1/00000000000000000000.log",  # v1 lz4, LogAppendTime (rebuilt and stamped-in-place wrappers)
        "already-v2-0/00000000000000000000.log",  # v2: every codec, headers, idempotent, transaction + marker
        "already-v2-0/00000000000000000073.log",  # v2 zstd, a header on every record
        "mixed-v1-v2-0/00000000000000000018.log",  # v1 entries followed by v2 batches in one file
        "compacted-v0-0/00000000000000000100.log",  # offset gaps; file name below the first offset
        "truncated-tail-0/00000000000000000015.log",  # 60 bytes of a partial v0 message at the end
        "truncated-tail-1/00000000000000000015.log",  # ends inside a v1 lz4 wrapper
    )
]
GZIP_V0 = LEGACY_LOGDIR / "gzip-v0-0/00000000000000000000.log"
LZ4_V1 = LEGACY_LOGDIR / "lz4-v1-0/00000000000000000000.log"
V2 = LEGACY_LOGDIR / "already-v2-0/00000000000000000000.log"
V2_HEADERS = LEGACY_LOGDIR / "already-v2-0/00000000000000000073.log"
TRUNCATED = LEGACY_LOGDIR / "truncated-tail-0/00000000000000000015.log"
COMPACTED = LEGACY_LOGDIR / "compacted-v0-0/00000000000000000100.log"
EMPTY = LEGACY_LOGDIR / "empty-segment-1/00000000000000000000.log"
TIMESTAMP_LABELS = {
    "NO_TIMESTAMP_TYPE": "NoTimestampType",
    "CREATE_TIME": "CreateTime",
    "LOG_APPEND_TIME": "LogAppendTime",
}


def without_trailing_reason(line: dict) -> dict:
    """Our reason for a partial last entry is worded differently from the oracle's; where and how long are not."""
    return {k: v for k, v in line.items() if not (line["type"] == "trailing" and k == "error")}


@pytest.mark.parametrize("segment", JSON_SAMPLES, ids=fixture_id)
def test_json_dump_equals_kafkas_dump(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--json", "--deep-iteration", segment)
    got = [json.loads(line) for line in ran.lines]
    want = expected_lines(segment)
    assert len(got) == len(want)
    for ours, kafkas in zip(got, want):
        assert list(ours) == list(kafkas)  # the same keys in the same order
        assert without_trailing_reason(ours) == without_trailing_reason(kafkas)
    assert ran.code == (1 if segment.parent.name.startswith("truncated-tail") else 0)


def test_json_dump_of_every_fixture_segment_equals_kafkas_dump(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--json", "--deep-iteration", *FIXTURE_SEGMENTS)
    files: dict[str, list[dict]] = {}
    for line in map(json.loads, ran.lines):
        if line["type"] == "file":  # one before each file, as the oracle prints when given several
            current = files.setdefault(line["path"], [])
            assert line["bytes"] == Path(line["path"]).stat().st_size
        else:
            current.append(without_trailing_reason(line))
    assert list(files) == [str(s) for s in FIXTURE_SEGMENTS]
    for segment in FIXTURE_SEGMENTS:
        assert files[str(segment)] == [without_trailing_reason(x) for x in expected_lines(segment)], segment
    assert ran.code == 1  # the two truncated-tail segments


def test_json_without_deep_iteration_has_only_batch_lines(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--json", GZIP_V0)
    want = [x for x in expected_lines(GZIP_V0) if x["type"] == "batch"]
    assert ran.code == 0 and [json.loads(line) for line in ran.lines] == want


def test_json_print_data_log_adds_the_oracles_hex_fields(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--json", "--print-data-log", V2)
    records = [x for x in map(json.loads, ran.lines) if x["type"] == "record"]
    assert len(records) == 73
    for record in records:
        for field in ("key", "value"):
            data = record[f"{field}_hex"]
            assert (data is None) == record[f"{field}Null"]
            assert data is None or len(bytes.fromhex(data)) == record[f"{field}Size"]
        assert all(len(h) == 3 for h in record["headers"])  # name, sha256, hex
    assert any(h[2] == "" for r in records for h in r["headers"])  # an empty header value is not a null one
    assert any(h[2] is None for r in records for h in r["headers"])


def kafka_text(batch: dict) -> str:
    """The entry line kafka-dump-log.sh prints for a batch, built from Kafka's own view of it (the oracle's JSON)."""
    if batch["magic"] >= 2:
        base_sequence = batch["baseSequence"]
        last_sequence = -1 if base_sequence < 0 else base_sequence + batch["lastOffset"] - batch["baseOffset"]
        head = (
            f"baseOffset: {batch['baseOffset']} lastOffset: {batch['lastOffset']} count: {batch['records']} "
            f"baseSequence: {base_sequence} lastSequence: {last_sequence} producerId: {batch['producerId']} "
            f"producerEpoch: {batch['producerEpoch']} partitionLeaderEpoch: {batch['partitionLeaderEpoch']} "
            f"isTransactional: {str(batch['isTransactional']).lower()} isControl: {str(batch['isControl']).lower()} "
            "deleteHorizonMs: OptionalLong.empty"
        )
    else:
        head = f"offset: {batch['lastOffset']}"
    return (
        f"{head} position: {batch['position']} {TIMESTAMP_LABELS[batch['timestampType']]}: {batch['maxTimestamp']} "
        f"size: {batch['sizeInBytes']} magic: {batch['magic']} compresscodec: {batch['compression']} "
        f"crc: {batch['crc']} isvalid: true"
    )


def kafka_record_text_prefix(batch: dict, record: dict) -> str:
    return (
        f"| offset: {record['offset']} {TIMESTAMP_LABELS[batch['timestampType']]}: {record['timestamp']} "
        f"keySize: {record['keySize']} valueSize: {record['valueSize']}"
    )


@pytest.mark.parametrize("segment", [GZIP_V0, LZ4_V1, V2, V2_HEADERS], ids=fixture_id)
def test_text_dump_has_kafka_dump_log_fields_with_kafkas_values(
    segment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run_cli(capsys, "dump", "--deep-iteration", segment)
    assert ran.code == 0
    assert ran.lines[:2] == [f"Dumping {segment}", f"Log starting offset: {int(segment.stem)}"]
    want = expected_lines(segment)
    assert len(ran.lines) == 2 + len(want)
    batch: dict = {}
    for line, kafkas in zip(ran.lines[2:], want):
        if kafkas["type"] == "batch":
            batch = kafkas
            assert line == kafka_text(batch)
            continue
        assert line.startswith(kafka_record_text_prefix(batch, kafkas) + " ")
        if batch["magic"] >= 2:
            names = ",".join(name for name, _ in kafkas["headers"])
            assert f" headerKeys: [{names}]" in line
        else:
            assert " isValid: true crc: " in line


def test_text_dump_of_v0_and_v2_segments_spot_values(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--deep-iteration", GZIP_V0, V2)
    assert ran.code == 0
    assert ran.lines[2] == (
        "offset: 0 position: 0 NoTimestampType: -1 size: 134 magic: 0 compresscodec: gzip crc: 3560323459 isvalid: true"
    )
    assert ran.lines[3].startswith("| offset: 0 NoTimestampType: -1 keySize: 4 valueSize: 100 isValid: true crc: ")
    out = ran.lines[ran.lines.index(f"Dumping {V2}") :]
    idempotent = next(x for x in out if x.startswith("baseOffset: 58 "))
    assert "baseSequence: 5 lastSequence: 9 producerId: 4242 producerEpoch: 0 partitionLeaderEpoch: 0" in idempotent
    assert (
        "CreateTime: 1546300806200 size: 255 magic: 2 compresscodec: zstd crc: 2801094792 isvalid: true" in idempotent
    )
    assert "| offset: 60 CreateTime: 1546300806000 keySize: 5 valueSize: 40 sequence: 7 headerKeys: []" in out
    marker = next(x for x in out if x.startswith("| offset: 67 "))
    assert marker.endswith(" endTxnMarker: COMMIT coordinatorEpoch: 1")  # the spec's COMMIT marker
    log_append = next(x for x in out if x.startswith("baseOffset: 68 "))
    assert "isControl: false deleteHorizonMs: OptionalLong.empty position: 4325 LogAppendTime: 1546300900000" in (
        log_append
    )


@pytest.mark.parametrize("segment", [GZIP_V0, LZ4_V1, LEGACY_LOGDIR / "mixed-v0-v1-0/00000000000000000000.log"])
def test_legacy_record_crcs_are_the_messages_own(segment: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inner messages of compressed wrappers carry their own CRC-32; kafka-python reads them independently."""
    ran = run_cli(capsys, "dump", "--deep-iteration", segment)
    ours = [(int(x.split()[2]), int(x.rsplit("crc: ", 1)[1])) for x in ran.lines if x.startswith("| ")]
    memory = MemoryRecords(segment.read_bytes())
    theirs = []
    while memory.has_next():
        theirs += [(r.offset, r.checksum) for r in memory.next_batch()]
    assert ours == theirs


def test_print_data_log_prints_keys_and_values_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(capsys, "dump", "--print-data-log", V2).lines
    data = run_cli(capsys, "dump", "--json", "--print-data-log", V2).lines
    records = [x for x in map(json.loads, data) if x["type"] == "record"]
    lines = [x for x in out if x.startswith("| ")]
    assert len(lines) == len(records)
    for line, record in zip(lines, records):
        if line.endswith("endTxnMarker: COMMIT coordinatorEpoch: 1"):
            continue  # Kafka prints no data for control records
        key = record["key_hex"]
        value = record["value_hex"]
        assert (" key: " in line) == (key is not None)
        if key is not None:
            assert f" key: {bytes.fromhex(key).decode('utf-8', 'replace')}" in line
        if value is not None:
            assert line.endswith(f" payload: {bytes.fromhex(value).decode('utf-8', 'replace')}")
    assert "| offset: 60 CreateTime: 1546300806000 keySize: 5 valueSize: 40 sequence: 7 headerKeys: [] key: idem2" in (
        "\n".join(out)
    )


def test_truncated_tail_is_reported_like_kafka_dump_log_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", TRUNCATED)
    assert ran.code == 1
    assert ran.lines[-1] == "Found 60 invalid bytes at the end of 00000000000000000015.log"
    assert len(ran.lines) == 2 + 9 + 1  # header lines, the 9 complete messages, the tail
    ran = run_cli(capsys, "dump", "--json", TRUNCATED)
    trailing = json.loads(ran.lines[-1])
    assert ran.code == 1 and (trailing["type"], trailing["position"], trailing["bytes"]) == ("trailing", 621, 60)


def test_max_bytes_reads_only_the_entries_within_n_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--json", "--max-bytes", "300", GZIP_V0)
    want = [x for x in expected_lines(GZIP_V0) if x["type"] == "batch" and x["position"] + x["sizeInBytes"] <= 300]
    assert ran.code == 0 and [json.loads(line) for line in ran.lines] == want  # the entry cut at byte 300 is not damage
    ran = run_cli(capsys, "dump", "--max-bytes", "1000000", TRUNCATED)
    assert ran.code == 1 and ran.lines[-1].startswith("Found 60 invalid bytes")  # N beyond the file: the whole file


def corrupt_copy(tmp_path: Path, segment: Path, at: int) -> Path:
    data = bytearray(segment.read_bytes())
    data[at] ^= 0xFF
    copy = tmp_path / segment.name
    copy.write_bytes(data)
    return copy


def test_corrupt_entry_is_printed_invalid_and_the_dump_goes_on_like_kafka_dump_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches = [x for x in expected_lines(GZIP_V0) if x["type"] == "batch"]
    bad = batches[3]
    copy = corrupt_copy(tmp_path, GZIP_V0, bad["position"] + bad["sizeInBytes"] - 1)  # last byte of the 4th entry
    ran = run_cli(capsys, "dump", copy)
    assert ran.code == 1
    want = [kafka_text(b) for b in batches]
    want[3] = want[3].replace("isvalid: true", "isvalid: false")
    assert ran.lines[2:] == want
    assert ran.lines[5] == (
        "offset: 24 position: 622 NoTimestampType: -1 size: 774 magic: 0 compresscodec: gzip crc: 379745816 "
        "isvalid: false"  # the CRC the entry carries, not the one its bytes have
    )
    assert ran.err.startswith("kafka-log-migrate: error: CRC-32 mismatch in magic 0 compressed message")
    assert f"({copy}, byte position {bad['position']}, offset {bad['lastOffset']})" in ran.err
    assert "the dump went on after it" in ran.err and "restore the segment from a replica" in ran.err
    assert "Traceback" not in ran.err
    ran = run_cli(capsys, "dump", "--json", copy)
    lines = [json.loads(line) for line in ran.lines]
    assert ran.code == 1 and lines[:3] == batches[:3] and lines[4:] == batches[4:]
    assert lines[3]["type"] == "batch" and lines[3]["position"] == bad["position"] and not lines[3]["valid"]
    # gzip's own trailer check fails too: like Kafka, no records, hence no base offset
    assert (lines[3]["records"], lines[3]["baseOffset"], lines[3]["lastOffset"]) == (0, None, 24)
    assert lines[3]["error"].startswith("CRC-32 mismatch in magic 0 compressed message: stored 0x16a27618")


def test_zero_filled_region_stops_the_dump_where_kafkas_reader_throws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / GZIP_V0.name
    copy.write_bytes(GZIP_V0.read_bytes() + bytes(64))  # a preallocated, never written tail
    ran = run_cli(capsys, "dump", "--json", copy)
    error = json.loads(ran.lines[-1])
    assert ran.code == 1 and error["type"] == "error"
    assert (error["position"], error["bytes"]) == (GZIP_V0.stat().st_size, 64)
    assert "declares size 0" in ran.err


def test_deep_iteration_reports_offset_gaps_on_stderr_like_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--deep-iteration", COMPACTED)
    assert ran.code == 0  # compaction gaps are not damage
    assert ran.err.splitlines()[:2] == [f"Non-consecutive offsets in {COMPACTED}", "  105 is followed by 109"]


def test_empty_segment_prints_only_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--deep-iteration", EMPTY)
    assert (ran.code, ran.lines, ran.err) == (0, [f"Dumping {EMPTY}", "Log starting offset: 0"], "")
    ran = run_cli(capsys, "dump", "--json", EMPTY)
    assert (ran.code, ran.lines, ran.err) == (0, [], "")


def test_files_option_takes_a_comma_list_like_kafka_dump_log(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--files", f"{GZIP_V0},{EMPTY}")
    assert ran.code == 0 and [x for x in ran.lines if x.startswith("Dumping ")] == [
        f"Dumping {GZIP_V0}",
        f"Dumping {EMPTY}",
    ]


def test_bad_input_exits_1_with_a_message_and_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ran = run_cli(capsys, "dump", tmp_path / "missing.log")
    assert (ran.code, ran.lines) == (
        1,
        [],
    ) and ran.err == f"kafka-log-migrate: error: no such file: {tmp_path / 'missing.log'}\n"
    ran = run_cli(capsys, "dump", tmp_path)
    assert ran.code == 1 and "is a directory" in ran.err
    assert run_cli(capsys, "dump").code == 2
    assert run_cli(capsys, "dump", "--max-bytes", "0", GZIP_V0).code == 2
    assert run_cli(capsys, "no-such-command").code == 2
    assert run_cli(capsys).code == 2


def test_version_and_help_document_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "--version")
    assert ran.code == 0 and ran.lines == ["kafka-log-migrate 0.1.0"]
    ran = run_cli(capsys, "--help")
    text = "\n".join(ran.lines)
    assert ran.code == 0
    for exit_code in ("0  success", "1  failure", "2  usage error", "3  verify found differences"):
        assert exit_code in text
    assert "dump" in text


def test_help_and_the_readme_open_with_the_verbs_in_the_order_an_operator_runs_them(capsys) -> None:
    description = run_cli(capsys, "--help").out.split("\n\n")[1]
    readme_opening = (REPO / "README.md").read_text().split("\n\n")[1]
    for text in (description, readme_opening):
        at = [text.index(verb) for verb in ("scan", "rehearse", "prestage", "rolling", "verify", "finalize")]
        assert at == sorted(at), text
        assert "pre-staged beside running brokers" in text or "pre-staged beside the running brokers" in text


def test_dump_help_describes_the_command_and_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    ran = run_cli(capsys, "dump", "--help")
    text = "\n".join(ran.lines)
    assert ran.code == 0
    assert "the way kafka-dump-log.sh (DumpLogSegments) does" in text and "exit codes:" in text
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = subcommands.choices["dump"]._actions
    flags = {flag for action in options for flag in action.option_strings}
    assert {
        "--files",
        "--deep-iteration",
        "--print-data-log",
        "--verify-index-only",
        "--index-sanity-check",
        "--json",
        "--max-bytes",
        "--max-message-size",
    } <= flags
    for action in options:
        assert action.help and action.help != argparse.SUPPRESS, action.dest
        assert all(flag in text for flag in action.option_strings)


def test_dump_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """``dump ... | head -1``: the reader goes away after one line; no traceback, no 'Exception ignored' at exit."""
    segments = [s for s in FIXTURE_SEGMENTS if not s.parent.name.startswith("truncated-tail")]
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err:
        # ~540 KB of output: far more than a pipe holds, so writes fail once head has exited
        dump = subprocess.Popen(
            [sys.executable, "-m", "migrate.cli", "dump", "--print-data-log", *map(str, segments)],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        head = subprocess.run(["head", "-1"], stdin=dump.stdout, capture_output=True, timeout=120)
        dump.stdout.close()  # head is the only reader left
        code = dump.wait(timeout=120)
    assert head.stdout.decode() == f"Dumping {segments[0]}\n"
    assert stderr.read_text() == ""
    assert code == 1  # cli.py: a closed stdout is a failure to deliver the output, said quietly
