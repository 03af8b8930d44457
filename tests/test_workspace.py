"""The run's own files: one durable write, and one name for a segment's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from migrate.kafka.names import FileKind, segment_name
from migrate.run.workspace import durable_file, segment_file, write_durably


def test_segment_name_is_kafkas_twenty_digit_prefix() -> None:
    assert segment_name(0, ".log") == "00000000000000000000.log"
    assert segment_name(12345, FileKind.TIME_INDEX) == "00000000000000012345.timeindex"
    assert segment_name(2**63 - 1) == "09223372036854775807"
    assert segment_file("/d", 7, ".index") == Path("/d/00000000000000000007.index")


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


def test_a_work_dir_planted_as_a_symlink_is_refused_and_nothing_is_written_there(tmp_path: Path) -> None:
    from migrate.errors import UnsafePathError
    from migrate.run.workspace import checked_work_dir, work_dir

    partition = tmp_path / "kafka-logs" / "orders-0"
    partition.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert checked_work_dir(partition, "p1") == work_dir(partition, "p1")  # absent, not created
    assert not work_dir(partition, "p1").exists()
    assert checked_work_dir(partition, "p1", create=True).is_dir()
    work_dir(partition, "p2").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match=r"\.kafka-log-migrate-p2: a symbolic link \(to .*elsewhere\)"):
        checked_work_dir(partition, "p2", create=True)
    assert os.listdir(elsewhere) == []
    linked = tmp_path / "kafka-logs" / "payments-0"
    linked.symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="payments-0: a symbolic link"):
        checked_work_dir(linked, "p1", create=True)
    assert os.listdir(elsewhere) == []


def test_a_fence_that_is_a_symlink_or_a_file_is_refused_before_anything_changes(tmp_path: Path) -> None:
    from migrate.errors import UnsafePathError
    from migrate.run import fence
    from migrate.run.workspace import fence_path

    log_dir = tmp_path / "kafka-logs"
    log_dir.mkdir()
    target = tmp_path / "target"
    target.mkdir()
    fence_path(log_dir).symlink_to(target)
    for act in (fence.is_up, lambda d: fence.raise_fence(d, "p1"), fence.lower_fence):
        with pytest.raises(UnsafePathError, match="IN-PROGRESS: a symbolic link"):
            act(log_dir)
    assert os.listdir(target) == [] and fence_path(log_dir).is_symlink()
    fence_path(log_dir).unlink()
    fence_path(log_dir).write_text("not ours")
    with pytest.raises(UnsafePathError, match="IN-PROGRESS: not a directory"):
        fence.raise_fence(log_dir, "p1")
    fence_path(log_dir).unlink()
    assert fence.raise_fence(log_dir, "p1") and fence.is_up(log_dir)
    assert fence.lower_fence(log_dir) and not fence.is_up(log_dir)
