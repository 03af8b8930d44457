"""The benchmark segment generator (benchmarks/gen_legacy.py) writes what Kafka and our reader agree on."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from conftest import REPO

from migrate.format import legacy
from migrate.format.entries import read_entries
from migrate.format.records import Record, TimestampType


def _load_gen():
    spec = importlib.util.spec_from_file_location("gen_legacy", REPO / "benchmarks" / "gen_legacy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_legacy", module)
    spec.loader.exec_module(module)
    return module


gen = _load_gen()

CASES = [  # (magic, key bytes, value bytes, kind)
    (0, 10, 100, "text"),
    (1, 10, 1000, "random"),
    (0, -1, 0, "text"),
    (1, 25, 7, "text"),
]


def expected_key(offset: int, key_bytes: int) -> bytes | None:
    if key_bytes < 0:
        return None
    return str(offset).zfill(max(key_bytes, 20)).encode()[-key_bytes:] if key_bytes else b""


@pytest.mark.parametrize(("magic", "key_bytes", "value_bytes", "kind"), CASES)
def test_reader_sees_the_generated_records(magic: int, key_bytes: int, value_bytes: int, kind: str) -> None:
    first = 1000
    n = 300
    data = gen.segment_bytes(
        n, first_offset=first, key_bytes=key_bytes, value_bytes=value_bytes, magic=magic, kind=kind, chunk_bytes=5000
    )
    assert len(data) == n * gen.message_size(key_bytes, value_bytes, magic)
    entries = read_entries(data)  # checks every CRC-32
    assert entries.tail is None and entries.consumed == len(data)
    records = list(entries.records())
    assert [r.offset for r in records] == list(range(first, first + n))
    assert [r.key for r in records] == [expected_key(o, key_bytes) for o in range(first, first + n)]
    assert all(r.value is not None and len(r.value) == value_bytes for r in records)
    assert len({r.value for r in records}) > (n // 2 if value_bytes >= 7 else 0)  # values differ between records
    if magic == 1:
        assert [r.timestamp for r in records] == [gen.START_MS + o * gen.STEP_MS for o in range(first, first + n)]
        assert {r.timestamp_type for r in records} == {TimestampType.CREATE_TIME}
    else:
        assert {r.timestamp for r in records} == {-1}
    # byte-identical to our own (row-wise, independently written) legacy writer
    rows = [Record(r.offset, r.timestamp, r.key, r.value) for r in records]
    assert legacy.encode_messages(rows, magic) == data


def test_chunking_and_seed() -> None:
    kwargs = {"key_bytes": 10, "value_bytes": 50, "magic": 0}
    whole = gen.segment_bytes(1000, **kwargs)
    assert gen.segment_bytes(1000, chunk_bytes=1000, **kwargs) == whole  # chunk boundaries leave no trace
    assert gen.segment_bytes(1000, **kwargs) == whole  # deterministic
    assert gen.segment_bytes(1000, seed=2, **kwargs) != whole


def test_cli_writes_a_broker_shaped_log_dir(tmp_path: Path) -> None:
    assert gen.main([str(tmp_path / "logs"), "--records", "200", "--value-bytes", "30", "--topic", "t"]) == 0
    segment = tmp_path / "logs" / "t-0" / f"{0:020d}.log"
    assert segment.stat().st_size == 200 * gen.message_size(10, 30, 0)
    assert (tmp_path / "logs" / ".kafka_cleanshutdown").exists()
    assert len(list(read_entries(segment.read_bytes()).records())) == 200


@pytest.mark.oracle
def test_kafka_finds_generated_segments_valid(tmp_path: Path, oracle) -> None:
    paths = []
    for i, (magic, key_bytes, value_bytes, kind) in enumerate(CASES):
        paths += gen.write_log_dir(
            tmp_path / f"case{i}",
            500,
            topic=f"gen{i}",
            key_bytes=key_bytes,
            value_bytes=value_bytes,
            magic=magic,
            kind=kind,
        )
    summaries = oracle.summary(*paths)
    assert len(summaries) == len(CASES)
    for summary, (magic, key_bytes, value_bytes, _) in zip(summaries, CASES):
        assert summary["valid"], summary
        assert summary["records"] == summary["batches"] == 500
        assert (summary["firstOffset"], summary["lastOffset"]) == (0, 499)
        assert summary["invalidRecords"] == 0 and summary["trailingBytes"] == 0
        assert summary["magics"] == {str(magic): 500}
        assert summary["compressions"] == {"none": 500}
        assert summary["nullKeys"] == (500 if key_bytes < 0 else 0)
        assert summary["emptyValues"] == (500 if value_bytes == 0 else 0)
