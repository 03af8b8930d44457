"""The run's own files: one durable write, and one name for a segment's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from migrate.kafka.names import FileKind, segment_name
from migrate.run.workspace import backup_file, durable_file, segment_file, write_durably


def test_segment_name_is_kafkas_twenty_digit_prefix() -> None:
    assert segment_name(0, ".log") == "00000000000000000000.log"
    assert segment_name(12345, FileKind.TIME_INDEX) == "00000000000000012345.timeindex"
    assert segment_name(2**63 - 1) == "09223372036854775807"
    assert segment_file("/d", 7, ".index") == Path("/d/00000000000000000007.index")
    assert backup_file("/d", "p1", 7, ".log") == Path("/d/.kafka-log-migrate-p1/00000000000000000007.log.orig")


def test_write_durably_replaces_whole_and_leaves_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_text("old")
    write_durably(target, '{"new": true}')
    assert target.read_text() == '{"new": true}'
    write_durably(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(os.listdir(tmp_path)) == ["record.json"]


def test_durable_file_keeps_the_old_content_when_the_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "survivors.npy"
    target.write_bytes(b"before")
    with pytest.raises(RuntimeError, match="disk full"), durable_file(target) as f:
        f.write(b"half of it")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"before"
    assert sorted(os.listdir(tmp_path)) == ["survivors.npy"]
