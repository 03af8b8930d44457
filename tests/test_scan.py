"""scan: a read-only, kafka-log-dirs-shaped inventory whose counts agree with Kafka's own view of every segment."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from conftest import EXPECTED, LEGACY_LOGDIR, REAL_BROKER, expected_summaries, run_cli
from kafka_layout import BROKER_EPOCH, lock_held_by_other_process, make_broker_logdir

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.model.scan_report import ScanReport
from migrate.reports.scan import scan_log_dirs as scan_records

SUMMARIES = expected_summaries()
REAL_SUMMARIES = {
    d["path"]: d for d in map(json.loads, (REAL_BROKER / "expected" / "summary.jsonl").read_text().splitlines())
}
ALL_PARTITIONS = sorted(p.name for p in LEGACY_LOGDIR.iterdir() if p.is_dir())
V2_ONLY = {"already-v2-0", "already-v2-1", "empty-segment-1"}  # empty-segment-1 holds no entry at all


def scan_log_dirs(log_dirs: list[str]) -> dict:
    """The scan as ``scan --json`` prints it: these tests hold its kafka-log-dirs shape, key for key."""
    report = scan_records(log_dirs)
    data = to_json(report)
    assert from_json(ScanReport, json.loads(json.dumps(data))) == report  # the one way back gives the same record
    return data


def tree(root: Path) -> dict[str, tuple]:
    """Everything under root, root itself included: kind, mode, size, mtime (ns) and content hash of files. A
    created, deleted, renamed or touched entry (even an empty .lock, which changes the directory mtime) shows."""
    out: dict[str, tuple] = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
        out[str(p.relative_to(root))] = (p.is_dir(), st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out


def partitions_of(report: dict) -> dict[str, dict]:
    return {p["partition"]: p for b in report["brokers"] for d in b["logDirs"] for p in d["partitions"]}


def test_every_fixture_partition_counts_match_kafka_and_the_scan_writes_nothing(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=ALL_PARTITIONS)
    before = tree(log_dir)
    report = scan_log_dirs([str(log_dir)])
    assert tree(log_dir) == before  # read-only: not even .lock is created, no mtime moves
    assert not (log_dir / ".lock").exists()
    assert report["version"] == 1
    (broker,) = report["brokers"]
    assert broker["broker"] == 1
    (entry,) = broker["logDirs"]
    assert entry["logDir"] == str(log_dir.resolve()) and entry["error"] is None
    assert (entry["cleanShutdown"], entry["brokerEpoch"], entry["locked"]) == (True, BROKER_EPOCH, False)
    assert entry["warnings"] == []
    parts = partitions_of(report)
    assert list(parts) == ALL_PARTITIONS
    for name, p in parts.items():
        kafka = SUMMARIES[name]  # Kafka's own reading of the partition (oracle dump --summary)
        assert p["batchesByMagic"] == kafka["magics"], name
        assert sum(p["batchesByMagic"].values()) == kafka["batches"], name
        assert p["compressions"] == (kafka["compressions"] or {}), name
        assert p["size"] == kafka["bytes"], name
        assert sum(p["bytesByMagic"].values()) == kafka["bytes"] - kafka["trailingBytes"], name
        assert p["segments"] == kafka["files"] == len(list((LEGACY_LOGDIR / name).glob("*.log"))), name
        assert (p["offsetLag"], p["isFuture"], p["dir"], p["error"], p["strayFiles"]) == (0, False, name, None, [])
        assert p["legacy"] == any(int(m) < 2 for m in kafka["magics"]), name
        assert p["v2Only"] == (name in V2_ONLY), name
        assert p["v2Only"] == (not p["legacy"]), name
    # mixed partitions: per-magic bytes add up segment by segment
    assert parts["mixed-v1-v2-0"]["batchesByMagic"] == {"1": 13, "2": 4}
    assert parts["mixed-v0-v1-0"]["batchesByMagic"] == {"0": 20, "1": 17}
    assert parts["already-v2-0"]["bytesByMagic"] == {"2": 5944}
    assert parts["empty-segment-1"] == {**parts["empty-segment-1"], "size": 0, "batchesByMagic": {}, "legacy": False}
    assert report["summary"] == {
        "partitions": 20,
        "legacyPartitions": 17,
        "legacyBytes": sum(
            SUMMARIES[n]["bytes"] - SUMMARIES[n]["trailingBytes"] for n in ALL_PARTITIONS if n not in V2_ONLY
        )
        - parts["mixed-v1-v2-0"]["bytesByMagic"]["2"],
        "partitionsWithErrors": 0,
        "logDirsWithErrors": 0,
        "v2Only": False,
    }


def test_truncated_tails_are_reported_with_file_and_position(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["truncated-tail-0", "truncated-tail-1", "plain-v0-1"])
    parts = partitions_of(scan_log_dirs([str(log_dir)]))
    for name in ("truncated-tail-0", "truncated-tail-1"):
        trailing = [
            json.loads(line)
            for line in (EXPECTED / name / "00000000000000000015.jsonl").read_text().splitlines()
            if '"trailing"' in line
        ]
        (kafka,) = trailing  # Kafka's FileLogInputStream stops at the same byte
        assert parts[name]["truncatedTail"] == {
            "file": str((log_dir / name / "00000000000000000015.log").resolve()),
            "position": kafka["position"],
            "bytes": kafka["bytes"],
        }
    assert parts["truncated-tail-0"]["truncatedTail"]["position"] == 621
    assert parts["truncated-tail-1"]["truncatedTail"]["bytes"] == 2163
    assert parts["plain-v0-1"]["truncatedTail"] is None


def test_segments_written_by_a_real_broker(tmp_path):
    names = sorted(REAL_SUMMARIES)
    log_dir = make_broker_logdir(tmp_path, partitions=names, source="real-broker", broker_id=0, kraft=True)
    report = scan_log_dirs([str(log_dir)])
    assert report["brokers"][0]["broker"] == 0  # node.id of a KRaft meta.properties
    parts = partitions_of(report)
    for name in names:
        assert parts[name]["batchesByMagic"] == REAL_SUMMARIES[name]["magics"], name
        assert parts[name]["compressions"] == REAL_SUMMARIES[name]["compressions"], name
    assert parts["numbers-0"]["batchesByMagic"] == {"0": 11394}
    assert parts["hamlet-gzip-0"]["compressions"] == {"gzip": 22}
    assert report["summary"]["legacyPartitions"] == 4


def test_a_log_dir_in_use_by_a_broker_is_reported_locked_without_touching_it(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"], clean_shutdown=False)
    with lock_held_by_other_process(log_dir, "fcntl") as broker:
        before = tree(log_dir)
        report = scan_log_dirs([str(log_dir)])
        assert tree(log_dir) == before
    entry = report["brokers"][0]["logDirs"][0]
    assert (entry["locked"], entry["cleanShutdown"], entry["brokerEpoch"]) == (True, False, None)
    assert f"Kafka's .lock is held (process {broker.pid})" in entry["warnings"][0]
    assert "Stop the broker" in entry["warnings"][0]
    # afterwards the .lock is left behind, unheld, as after a killed broker: not locked, but no clean shutdown
    entry = scan_log_dirs([str(log_dir)])["brokers"][0]["logDirs"][0]
    assert (entry["locked"], entry["cleanShutdown"]) == (False, False)
    assert "no .kafka_cleanshutdown marker" in entry["warnings"][0]
    # an flock on .lock is not a broker
    with lock_held_by_other_process(log_dir, "flock"):
        assert scan_log_dirs([str(log_dir)])["brokers"][0]["logDirs"][0]["locked"] is False


def test_other_directories_are_reported_and_future_replicas_are_counted(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["already-v2-0"])
    future = log_dir / "plain-v1-1.0123456789abcdef0123456789abcdef-future"
    shutil.copytree(LEGACY_LOGDIR / "plain-v1-1", future)
    shutil.copytree(LEGACY_LOGDIR / "lz4-v1-1", log_dir / "lz4-v1-1.0123456789abcdef0123456789abcdef-delete")
    (log_dir / "lost+found").mkdir()
    before = tree(log_dir)
    report = scan_log_dirs([str(log_dir)])
    assert tree(log_dir) == before
    entry = report["brokers"][0]["logDirs"][0]
    text = "\n".join(entry["warnings"])
    assert "lost+found: not a topic-partition directory. A Kafka broker refuses to start" in text
    assert "marked for deletion" in text and "future replica of plain-v1-1" in text
    parts = partitions_of(report)
    assert set(parts) == {"already-v2-0", "plain-v1-1"}  # a -delete dir is neither counted nor migrated
    assert (parts["plain-v1-1"]["isFuture"], parts["plain-v1-1"]["dir"]) == (True, future.name)
    assert parts["plain-v1-1"]["batchesByMagic"] == SUMMARIES["plain-v1-1"]["magics"]
    # the future replica becomes the partition once the move finishes: its legacy data is not certified away
    assert report["summary"]["v2Only"] is False and report["summary"]["legacyPartitions"] == 1


def test_a_corrupt_segment_is_reported_on_its_partition_and_the_scan_goes_on(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["already-v2-1", "plain-v0-1", "already-v2-0"])
    seg = log_dir / "already-v2-1" / "00000000000000000000.log"
    data = bytearray(seg.read_bytes())
    first_size = struct.unpack_from(">i", data, 8)[0]
    struct.pack_into(">i", data, 12 + first_size + 8, 3)  # second entry declares a size below 14 bytes
    seg.write_bytes(bytes(data))
    parts = partitions_of(report := scan_log_dirs([str(log_dir)]))
    bad = parts["already-v2-1"]
    assert str(seg.resolve()) in bad["error"] and f"byte position {12 + first_size}" in bad["error"]
    assert "below the minimum 14" in bad["error"]
    assert bad["v2Only"] is False and bad["legacy"] is False  # not certified: part of it was never read
    assert parts["already-v2-0"]["v2Only"] is True and parts["already-v2-0"]["error"] is None
    assert parts["plain-v0-1"]["batchesByMagic"] == SUMMARIES["plain-v0-1"]["magics"]
    assert report["summary"]["partitionsWithErrors"] == 1 and report["summary"]["v2Only"] is False


def test_pending_broker_operation_blocks_certification(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["already-v2-0"])
    (log_dir / "already-v2-0" / "00000000000000000073.log.swap").write_bytes(b"")
    report = scan_log_dirs([str(log_dir)])
    p = partitions_of(report)["already-v2-0"]
    assert (p["legacy"], p["v2Only"], p["strayFiles"]) == (False, False, ["00000000000000000073.log.swap"])
    assert "left by a broker that died" in report["brokers"][0]["logDirs"][0]["warnings"][0]


def test_several_log_dirs_group_by_broker_and_a_missing_one_is_an_error(tmp_path):
    a = make_broker_logdir(tmp_path / "a", partitions=["already-v2-0", "plain-v0-1"], name="d1")
    b = make_broker_logdir(tmp_path / "b", partitions=["already-v2-1", "plain-v0-1"], name="d2")
    c = make_broker_logdir(tmp_path / "c", partitions=["already-v2-1"], broker_id=2, name="d3")
    os.unlink(c / "meta.properties")
    missing = tmp_path / "gone"
    report = scan_log_dirs([str(a), str(b), str(c), str(missing)])
    assert [(x["broker"], [d["logDir"] for d in x["logDirs"]]) for x in report["brokers"]] == [
        (1, [str(a), str(b)]),
        (None, [str(c), str(missing)]),
    ]
    d1, d2 = report["brokers"][0]["logDirs"]
    assert any("plain-v0-1 is live in more than one log dir" in w for w in d1["warnings"])
    assert any("duplicate log directories" in w for w in d2["warnings"])
    gone = report["brokers"][1]["logDirs"][1]
    assert gone["partitions"] == [] and "no such directory" in gone["error"]
    assert report["summary"]["logDirsWithErrors"] == 1 and report["summary"]["v2Only"] is False
    assert not missing.exists()


def test_scan_exit_code_says_whether_legacy_data_is_left(tmp_path, capsys):
    legacy = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1"])
    modern = make_broker_logdir(tmp_path / "b", partitions=["already-v2-0"])
    ran = run_cli(capsys, "scan", "--log-dirs", str(legacy))
    assert ran.code == 4
    assert "LEGACY" in ran.out
    ran = run_cli(capsys, "scan", "--log-dirs", str(modern), "--json")
    assert ran.code == 0
    report = json.loads(ran.out)
    assert report["summary"]["v2Only"] is True and partitions_of(report)["already-v2-0"]["v2Only"] is True


def test_a_scan_report_that_is_not_one_is_refused_with_the_path_of_the_value(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["mixed-v1-v2-0"])
    data = scan_log_dirs([str(log_dir)])
    data["brokers"][0]["logDirs"][0]["partitions"][0]["batchesByMagic"] = {"one": 13}
    with pytest.raises(
        ModelError,
        match=r"ScanReport.brokers\[0\].logDirs\[0\].partitions\[0\].batchesByMagic.one: "
        r"expected an integer key, found 'one'",
    ):
        from_json(ScanReport, data)
    del data["summary"]["v2Only"]
    with pytest.raises(ModelError, match=r"ScanReport.summary: missing key 'v2Only'"):
        from_json(ScanReport, {**data, "brokers": []})
