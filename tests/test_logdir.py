"""logdir: Kafka's names, files and lock, checked against the fixtures and against what Kafka's own code accepts."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, LEGACY_LOGDIR, expected_summaries
from kafka_layout import (
    BROKER_EPOCH,
    CLUSTER_ID,
    lock_held_by_other_process,
    make_broker_logdir,
    topic_id,
)

from migrate.errors import LogDirAccessError, LogDirLockedError, MalformedLogDirFileError, MigrateError
from migrate.kafka.layout import free_bytes, inspect_log_dir, list_segments
from migrate.kafka.lock import LogDirLock, lock_holder
from migrate.kafka.names import CHECKPOINT_FILES, parse_partition_dir, parse_partition_dir_name
from migrate.kafka.properties import (
    CleanShutdown,
    has_clean_shutdown,
    leader_epoch_entries,
    read_clean_shutdown,
    read_leader_epoch_checkpoint,
    read_meta_properties,
    read_offset_checkpoint,
)

SUMMARIES = expected_summaries()
MTIMES_MS = json.loads((FIXTURES / "mtimes.json").read_text())
FIXTURE_PARTITIONS = sorted(p.name for p in LEGACY_LOGDIR.iterdir() if p.is_dir())


# --- partition directory names ----------------------------------------------------------------------------------


def test_every_fixture_partition_dir_parses_as_topic_and_partition():
    parsed = {name: parse_partition_dir(name) for name in FIXTURE_PARTITIONS}
    assert len(parsed) == 20
    assert parsed["plain-v0-0"] == ("plain-v0", 0)
    assert parsed["mixed-v0-v1-1"] == ("mixed-v0-v1", 1)  # topic = everything before the last '-'
    assert parsed["truncated-tail-1"] == ("truncated-tail", 1)
    assert all(name == f"{t}-{p}" for name, (t, p) in parsed.items())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # (topic, partition, kind) as LocalLog.parseTopicPartitionName returns them; None where it throws
        ("orders-12", ("orders", 12, "current")),
        ("my-topic-with-dashes-3", ("my-topic-with-dashes", 3, "current")),
        ("t--1", ("t-", 1, "current")),  # lastIndexOf('-'): the topic keeps the first dash
        ("t-+1", ("t", 1, "current")),  # Integer.parseInt accepts a plus sign
        ("t-2147483647", ("t", 2147483647, "current")),
        (".snap-0", (".snap", 0, "current")),  # hidden but parseable: Kafka loads it as a topic
        ("__cluster_metadata-0", ("__cluster_metadata", 0, "current")),  # parses; skipped by the caller
        ("orders-0.9f3bd1f2a0b84c61a1b8f0e8c2a3d4e5-delete", ("orders", 0, "delete")),
        ("orders-0.9f3bd1f2a0b84c61a1b8f0e8c2a3d4e5-future", ("orders", 0, "future")),
        ("orders-0.9f3bd1f2a0b84c61a1b8f0e8c2a3d4e5-stray", ("orders", 0, "stray")),
        ("lost+found", None),  # no '-': the classic fresh-volume start-up failure
        (".trash", None),
        ("mytopic-0.bak", None),  # "0.bak" is not an int
        ("config", None),
        ("-0", None),  # empty topic
        ("orders-", None),  # empty partition
        ("orders-0-delete", None),  # a -delete dir needs "<topic>-<partition>.<id>-delete"
        ("orders-0.a b-delete", None),
        ("t-2147483648", None),  # beyond Integer.MAX_VALUE
        ("kafka-log-migrate.IN-PROGRESS", None),  # our fence: deliberately not a partition name
    ],
)
def test_partition_dir_names_parse_like_kafka(name, expected):
    parsed = parse_partition_dir_name(name)
    assert (None if parsed is None else (parsed.topic, parsed.partition, parsed.kind)) == expected
    live = parse_partition_dir(name)
    assert live == (None if expected is None or expected[2] != "current" else expected[:2])


# --- segments ---------------------------------------------------------------------------------------------------


def test_segment_list_of_fixture_partitions_has_bases_sizes_and_mtimes(legacy_logdir):
    for name in FIXTURE_PARTITIONS:
        segments, stray, unexpected = list_segments(legacy_logdir / name)
        files = sorted((LEGACY_LOGDIR / name).glob("*.log"))
        assert [s.base_offset for s in segments] == [int(f.stem) for f in files], name
        assert [s.path.name for s in segments] == [f.name for f in files]
        for seg in segments:
            rel = f"{name}/{seg.path.name}"
            assert seg.size == SUMMARIES[rel]["bytes"], rel  # Kafka's own byte count of the file
            assert seg.mtime_ns == MTIMES_MS[rel] * 1_000_000, rel
            assert (seg.index, seg.time_index, seg.txn_index) == (None, None, None)  # fixtures hold .log only
        assert stray == [] and unexpected == []
    segments, _, _ = list_segments(legacy_logdir / "compacted-v0-0")
    assert [s.base_offset for s in segments] == [0, 100, 200]
    assert [s.size for s in segments] == [836, 600, 953]


def test_segments_sort_by_offset_and_pick_up_index_siblings_and_broker_leftovers(legacy_logdir):
    part = legacy_logdir / "plain-v0-0"
    (part / "00000000000000000000.index").write_bytes(b"\0" * 8)
    (part / "00000000000000000000.timeindex").write_bytes(b"\0" * 12)
    (part / "00000000000000000040.index").write_bytes(b"")
    (part / "00000000000000000080.txnindex").write_bytes(b"\0" * 34)
    (part / "00000000000000000120.index").write_bytes(b"")  # orphan: Kafka deletes it at start-up
    (part / "00000000000000000040.log.swap").write_bytes(b"")
    (part / "00000000000000000000.log.deleted").write_bytes(b"")  # unlinked unread at start-up: ignored
    (part / "00000000000000000000.index.cleaned").write_bytes(b"")
    (part / "backup.log").write_bytes(b"")  # Kafka's offsetFromFileName throws on it
    (part / "00000000000000000001.snapshot").write_bytes(b"")  # producer snapshot: ignored
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")
    (part / ".kafka-log-migrate").mkdir()  # our work dir: a directory, invisible to Kafka's loader
    (part / ".kafka-log-migrate" / "00000000000000000000.log").write_bytes(b"")
    segments, stray, unexpected = list_segments(part)
    assert [s.base_offset for s in segments] == [0, 40, 80]
    first, second, third = segments
    assert (first.index.size, first.time_index.size, first.txn_index) == (8, 12, None)
    assert first.index.path == part / "00000000000000000000.index"
    assert (second.index.size, second.time_index) == (0, None)
    assert (third.index, third.txn_index.size) == (None, 34)
    assert stray == [
        "00000000000000000000.index.cleaned",
        "00000000000000000040.log.swap",
    ]
    assert unexpected == ["00000000000000000120.index", "backup.log"]


def test_inspect_log_dir_classifies_every_child_dir_as_kafka_would(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "already-v2-1"])
    shutil.copytree(LEGACY_LOGDIR / "plain-v1-1", log_dir / "plain-v1-1.0123456789abcdef0123456789abcdef-future")
    shutil.copytree(LEGACY_LOGDIR / "lz4-v1-1", log_dir / "lz4-v1-1.0123456789abcdef0123456789abcdef-delete")
    (log_dir / "old-0.0123456789abcdef0123456789abcdef-stray").mkdir()
    for name in ("lost+found", "__cluster_metadata-0", "remote-log-index-cache", "kafka-log-migrate.IN-PROGRESS"):
        (log_dir / name).mkdir()
    (log_dir / "notes.txt").write_text("root files are ignored by Kafka")
    layout = inspect_log_dir(log_dir)
    assert [p.name for p in layout.partitions] == ["already-v2-1", "plain-v0-1"]
    assert [(p.topic, p.partition, p.kind) for p in layout.partitions] == [
        ("already-v2", 1, "current"),
        ("plain-v0", 1, "current"),
    ]
    assert [(p.topic_partition, p.kind, len(p.segments)) for p in layout.future] == [("plain-v1-1", "future", 2)]
    assert set(layout.other_dirs) == {
        "lost+found",
        "__cluster_metadata-0",
        "remote-log-index-cache",
        "kafka-log-migrate.IN-PROGRESS",
        "lz4-v1-1.0123456789abcdef0123456789abcdef-delete",
        "old-0.0123456789abcdef0123456789abcdef-stray",
    }
    text = "\n".join(layout.warnings)
    assert f"{log_dir / 'lost+found'}: not a topic-partition directory. A Kafka broker refuses to start" in text
    assert "marked for deletion" in text and "future replica of plain-v1-1" in text and "stray log of old-0" in text
    assert "migration is in progress" in text
    assert "__cluster_metadata" not in text and "remote-log-index-cache" not in text  # Kafka skips these silently
    assert len(layout.warnings) == 5
    layout = inspect_log_dir(log_dir)  # what plan uses: live partitions only
    partitions, warnings = layout.partitions, layout.warnings
    assert [p.name for p in partitions] == ["already-v2-1", "plain-v0-1"] and warnings == layout.warnings

    handed: list[tuple[str, str, int]] = []
    streamed = inspect_log_dir(log_dir, lambda p: handed.append((p.name, p.kind, len(p.segments))))
    # each partition handed over once, as read (live and future in directory order), none kept; the rest the same
    assert sorted(handed) == sorted((p.name, p.kind, len(p.segments)) for p in [*layout.partitions, *layout.future])
    assert streamed.partitions == [] and streamed.future == []
    assert streamed.warnings == layout.warnings and streamed.other_dirs == layout.other_dirs


def test_inspect_log_dir_warns_about_broker_leftovers_and_duplicate_partition_dirs(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    (log_dir / "plain-v0-1" / "00000000000000000030.log.swap").write_bytes(b"")
    shutil.copytree(LEGACY_LOGDIR / "plain-v0-1", log_dir / "plain-v0-01")  # parses as plain-v0 partition 1 too
    layout = inspect_log_dir(log_dir)
    assert [p.stray_files for p in layout.partitions] == [[], ["00000000000000000030.log.swap"]]
    text = "\n".join(layout.warnings)
    assert "00000000000000000030.log.swap left by a broker that died" in text
    assert "a second directory for plain-v0-1" in text and "duplicate log directories" in text


def test_inspect_log_dir_of_a_missing_dir_says_so(tmp_path):
    with pytest.raises(LogDirAccessError, match="no such directory"):
        inspect_log_dir(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(LogDirAccessError, match="not a directory"):
        inspect_log_dir(tmp_path / "file")


# --- .lock ------------------------------------------------------------------------------------------------------


def _can_lock_from_another_process(log_dir: Path) -> bool:
    """What a broker starting now would find: can another process fcntl-lock .lock?"""
    code = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
        "try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n"
    )
    rc = subprocess.run([sys.executable, "-c", code, str(log_dir / ".lock")], timeout=30).returncode
    assert rc in (0, 3)
    return rc == 0


def test_a_broker_held_lock_is_detected_and_refused(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    assert lock_holder(log_dir) is None and not (log_dir / ".lock").exists()  # probing creates nothing
    with lock_held_by_other_process(log_dir, "fcntl") as broker:
        assert lock_holder(log_dir) is not None
        assert lock_holder(log_dir) == broker.pid
        with pytest.raises(LogDirLockedError) as info:
            LogDirLock(log_dir).acquire()
        message = str(info.value)
        assert str(log_dir) in message and f"process {broker.pid}" in message
        assert "a Kafka broker or another kafka-log-migrate is using" in message and "Stop the broker" in message
        assert info.value.holder_pid == broker.pid
        assert (log_dir / ".lock").exists()  # the broker's file is left alone
    assert lock_holder(log_dir) is None  # a leftover .lock nobody holds is not a lock
    assert (log_dir / ".lock").exists()


def test_an_flock_from_another_process_is_not_kafkas_lock(tmp_path):
    """Kafka's JVM locks with fcntl(F_SETLK); on Linux flock(2) locks do not see fcntl locks, nor the reverse."""
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    with lock_held_by_other_process(log_dir, "flock"):
        # the flock is really held: a second flock from here fails ...
        fd = os.open(log_dir / ".lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        # ... but neither we nor a starting broker see it as Kafka's lock
        assert lock_holder(log_dir) is None
        assert _can_lock_from_another_process(log_dir)
        with LogDirLock(log_dir) as lock:
            assert lock.held and not lock.created
            assert not _can_lock_from_another_process(log_dir)  # ours is a real fcntl lock


def test_lock_we_create_is_removed_and_kafkas_own_is_kept(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    with LogDirLock(log_dir) as lock:
        assert lock.created and (log_dir / ".lock").exists()
        assert not _can_lock_from_another_process(log_dir)  # a broker starting now would fail
        assert lock_holder(log_dir) == os.getpid()
    assert not (log_dir / ".lock").exists()
    assert _can_lock_from_another_process(log_dir)  # leaves a .lock behind (Kafka's FileLock creates it)
    before = (log_dir / ".lock").stat()
    with LogDirLock(log_dir) as lock:
        assert not lock.created
    after = (log_dir / ".lock").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    with LogDirLock(log_dir, remove_after=True):  # a resumed run removing the .lock its crashed first run made
        pass
    assert not (log_dir / ".lock").exists()


def test_the_same_log_dir_cannot_be_locked_twice_in_one_process(tmp_path):
    """fcntl locks are per process: a second lock would 'succeed', and its close would drop the first one."""
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    with LogDirLock(log_dir):
        with pytest.raises(LogDirLockedError, match="this kafka-log-migrate process already holds"):
            LogDirLock(log_dir).acquire()
        with pytest.raises(LogDirLockedError):
            LogDirLock(str(log_dir) + "/").acquire()
        assert lock_holder(log_dir) is not None  # probing from this process must not drop our lock either
        assert not _can_lock_from_another_process(log_dir)
    assert _can_lock_from_another_process(log_dir)


def test_lock_on_a_missing_log_dir_says_what_is_wrong(tmp_path):
    with pytest.raises(LogDirAccessError, match="no such log dir"):
        LogDirLock(tmp_path / "missing").acquire()
    assert lock_holder(tmp_path / "missing") is None


# --- .kafka_cleanshutdown ---------------------------------------------------------------------------------------


def test_clean_shutdown_marker_forms(tmp_path):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    assert has_clean_shutdown(log_dir)
    assert read_clean_shutdown(log_dir) == CleanShutdown(version=0, broker_epoch=BROKER_EPOCH)
    marker = log_dir / ".kafka_cleanshutdown"
    marker.write_text("")  # Kafka 0.8 .. 3.6: Files.createFile
    assert read_clean_shutdown(log_dir) == CleanShutdown(None, None) and has_clean_shutdown(log_dir)
    marker.write_text('{"version":0,"brokerEpoch":123456789012,"future":true}')  # unknown fields are ignored
    assert read_clean_shutdown(log_dir) == CleanShutdown(0, 123456789012)
    marker.unlink()
    assert read_clean_shutdown(log_dir) is None and not has_clean_shutdown(log_dir)
    unclean = make_broker_logdir(tmp_path / "b", partitions=["plain-v0-1"], clean_shutdown=False)
    assert read_clean_shutdown(unclean) is None


@pytest.mark.parametrize("content", ["version: 0\nbrokerEpoch: 7", "[0, 7]", '{"version":0}', '{"brokerEpoch":"x"}'])
def test_malformed_clean_shutdown_marker_names_the_file(tmp_path, content):
    (tmp_path / ".kafka_cleanshutdown").write_text(content)
    with pytest.raises(MalformedLogDirFileError) as info:
        read_clean_shutdown(tmp_path)
    assert str(tmp_path / ".kafka_cleanshutdown") in str(info.value)
    assert "broker epoch as unknown" in str(info.value)
    assert has_clean_shutdown(tmp_path)  # Kafka still skips recovery: only existence counts


# --- meta.properties --------------------------------------------------------------------------------------------


def test_meta_properties_zookeeper_and_kraft(tmp_path):
    zk = read_meta_properties(make_broker_logdir(tmp_path / "zk", partitions=["plain-v0-1"], broker_id=3))
    assert (zk.version, zk.broker_id, zk.cluster_id, zk.directory_id) == (0, 3, CLUSTER_ID, None)
    kraft = read_meta_properties(
        make_broker_logdir(tmp_path / "kr", partitions=["plain-v0-1"], broker_id=4, kraft=True)
    )
    assert (kraft.version, kraft.broker_id, kraft.cluster_id) == (1, 4, CLUSTER_ID)
    assert kraft.directory_id and kraft.properties["node.id"] == "4"
    assert read_meta_properties(tmp_path) is None


def test_meta_properties_read_as_java_properties(tmp_path):
    (tmp_path / "meta.properties").write_text(
        "# written by kafka-storage.sh\n! old-style comment\n\n  version = 1\nnode.id:7\n"
        "cluster.id   \\\n    aBc\\u0044\ndirectory.id=x\\=y\n"
    )
    meta = read_meta_properties(tmp_path)
    assert (meta.version, meta.broker_id, meta.cluster_id, meta.directory_id) == (1, 7, "aBcD", "x=y")


def test_malformed_meta_properties_names_file_and_line(tmp_path):
    (tmp_path / "meta.properties").write_text("version=0\ncluster.id=abc\nbroker.id=one\n")
    with pytest.raises(MalformedLogDirFileError) as info:
        read_meta_properties(tmp_path)
    assert f"{tmp_path / 'meta.properties'}, line 3: broker.id='one' is not an integer" in str(info.value)
    assert "Kafka refuses to start" in str(info.value)


# --- checkpoints ------------------------------------------------------------------------------------------------


def test_checkpoints_of_a_broker_log_dir(tmp_path):
    parts = ["plain-v0-0", "compacted-v0-0", "already-v2-1", "empty-segment-1", "truncated-tail-0"]
    log_dir = make_broker_logdir(tmp_path, partitions=parts)
    recovery = read_offset_checkpoint(log_dir / "recovery-point-offset-checkpoint")
    # log end offsets as Kafka sees the fixtures: last offset + 1 (compaction keeps offset 219 as the last)
    assert recovery == {
        ("plain-v0", 0): 105,
        ("compacted-v0", 0): 220,
        ("already-v2", 1): 20,
        ("empty-segment", 1): 0,
        ("truncated-tail", 0): 24,
    }
    assert read_offset_checkpoint(log_dir / "replication-offset-checkpoint") == recovery
    assert read_offset_checkpoint(log_dir / "log-start-offset-checkpoint") == {}
    assert read_offset_checkpoint(log_dir / "cleaner-offset-checkpoint") == {("compacted-v0", 0): 200}
    assert {f for f in CHECKPOINT_FILES if (log_dir / f).exists()} == set(CHECKPOINT_FILES)
    assert read_offset_checkpoint(log_dir / "no-such-checkpoint") == {}  # Kafka creates it empty
    assert leader_epoch_entries(log_dir / "plain-v0-0") == [(0, 0)]
    assert (
        log_dir / "plain-v0-0" / "partition.metadata"
    ).read_text() == f"version: 0\ntopic_id: {topic_id('plain-v0')}"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", {}),  # Kafka creates checkpoint files empty
        ("0\n", {}),
        ("0\n0\n", {}),
        ("0\r\n2\r\nt 0 5\r\nt\t1   9", {("t", 0): 5, ("t", 1): 9}),  # readLine line ends; \s+ separators
        ("0\n2\nt 0 5\nt 0 7\n", {("t", 0): 7}),  # duplicates: the last wins (Kafka builds a map)
        ("0\n1\nmy-topic +3 -1\n", {("my-topic", 3): -1}),
    ],
)
def test_offset_checkpoint_reads_what_kafka_reads(tmp_path, content, expected):
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_bytes(content.encode())
    assert read_offset_checkpoint(path) == expected


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        ("1\n0\n", 1, "unknown checkpoint version 1"),
        ("zero\n0\n", 1, "malformed version line 'zero'"),
        ("0 \n0\n", 1, "malformed version line '0 '"),  # Integer.parseInt does not trim
        ("0\nthree\n", 2, "malformed entry count line 'three'"),
        ("0\n3\nt 0 5\nt 1 6\n", 2, "line 2 declares 3 entries but the file holds 2"),
        ("0\n1\nt 0 5\nt 1 6\n", 2, "line 2 declares 1 entries but the file holds 2"),
        ("0\n2\nt 0 5\nt 1\n", 4, "malformed entry 't 1'"),
        ("0\n2\nt 0 5\n t 1 6\n", 4, "malformed entry ' t 1 6'"),  # Java's split keeps a leading empty field
        ("0\n2\nt 0 5\n\n", 4, "malformed entry ''"),  # an empty line is an entry Kafka cannot parse
        ("0\n1\nt zero 5\n", 3, "integer partition and offset"),
        ("0\n1\nt 0 99999999999999999999\n", 3, "integer partition and offset"),  # beyond Long.MAX_VALUE
    ],
)
def test_malformed_offset_checkpoint_names_file_and_line(tmp_path, content, line, reason):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(content)
    with pytest.raises(MalformedLogDirFileError) as info:
        read_offset_checkpoint(path)
    assert (info.value.path, info.value.line) == (str(path), line)
    assert str(info.value).startswith(f"{path}, line {line}: ")
    assert reason in str(info.value)
    assert "Nothing was changed" in str(info.value)
    assert isinstance(info.value, MigrateError)


def test_leader_epoch_checkpoint(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n3\n0 0\n4 1200\n9 100000000000\n")
    assert read_leader_epoch_checkpoint(path) == [(0, 0), (4, 1200), (9, 100000000000)]
    assert leader_epoch_entries(tmp_path) == [(0, 0), (4, 1200), (9, 100000000000)]
    path.write_text("0\n0\n")  # what a partition with only legacy data has
    assert read_leader_epoch_checkpoint(path) == []
    assert read_leader_epoch_checkpoint(tmp_path / "missing") == []
    path.write_text("0\n2\n0 0\n1 x\n")
    with pytest.raises(MalformedLogDirFileError, match=r"leader-epoch-checkpoint, line 4: malformed entry '1 x'"):
        read_leader_epoch_checkpoint(path)
    path.write_text("0\n1\n0 0 0\n")
    with pytest.raises(MalformedLogDirFileError, match="line 3: malformed entry '0 0 0' \\(expected 2 fields"):
        leader_epoch_entries(tmp_path)


# --- free space -------------------------------------------------------------------------------------------------


def test_free_bytes_reports_statvfs_and_honours_the_cap(tmp_path):
    st = os.statvfs(tmp_path)
    free = free_bytes(tmp_path)
    assert abs(free - st.f_bavail * st.f_frsize) < 64 << 20  # other processes write meanwhile
    assert free_bytes(tmp_path, free_bytes_cap=4096) == min(4096, free)
    assert free_bytes(tmp_path, 0) == 0
    assert free_bytes(tmp_path, None) > 0
