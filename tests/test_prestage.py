"""Pre-staging on a running broker: what Kafka does to the files between and during passes, and what the cut-over
will be handed (``migrate.prestage.record``). Each Kafka action is simulated with the file operations the broker's
code performs (tests/prestage_layout.py)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import lock_held_by_other_process, make_broker_logdir
from prestage_layout import (
    add_segment,
    broker_log_dir,
    cleaner_merge,
    gen,
    judge,
    read_index_at,
    retention_delete,
    snapshot,
    staging_root,
)

from migrate.cli import main
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.prestage.controls import Controls
from migrate.prestage.location import StagingPlaceError, default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.record import Verdict, staged_segments
from migrate.prestage.staged_index import INDEX_NAME

FIXTURE_PARTITIONS = ["plain-v0-0", "plain-v1-0", "mixed-v0-v1-0", "gzip-v0-0", "lz4-v1-0", "already-v2-0"]


def prestage(log_dir: Path, passes: int = 1, controls: Controls | None = None, **kw):
    report = run_prestage(PrestageRequest(log_dirs=(str(log_dir),), passes=passes, **kw), controls or Controls())
    return report, report.passes[-1].log_dirs[0]


def staged_bases(log_dir: Path, partition: str) -> list[int]:
    return [s.record.base_offset for s in staged_segments(log_dir) if s.record.partition == partition]


def options_of(epoch: int = 3) -> ConvertOptions:
    """What plan would convert these partitions with: their leader-epoch-checkpoint starts at epoch 3."""
    return ConvertOptions().for_partition(epoch)


def test_nothing_under_the_log_dir_changes_while_the_broker_holds_its_lock(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path / "data", FIXTURE_PARTITIONS, clean_shutdown=False)
    add_segment(log_dir / "plain-v0-0", 10_000, 50)  # a new active segment: the fixture's last one is now closed
    with lock_held_by_other_process(log_dir) as holder:
        before = snapshot(log_dir)
        assert main(["prestage", "--log-dirs", str(log_dir), "--passes", "2", "--rate", "0"]) == 0
        after = snapshot(log_dir)
    assert after == before
    err = capsys.readouterr().err
    assert f"the broker holds its .lock (pid {holder.pid})" in err
    root = default_staging_root(log_dir)
    assert root == tmp_path / "data" / ".kafka-log-migrate-staging" / "kafka-logs"
    staged = list(staged_segments(log_dir))
    assert {s.record.partition for s in staged if s.record.staged} >= {"plain-v0-0", "gzip-v0-0", "lz4-v1-0"}
    assert all(not s.record.staged for s in staged if s.record.partition == "already-v2-0")  # v2 needs nothing
    assert "pass 2:" in err and "kept" in err


def test_staged_outputs_are_the_bytes_and_mtimes_execute_writes(tmp_path):
    log_dir = broker_log_dir(tmp_path / "live", partitions=3, segments=3, records=300)
    fixtures = make_broker_logdir(tmp_path / "fx", ["plain-v0-0", "mixed-v0-v1-0", "lz4-v1-0", "gzip-v0-0"])
    twin_dirs = []
    for source in (log_dir, fixtures):
        report, _ = prestage(source)
        assert report.ok
        twin = tmp_path / "cold" / source.parent.name / source.name
        shutil.copytree(source, twin)  # copy2: the mtimes the conversion stamps come along
        twin_dirs.append(twin)
    plan = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", ",".join(map(str, twin_dirs)), "-o", str(plan)]) == 0
    assert main(["execute", "--plan", str(plan), "--engine", "serial"]) == 0
    compared = 0
    for source, twin in zip((log_dir, fixtures), twin_dirs):
        for staged in staged_segments(source):
            for sfx, path in staged.files.items():
                live = twin / staged.record.partition / segment_name(staged.record.base_offset, sfx)
                assert path.read_bytes() == live.read_bytes(), live
                assert path.stat().st_mtime_ns == live.stat().st_mtime_ns, live
                assert path.stat().st_mode == live.stat().st_mode, live
                compared += 1
    assert compared >= 3 * 2 * 3 + 3


def test_retention_removes_staging_and_never_resurrects_it(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=4)
    prestage(log_dir)
    part = log_dir / "t-0"
    assert staged_bases(log_dir, "t-0") == [0, 100, 200]
    staged_files = [p for s in staged_segments(log_dir) if s.record.base_offset == 0 for p in s.files.values()]
    retention_delete(part, 0)
    _, done = prestage(log_dir)
    assert done.removed == 1 and done.staged == 0 and done.kept == 2
    assert staged_bases(log_dir, "t-0") == [100, 200]
    assert not any(p.exists() for p in staged_files)
    retention_delete(part, 100)
    _, done = prestage(log_dir, passes=2)
    assert staged_bases(log_dir, "t-0") == [200]
    assert sorted(os.listdir(default_staging_root(log_dir) / "t-0")) == [
        *(segment_name(200, sfx) for sfx in (".index", ".log", ".prestaged.json", ".timeindex")),
        INDEX_NAME,  # the partition's staged index: the one record left
    ]
    index = read_index_at(default_staging_root(log_dir) / "t-0")
    assert index.rows["base"].tolist() == [200]


class _Hostile(Controls):
    """Does what the broker does to the source once its read is under way (at the ``after``-th piece of I/O)."""

    def __init__(self, action, after: int = 2) -> None:
        super().__init__()
        self.piece = 4096
        self.action, self.after, self.calls = action, after, 0

    def gate(self, size: int) -> None:
        self.calls += 1
        if self.calls == self.after:
            self.action()
        super().gate(size)


def test_a_source_renamed_and_unlinked_while_read_is_rejected(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2, records=400)
    part = log_dir / "t-0"
    _report, done = prestage(log_dir, controls=_Hostile(lambda: retention_delete(part, 0)))
    assert len(done.rejected) == 1 and "unlinked while it was read" in done.rejected[0]
    assert done.staged == 0 and staged_bases(log_dir, "t-0") == []
    assert os.listdir(default_staging_root(log_dir) / "t-0") == []  # the partial outputs are gone too


def test_a_source_truncated_and_refilled_while_read_is_rejected(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2, records=400)
    seg = log_dir / "t-0" / segment_name(0, ".log")
    data = seg.read_bytes()

    def truncate_and_refill():
        with seg.open("r+b") as f:  # LogSegment.truncateTo: FileChannel.truncate, then appends in the same inode
            f.truncate(len(data) // 2)
            f.seek(len(data) // 2)
            f.write(data[len(data) // 2 :])
        os.utime(seg, ns=(seg.stat().st_atime_ns, 1_600_000_000_000_000_000))

    _, done = prestage(log_dir, controls=_Hostile(truncate_and_refill))
    assert len(done.rejected) == 1 and "changed while it was read" in done.rejected[0]
    _, done = prestage(log_dir)
    assert done.staged == 1  # the next pass stages it whole


def test_a_cleaner_merge_with_the_same_mtime_is_detected(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=4)
    part = log_dir / "t-0"
    prestage(log_dir)
    (before,) = [s for s in staged_segments(log_dir) if s.record.base_offset == 0]
    merged = cleaner_merge(part, [0, 100, 200])
    assert merged.stat().st_mtime_ns == before.record.source_identity.mtime_ns + 200  # the last source's mtime
    assert judge(before, merged, options_of()).verdict == Verdict.SOURCE_CHANGED
    _, done = prestage(log_dir)
    assert done.removed == 2 and done.staged == 1
    (after,) = staged_segments(log_dir)
    assert after.record.base_offset == 0 and after.record.result.records == 300
    assert after.record.source_identity.inode == merged.stat().st_ino
    assert after.record.result.source_digest != before.record.result.source_digest


def test_a_file_recreated_with_the_same_name_size_and_mtime_is_caught_by_ctime(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2)
    seg = log_dir / "t-0" / segment_name(0, ".log")
    prestage(log_dir)
    (staged,) = staged_segments(log_dir)
    data, st = seg.read_bytes(), seg.stat()
    seg.unlink()
    seg.write_bytes(data)
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = seg.stat()
    assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    judged = judge(staged, seg, options_of())
    assert judged.verdict == Verdict.SOURCE_CHANGED and "ctime_ns" in judged.reason
    _, done = prestage(log_dir)
    assert done.staged == 1 and done.kept == 0


def test_a_closed_segment_truncated_and_refilled_to_the_same_size_is_staged_again(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2)
    part = log_dir / "t-0"
    seg = part / segment_name(0, ".log")
    prestage(log_dir)
    (old,) = staged_segments(log_dir)
    st = seg.stat()
    other = (tmp_path / "other").joinpath("x.log")
    add_segment(other.parent, 0, 100, seed=99)  # same sizes, other values
    fresh = (other.parent / segment_name(0, ".log")).read_bytes()
    cut = 30 * gen.message_size(10, 100, 0)  # a batch boundary: LocalLog.truncateTo cuts between batches
    with seg.open("r+b") as f:
        f.truncate(cut)
        f.seek(cut)
        f.write(fresh[cut:])
    os.utime(seg, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert seg.stat().st_ino == st.st_ino and seg.stat().st_size == st.st_size
    _, done = prestage(log_dir)
    assert done.staged == 1
    (new,) = staged_segments(log_dir)
    assert new.record.result.source_digest != old.record.result.source_digest
    assert new.record.source_edge != old.record.source_edge


def test_the_active_segment_is_never_staged_and_the_next_pass_stages_what_rolled(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2)
    part = log_dir / "t-0"
    _, done = prestage(log_dir)
    assert staged_bases(log_dir, "t-0") == [0]
    assert done.active_bytes == (part / segment_name(100, ".log")).stat().st_size
    with (part / segment_name(100, ".log")).open("ab") as f:  # the active segment grows...
        f.write(gen.segment_bytes(50, first_offset=200))
    add_segment(part, 250, 100)  # ...and rolls twice
    add_segment(part, 350, 100)
    _, done = prestage(log_dir)
    assert done.kept == 1 and done.staged == 2
    assert staged_bases(log_dir, "t-0") == [0, 100, 250]
    (grown,) = [s for s in staged_segments(log_dir) if s.record.base_offset == 100]
    assert grown.record.result.records == 150


@pytest.mark.parametrize("damage", ["deleted", "truncated", "bit-flipped"])
def test_a_damaged_staged_output_is_staged_again(tmp_path, damage):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2)
    prestage(log_dir)
    (staged,) = staged_segments(log_dir)
    target = staged.files[FileKind.INDEX if damage == "truncated" else FileKind.LOG]
    st = target.stat()
    if damage == "deleted":
        target.unlink()
    elif damage == "truncated":
        os.truncate(target, st.st_size - 8)
    else:
        with target.open("r+b") as f:
            f.seek(st.st_size // 2)
            byte = f.read(1)
            f.seek(st.st_size // 2)
            f.write(bytes([byte[0] ^ 0x10]))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: ctime still tells
    judged = judge(staged, log_dir / "t-0" / segment_name(0, ".log"), options_of())
    assert judged.verdict == Verdict.STAGED_CHANGED
    _, done = prestage(log_dir)
    assert done.staged == 1
    (again,) = staged_segments(log_dir)
    assert judge(again, log_dir / "t-0" / segment_name(0, ".log"), options_of(), deep=True).usable


def test_what_the_cut_over_is_handed(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=3)
    source = log_dir / "t-0" / segment_name(0, ".log")
    prestage(log_dir)
    staged = next(s for s in staged_segments(log_dir) if s.record.base_offset == 0)
    record = json.loads(staged.record_path.read_text())
    assert set(record) >= {"source_identity", "source_edge", "options", "result", "staged", "tool"}
    assert set(record["source_identity"]) == {"device", "inode", "size", "mtime_ns", "ctime_ns"}
    assert record["options"]["partition_leader_epoch"] == 3  # the checkpoint's first epoch, as plan takes it
    options = options_of()
    assert judge(staged, source, options).usable
    assert judge(staged, source, options, deep=True).usable and judge(staged, source, options).usable
    assert judge(staged, source, options.for_partition(4)).verdict == Verdict.OPTIONS_DIFFER
    os.utime(source, ns=(1, 1))
    assert judge(staged, source, options).verdict == Verdict.SOURCE_CHANGED
    source.unlink()
    assert judge(staged, source, options).verdict == Verdict.SOURCE_GONE
    explicit = list(staged_segments(log_dir, default_staging_root(log_dir)))
    assert len(explicit) == 2


def test_a_partition_deleted_or_moved_loses_its_staging(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=2, segments=2)
    prestage(log_dir)
    (log_dir / "t-0").rename(log_dir / "t-0.0123456789abcdef0123456789abcdef-delete")  # LogManager.asyncDelete
    _, done = prestage(log_dir)
    assert done.removed == 1
    assert not (default_staging_root(log_dir) / "t-0").exists()
    assert {s.record.partition for s in staged_segments(log_dir)} == {"t-1"}


def test_a_partition_deleted_while_a_pass_runs_is_handled(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=2, segments=3, records=400)
    doomed = log_dir / "t-1"

    def async_delete():  # LogManager.asyncDelete, then Utils.delete once file.delete.delay.ms has passed
        gone = doomed.rename(log_dir / "t-1.0123456789abcdef0123456789abcdef-delete")
        shutil.rmtree(gone)

    report, done = prestage(log_dir, controls=_Hostile(async_delete))
    assert report.ok and not report.stopped
    assert {s.record.partition for s in staged_segments(log_dir)} == {"t-0"}
    assert not (default_staging_root(log_dir) / "t-1").exists() or not os.listdir(default_staging_root(log_dir) / "t-1")
    _, done = prestage(log_dir)
    assert done.kept == 2 and not (default_staging_root(log_dir) / "t-1").exists()


def test_passes_repeat_until_the_threshold(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=2, segments=3)
    report, done = prestage(log_dir, passes=5, threshold_bytes=0)
    assert report.ready and len(report.passes) == 1 and done.left_bytes == 0 and done.staged == 4
    report, _ = prestage(log_dir, passes=2)
    assert not report.ready and len(report.passes) == 2 and report.passes[1].log_dirs[0].kept == 4


def test_staging_places_kafka_would_trip_over_are_refused(tmp_path):
    log_dir = broker_log_dir(tmp_path / "data", partitions=1, segments=2)
    with pytest.raises(StagingPlaceError, match="inside log dir"):
        staging_root(log_dir, log_dir / "t-0" / "staging")
    with pytest.raises(StagingPlaceError, match="inside log dir"):
        staging_root(log_dir, log_dir / ".staging")
    with pytest.raises(StagingPlaceError, match="contains log dir"):
        staging_root(log_dir, tmp_path)
    (tmp_path / "data" / "meta.properties").write_text("version=0\nbroker.id=2\n")  # the parent is a log dir too
    with pytest.raises(StagingPlaceError, match="looks like a Kafka log dir"):
        staging_root(log_dir)
    assert staging_root(log_dir, tmp_path / "elsewhere") == tmp_path / "elsewhere"
    assert main(["prestage", "--log-dirs", str(log_dir), "--staging-dir", str(log_dir / "x")]) == 1


def test_help_describes_the_verb_and_every_option(capsys):
    ran = run_cli(capsys, "prestage", "--help")
    assert ran.code == 0
    out = ran.out
    for option in ("--staging-dir", "--passes", "--threshold", "--rate", "--pause-file", "--abort-file", "--topics"):
        assert option in out
    from migrate.cli import build_parser

    (sub,) = [a for a in build_parser("prestage")._actions if a.dest == "command"]
    assert [a.dest for a in sub.choices["prestage"]._actions if not a.help] == []
