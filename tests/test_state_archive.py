"""The state archived beside the plan by rollback and finalize: a broker's database (about 1 KB per segment, 1 GB at
10^6) travels in pieces, every piece of one unchanged file, and a log dir whose state could not be archived keeps it
and is not reported done."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import pytest
from kafka_layout import make_broker_logdir
from runs import below_target, make_plan, scan_partitions

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.errors import MigrateError
from migrate.model.run_state import EventKind, LogDirPhase, Stage
from migrate.run.state import StateStore
from migrate.run.workspace import state_path
from migrate.stages import finalize

PARTITIONS = ["plain-v0-0", "gzip-v0-0", "lz4-v1-1", "compacted-v0-0"]
PIECE = 4096  # a database of these few partitions is tens of KB: many pieces


@pytest.fixture
def migrated(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(finalize, "ARCHIVE_CHUNK_BYTES", PIECE)
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report
    return plan, plan_path, broker


def _rows(db: Path) -> tuple[str, int, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        return (
            check,
            conn.execute("SELECT count(*) FROM segments").fetchone()[0],
            conn.execute("SELECT count(*) FROM events").fetchone()[0],
        )
    finally:
        conn.close()


def _archived(report, broker: Path, plan) -> tuple[Path, LogDirPhase]:
    """The verb succeeded, its state left the log dir, and the one archive it names, with the phase it holds."""
    assert report.ok, report
    assert not state_path(broker, plan.plan_id).exists()
    (target,) = report.archived
    with StateStore.open_file(Path(target)) as store:
        return Path(target), store.phase


def test_a_database_of_many_pieces_is_archived_byte_for_byte(migrated):
    plan, plan_path, broker = migrated
    live = state_path(broker, plan.plan_id)
    archived, errors = pipeline._archive(plan, SerialEngine(), plan_path, [plan.log_dirs[0].key])
    assert errors == []
    target = Path(archived[plan.log_dirs[0].key])
    assert live.stat().st_size > 4 * PIECE  # it did take several pieces
    assert target.read_bytes() == live.read_bytes()  # checkpointed: the file alone is the whole state
    check, segments, _ = _rows(target)
    assert check == "ok" and segments == plan.estimates.segments


def test_rollback_archives_in_pieces_and_the_log_dir_keeps_nothing(migrated):
    plan, plan_path, broker = migrated
    target, phase = _archived(pipeline.rollback(plan, SerialEngine(), plan_path), broker, plan)
    assert phase == LogDirPhase.ROLLED_BACK
    assert _rows(target)[:2] == ("ok", plan.estimates.segments)
    seen = scan_partitions(plan)
    assert all(below_target(seen[(broker.as_posix(), p.name)], 2) for p in plan.log_dirs[0].partitions)


def test_a_piece_of_a_changed_database_is_refused_naming_the_file_and_byte(migrated):
    plan, _, broker = migrated
    key = plan.log_dirs[0].key
    first = finalize.state_snapshot(plan, key)
    assert first.offset == 0 and len(first.data) == PIECE and first.size > PIECE
    with StateStore.open(broker, plan.plan_id) as store:
        store.record_event(EventKind.STATE_CORRECTED, why="a second command wrote meanwhile")
        store.checkpoint()
    with pytest.raises(MigrateError) as caught:
        finalize.state_snapshot(plan, key, PIECE, first.stamp)
    message = str(caught.value)
    assert str(state_path(broker, plan.plan_id)) in message
    assert f"at byte {PIECE} of " in message and "run the same command again" in message


def test_state_changed_between_pieces_is_kept_in_the_log_dir_and_the_next_finalize_archives_it(migrated, monkeypatch):
    plan, plan_path, broker = migrated
    real = pipeline.state_snapshot
    meddled: list[int] = []

    def meddling(plan_, key, offset=0, stamp=None):
        if offset == 2 * PIECE and not meddled:  # another writer between two pieces of the same archive
            meddled.append(offset)
            with StateStore.open(broker, plan.plan_id) as store:
                store.record_event(EventKind.STATE_CORRECTED, why="a second command wrote meanwhile")
                store.checkpoint()
        return real(plan_, key, offset, stamp)

    monkeypatch.setattr(pipeline, "state_snapshot", meddling)
    first = pipeline.finalize(plan, SerialEngine(), plan_path)
    assert meddled and not first.ok
    (error,) = first.errors
    assert error.stage == Stage.ARCHIVE and error.log_dir == plan.log_dirs[0].key
    assert "changed while it was being archived" in error.message and "run the same command again" in error.message
    assert first.archived == ()
    assert state_path(broker, plan.plan_id).exists()  # not forgotten: the log dir keeps its only copy
    assert not pipeline.archive_path(plan_path, plan.log_dirs[0].key).exists()
    assert not list(pipeline.archive_dir(plan_path).glob("*.partial"))

    _, phase = _archived(pipeline.finalize(plan, SerialEngine(), plan_path), broker, plan)
    assert phase == LogDirPhase.FINALIZED
    seen = scan_partitions(plan)
    assert not any(below_target(seen[(broker.as_posix(), p.name)], 2) for p in plan.log_dirs[0].partitions)


class SendsArchives(SerialEngine):
    """An engine whose calls may run on another host: the archive travels as bytes."""

    shares_files = False


def test_verify_after_finalize_reads_the_archive_in_place_or_sent_whole_alike(migrated, monkeypatch):
    plan, plan_path, _ = migrated
    finalized = pipeline.finalize(plan, SerialEngine(), plan_path)
    assert finalized.ok
    (archive,) = (Path(a) for a in finalized.archived)
    archived_bytes = archive.read_bytes()
    sent: list[tuple] = []
    real = pipeline.verify_live_log_dir

    def recorded(plan, key, *rest):
        sent.append(tuple(type(x).__name__ for x in rest))
        return real(plan, key, *rest)

    monkeypatch.setattr(pipeline, "verify_live_log_dir", recorded)
    in_place = pipeline.verify_live(plan, SerialEngine(), plan_path)
    whole = pipeline.verify_live(plan, SendsArchives(), plan_path)
    assert sent == [("NoneType", "str", "tuple"), ("ArchiveCopy",)]  # in place: the shard (one, of 10 segments)
    assert in_place == whole and in_place.ok
    assert archive.read_bytes() == archived_bytes  # read where it is, not changed
    (check,) = in_place.log_dirs
    assert check.phase == LogDirPhase.FINALIZED and check.checked_segments == 10 and not check.problems
    part = plan.log_dirs[0].partitions[0]
    live = Path(part.dir) / f"{part.segments[0].base_offset:020d}.log"
    changed = bytearray(live.read_bytes())
    changed[-1] ^= 1  # the last record's value: no longer the bytes that were swapped in
    live.write_bytes(bytes(changed))
    for engine in (SerialEngine(), SendsArchives()):
        report = pipeline.verify_live(plan, engine, plan_path)
        assert not report.ok and any(part.name in p for c in report.log_dirs for p in c.problems), report


def test_verify_through_another_host_sends_the_archive_in_pieces_and_leaves_no_copy(migrated, monkeypatch, tmp_path):
    plan, plan_path, _ = migrated
    finalized = pipeline.finalize(plan, SerialEngine(), plan_path)
    assert finalized.ok
    (archive,) = (Path(a) for a in finalized.archived)
    scratch = tmp_path / "worker-tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the worker host's temporary directory
    monkeypatch.setattr(pipeline, "ARCHIVE_CHUNK_BYTES", PIECE)
    pieces: list[tuple[int, int]] = []
    real = pipeline.receive_archive_piece

    def received(plan, key, token, offset, data):
        pieces.append((offset, len(data)))
        assert len(list(scratch.iterdir())) == (1 if offset else 0)  # one copy, put together piece by piece
        return real(plan, key, token, offset, data)

    monkeypatch.setattr(pipeline, "receive_archive_piece", received)
    whole = pipeline.verify_live(plan, SendsArchives(), plan_path)
    in_place = pipeline.verify_live(plan, SerialEngine(), plan_path)
    size = archive.stat().st_size
    assert size > 3 * PIECE
    assert pieces == [(o, min(PIECE, size - o)) for o in range(0, size, PIECE)]
    assert whole == in_place and whole.ok and whole.log_dirs[0].checked_segments == 10
    assert list(scratch.iterdir()) == []

    def lost(plan, key, token, offset, data):
        if offset == PIECE:
            return len(data)  # sent to another host, or lost on the way
        return real(plan, key, token, offset, data)

    monkeypatch.setattr(pipeline, "receive_archive_piece", lost)
    report = pipeline.verify_live(plan, SendsArchives(), plan_path)
    assert not report.ok and not report.log_dirs
    (error,) = report.errors
    assert "a piece went to another host or was lost" in error.message and f"{size} bytes" in error.message
    assert list(scratch.iterdir()) == []  # removed, whatever the outcome
