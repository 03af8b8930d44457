"""dump prints what Kafka's own reader prints (the oracle's JSON schema), and kafka-dump-log-style text."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURE_SEGMENTS, expected_lines, fixture_id

from migrate.cli import main

SAMPLES = [
    s
    for s in FIXTURE_SEGMENTS
    if fixture_id(s)
    in {
        "gzip-v0-0/00000000000000000000.log",
        "lz4-v1-1/00000000000000000000.log",
        "already-v2-0/00000000000000000000.log",
        "compacted-v0-0/00000000000000000100.log",
        "truncated-tail-0/00000000000000000015.log",
    }
]


@pytest.mark.parametrize("segment", SAMPLES, ids=fixture_id)
def test_json_dump_equals_kafkas_dump(segment, capsys):
    code = main(["dump", "--json", "--deep-iteration", str(segment)])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0] == {"type": "file", "path": str(segment), "bytes": segment.stat().st_size}
    want = expected_lines(segment)
    got = lines[1:]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        keys = [k for k in w if k != "error"] if w["type"] == "trailing" else list(w)
        assert {k: g[k] for k in keys} == {k: w[k] for k in keys}
    assert code == (1 if any(w["type"] == "trailing" for w in want) else 0)


def test_text_dump_uses_kafka_dump_log_field_names(capsys):
    v0 = next(s for s in SAMPLES if s.parent.name == "gzip-v0-0")
    v2 = next(s for s in SAMPLES if s.parent.name == "already-v2-0")
    assert main(["dump", "--deep-iteration", str(v0), str(v2)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Dumping {v0}"
    first = next(x for x in out if x.startswith("offset: "))
    assert "position: 0 NoTimestampType: -1" in first and "magic: 0 compresscodec: gzip" in first
    assert "isvalid: true" in first
    batch = next(x for x in out if x.startswith("baseOffset: "))
    assert "partitionLeaderEpoch: " in batch and "magic: 2" in batch
    assert any(x.startswith("| offset: ") for x in out)


def test_truncated_tail_is_reported_like_kafka_dump_log(capsys):
    tail = next(s for s in SAMPLES if s.parent.name == "truncated-tail-0")
    assert main(["dump", str(tail)]) == 1
    assert "Found 60 invalid bytes at the end of 00000000000000000015.log" in capsys.readouterr().out
