"""scan: a read-only, kafka-log-dirs-shaped inventory whose counts agree with Kafka's own view of every segment."""

from __future__ import annotations

from conftest import expected_summaries
from kafka_layout import make_broker_logdir
from test_pipeline import snapshot

from migrate.cli import main
from migrate.scan import scan_log_dirs

SUMMARIES = expected_summaries()
PARTITIONS = ["plain-v0-0", "lz4-v1-0", "mixed-v1-v2-0", "already-v2-0", "already-v2-1", "truncated-tail-1"]


def test_counts_per_magic_match_kafka_and_v2_only_is_exact(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    before = snapshot(log_dir)
    report = scan_log_dirs([str(log_dir)])
    assert snapshot(log_dir) == before  # read-only: not even .lock is created
    (broker,) = report["brokers"]
    assert broker["broker"] == 1
    parts = {p["partition"]: p for p in broker["logDirs"][0]["partitions"]}
    assert set(parts) == set(PARTITIONS)
    for name, p in parts.items():
        assert p["batchesByMagic"] == SUMMARIES[name]["magics"], name
        assert p["v2Only"] == name.startswith("already-v2"), name
        assert p["size"] == SUMMARIES[name]["bytes"], name
    tail = parts["truncated-tail-1"]["truncatedTail"]
    assert tail["file"].endswith("00000000000000000015.log") and tail["bytes"] == 2163
    assert report["summary"] == {
        "partitions": 6,
        "legacyPartitions": 4,
        "legacyBytes": sum(p["bytesByMagic"].get("0", 0) + p["bytesByMagic"].get("1", 0) for p in parts.values()),
        "v2Only": False,
    }


def test_scan_exit_code_says_whether_legacy_data_is_left(tmp_path, capsys):
    legacy = make_broker_logdir(tmp_path / "a", partitions=["plain-v0-1"])
    modern = make_broker_logdir(tmp_path / "b", partitions=["already-v2-0"])
    assert main(["scan", "--log-dirs", str(legacy)]) == 4
    assert main(["scan", "--log-dirs", str(modern), "--json"]) == 0
    assert '"v2Only": true' in capsys.readouterr().out
