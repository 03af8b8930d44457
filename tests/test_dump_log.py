"""``dump`` of .log files against Apache Kafka's own reading of them (the oracle): keys and values under
--print-data-log, and damaged entries, which Kafka's tool marks ``isvalid: false`` and reads past."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import LEGACY_LOGDIR, expected_lines, fixture_id, run_cli

DATA_SAMPLES = [
    LEGACY_LOGDIR / name
    for name in (
        "plain-v0-0/00000000000000000000.log",  # null and empty keys/values, random binary keys and values
        "plain-v1-0/00000000000000000000.log",
        "gzip-v0-0/00000000000000000000.log",
        "lz4-v1-0/00000000000000000000.log",  # a multi-block wrapper of incompressible values
        "already-v2-0/00000000000000000000.log",  # headers, a transaction and its COMMIT marker
        "compacted-v0-0/00000000000000000100.log",  # tombstones
    )
]
BINARY_RECORDS = 10  # records of the samples whose key or value is not UTF-8 (random bytes)
TIMESTAMP_LABELS = {
    "NO_TIMESTAMP_TYPE": "NoTimestampType",
    "CREATE_TIME": "CreateTime",
    "LOG_APPEND_TIME": "LogAppendTime",
}
# where a record line or an entry line starts in kafka-dump-log's text (values may hold newlines of their own)
LINE_START = re.compile(
    r"\n(?=\| offset: -?\d+ |offset: \d+ position: |baseOffset: -?\d+ lastOffset: |Dumping |Log starting offset: )"
)


def kafka_files(oracle, *paths: Path, hex_data: bool = False) -> dict[str, list[dict]]:
    """Kafka's lines per file (``oracle dump`` prints a file line before each one when given several)."""
    args = ["dump", *(["--hex"] if hex_data else []), *paths]
    files: dict[str, list[dict]] = {}
    current: list[dict] = files.setdefault(str(paths[0]), [])
    for line in map(json.loads, oracle.run(*args).stdout.splitlines()):
        if line["type"] == "file":
            current = files.setdefault(line["path"], [])
        else:
            current.append(line)
    return files


def kafka_data_text(record: dict) -> str:
    """What DumpLogSegments' default StringDecoder prints for a record's key and value (Java decodes UTF-8 with
    malformed bytes replaced by U+FFFD, as Python's 'replace' does)."""
    text = ""
    if record["key_hex"] is not None:
        text += " key: " + bytes.fromhex(record["key_hex"]).decode("utf-8", "replace")
    if record["value_hex"] is not None:
        text += " payload: " + bytes.fromhex(record["value_hex"]).decode("utf-8", "replace")
    return text


@pytest.mark.oracle
def test_print_data_log_prints_kafkas_keys_and_values(capsys: pytest.CaptureFixture[str], oracle) -> None:
    kafka = kafka_files(oracle, *DATA_SAMPLES, hex_data=True)
    ran = run_cli(capsys, "dump", "--print-data-log", *DATA_SAMPLES)
    assert ran.code == 0
    chunks = LINE_START.split(ran.out.rstrip("\n"))
    checked = binary = 0
    for segment in DATA_SAMPLES:
        at = chunks.index(f"Dumping {segment}")
        assert chunks[at + 1] == f"Log starting offset: {int(segment.stem)}"
        lines = chunks[at + 2 : at + 2 + len(kafka[str(segment)])]
        batch: dict = {}
        for ours, theirs in zip(lines, kafka[str(segment)]):
            if theirs["type"] == "batch":
                batch = theirs
                assert ours.startswith(f"offset: {theirs['lastOffset']} position: {theirs['position']} ") or (
                    ours.startswith(f"baseOffset: {theirs['baseOffset']} lastOffset: {theirs['lastOffset']} ")
                )
                assert ours.endswith(f" crc: {theirs['crc']} isvalid: true")
                continue
            label = TIMESTAMP_LABELS[batch["timestampType"]]
            prefix = (
                f"| offset: {theirs['offset']} {label}: {theirs['timestamp']} keySize: {theirs['keySize']} "
                f"valueSize: {theirs['valueSize']}"
            )
            assert ours.startswith(prefix), (fixture_id(segment), ours[:200])
            if batch["isControl"]:
                assert ours.endswith(" endTxnMarker: COMMIT coordinatorEpoch: 1")  # Kafka prints no data for markers
                continue
            data = kafka_data_text(theirs)
            assert ours.endswith(data), (fixture_id(segment), theirs["offset"])
            middle = ours[len(prefix) : len(ours) - len(data)]
            if batch["magic"] < 2:
                assert re.fullmatch(r" isValid: true crc: \d+", middle), middle
            else:
                names = ",".join(name for name, *_ in theirs["headers"])
                sequence = (
                    -1 if batch["baseSequence"] < 0 else batch["baseSequence"] + theirs["offset"] - batch["baseOffset"]
                )
                assert middle == f" sequence: {sequence} headerKeys: [{names}]"
            checked += 1
            binary += "\ufffd" in data
        assert len(lines) == len(kafka[str(segment)])
    records = sum(x["type"] == "record" for lines in kafka.values() for x in lines)
    assert checked == records - 1 == 352  # every record of the samples but the COMMIT marker
    assert binary == BINARY_RECORDS  # random binary keys or values among them, decoded as Kafka decodes them


def test_print_data_log_spot_values(capsys: pytest.CaptureFixture[str]) -> None:
    segment = LEGACY_LOGDIR / "plain-v0-0/00000000000000000000.log"
    ran = run_cli(capsys, "dump", "--print-data-log", segment)
    lines = LINE_START.split(ran.out)
    assert lines[3] == (
        "| offset: 0 NoTimestampType: -1 keySize: 6 valueSize: 64 isValid: true crc: 1807746229 key: user-0 payload: "
        "segment value consumer leader header compact wrapper wrapper par"
    )
    null_key, tombstone, empty_value, empty_key, both_null = lines[5:14:2]
    assert null_key.endswith("valueSize: 32 isValid: true crc: 2010407116 payload: log record record offset timesta")
    assert tombstone.endswith(" valueSize: -1 isValid: true crc: 3346331706 key: user-1")  # no payload for null
    assert empty_value.endswith(" valueSize: 0 isValid: true crc: 1584374281 key: user-2 payload: ")  # empty, not null
    assert empty_key.endswith(" keySize: 0 valueSize: 10 isValid: true crc: 1457850491 key:  payload: offset bro")
    assert both_null.endswith(" keySize: -1 valueSize: -1 isValid: true crc: 2817288195")


# --- damaged entries ----------------------------------------------------------------------------------------------


def flipped_copy(tmp_path: Path, segment: Path, at: int, name: str) -> Path:
    data = bytearray(segment.read_bytes())
    data[at] ^= 0x5A
    copy = tmp_path / name / segment.name
    copy.parent.mkdir()
    copy.write_bytes(data)
    return copy


def value_byte(segment: Path, batch_index: int, record_in_batch: int = 0) -> int:
    """The file position of the middle byte of a record's value, found verbatim inside its entry: a byte that only
    the CRC covers (uncompressed data, or an LZ4 block stored raw), so that Kafka still reads the entry."""
    lines = expected_lines(segment)
    batches = [i for i, x in enumerate(lines) if x["type"] == "batch"]
    batch = lines[batches[batch_index]]
    record = lines[batches[batch_index] + 1 + record_in_batch]
    data = segment.read_bytes()
    end = batch["position"] + batch["sizeInBytes"]
    value = data[batch["position"] : end]
    # the value bytes are not in the fixture JSON; a long enough slice of the entry that hashes to them is
    size = record["valueSize"]
    for start in range(len(value) - size + 1):
        if hashlib.sha256(value[start : start + size]).hexdigest() == record["value_sha256"]:
            return batch["position"] + start + size // 2
    raise AssertionError(f"value of record {record['offset']} not found verbatim in {fixture_id(segment)}")


DAMAGED = [
    # (fixture segment, entry, record in it): what the flipped byte lands in
    ("plain-v0-0/00000000000000000000.log", 8, 0),  # an uncompressed v0 message: its one record fails its CRC
    ("plain-v1-0/00000000000000000040.log", 3, 0),  # an uncompressed v1 message
    ("already-v2-0/00000000000000000000.log", 0, 0),  # an uncompressed v2 batch: records are read regardless
    ("lz4-v1-0/00000000000000000000.log", 5, 3),  # a raw-stored LZ4 block: the inner message fails its own CRC
]


@pytest.mark.oracle
def test_damaged_entries_are_marked_invalid_and_read_past_exactly_as_kafka_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], oracle
) -> None:
    copies = [
        flipped_copy(tmp_path, LEGACY_LOGDIR / name, value_byte(LEGACY_LOGDIR / name, entry, record), f"d{i}")
        for i, (name, entry, record) in enumerate(DAMAGED)
    ]
    gzip_v0 = LEGACY_LOGDIR / "gzip-v0-0/00000000000000000000.log"
    fourth = [x for x in expected_lines(gzip_v0) if x["type"] == "batch"][3]
    # the last byte of a gzip wrapper (its ISIZE trailer): the CRC fails and Kafka cannot decompress it either
    copies.append(flipped_copy(tmp_path, gzip_v0, fourth["position"] + fourth["sizeInBytes"] - 1, "gzip"))
    kafka = kafka_files(oracle, *copies)
    for copy in copies:
        ran = run_cli(capsys, "dump", "--json", "--deep-iteration", copy)
        ours = [json.loads(line) for line in ran.out.splitlines()]
        theirs = kafka[str(copy)]
        bad = [x for x in theirs if x["type"] == "batch" and not x["valid"]]
        assert len(bad) == 1, copy  # Kafka sees exactly the damaged entry, and reads on
        assert theirs[-1] != bad[0]  # entries follow it
        assert len(ours) == len(theirs)
        for mine, kafkas in zip(ours, theirs):
            assert list(mine) == list(kafkas)
            assert {k: v for k, v in mine.items() if k != "error"} == {k: v for k, v in kafkas.items() if k != "error"}
            assert (mine.get("error") is None) == (kafkas.get("error") is None)
        assert ran.code == 1
        assert f"({copy}, byte position {bad[0]['position']}, offset " in ran.err and "Traceback" not in ran.err
        # the same in kafka-dump-log's text: the entry with isvalid: false at Kafka's position, then the rest
        ran = run_cli(capsys, "dump", copy)
        entry_lines = ran.out.splitlines()[2:]
        batches = [x for x in theirs if x["type"] == "batch"]
        assert len(entry_lines) == len(batches) and ran.code == 1
        for line, batch in zip(entry_lines, batches):
            assert f" position: {batch['position']} " in line and f" size: {batch['sizeInBytes']} " in line
            assert line.endswith(f" crc: {batch['crc']} isvalid: {str(batch['valid']).lower()}")


def test_invalid_v0_message_prints_its_record_with_isvalid_false(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segment = LEGACY_LOGDIR / "plain-v0-0/00000000000000000000.log"
    batches = [x for x in expected_lines(segment) if x["type"] == "batch"]
    copy = flipped_copy(tmp_path, segment, value_byte(segment, 8), "v0")
    ran = run_cli(capsys, "dump", "--deep-iteration", copy)
    lines = ran.out.splitlines()
    head = "offset: 8 position: 459 NoTimestampType: -1 size: 208 magic: 0 compresscodec: none crc: "
    at = lines.index(f"{head}{batches[8]['crc']} isvalid: false")
    assert lines[at + 1].startswith("| offset: 8 NoTimestampType: -1 keySize: ")
    assert lines[at + 1].endswith(f" isValid: false crc: {batches[8]['crc']}")  # the stored CRC, as Kafka prints
    assert lines[at + 2].startswith("offset: 9 position: 667 ") and lines[at + 2].endswith(" isvalid: true")
    assert len([x for x in lines if x.startswith("offset: ")]) == len(batches)
    assert ran.code == 1
    assert ran.err.startswith("kafka-log-migrate: error: CRC-32 mismatch in magic 0 message")
    assert f"({copy}, byte position 459, offset 8)" in ran.err and "isvalid: false" in ran.err


def test_offset_going_back_after_an_invalid_entry_is_still_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reader checks offsets within what it reads in one go; across an invalid entry dump checks them itself."""
    segment = LEGACY_LOGDIR / "plain-v0-0/00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[value_byte(segment, 8)] ^= 0x5A  # entry 8 (offset 8) invalid
    data[667:675] = (3).to_bytes(8, "big")  # entry 9's offset field (no CRC covers it) says 3
    copy = tmp_path / segment.name
    copy.write_bytes(data)
    ran = run_cli(capsys, "dump", "--json", copy)
    lines = [json.loads(x) for x in ran.out.splitlines()]
    assert [(x["position"], x["lastOffset"], x["valid"]) for x in lines[7:11]] == [
        (306, 7, True),
        (459, 8, False),
        (667, 3, False),
        (817, 10, True),
    ]
    assert lines[9]["error"] == "offset 3 does not increase on the previous entry's last offset 8"
    assert ran.code == 1 and "byte position 667, offset 3" in ran.err


def test_offset_outside_the_segments_range_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As Kafka's LogSegment requires: offsets base..base+2^31-1, base from the file name."""
    segment = LEGACY_LOGDIR / "plain-v0-0/00000000000000000040.log"
    copy = tmp_path / "00000000000000000050.log"  # a name above the segment's first offsets (40..49)
    copy.write_bytes(segment.read_bytes())
    ran = run_cli(capsys, "dump", "--json", copy)
    lines = [json.loads(x) for x in ran.out.splitlines()]
    assert [x["lastOffset"] for x in lines if not x["valid"]] == list(range(40, 50))
    assert all(x["valid"] for x in lines if x["lastOffset"] >= 50) and len(lines) == 40
    assert "offset 40 is outside the segment's offsets 50..2147483697" in ran.err
    assert ran.code == 1
