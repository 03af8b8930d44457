"""The files are the truth (issue 23), tried as a hostile operator would: a state database that is stale, truncated,
deleted (before a verb or under a running one) or another plan's; files changed behind a crashed swap or after a
finished one; a broker identity swapped; plan paths and work dirs that point outside the log dir; and the operator's
own missteps.

After every scenario: each partition is wholly original or wholly converted (Kafka's reader agrees where it is cheap to
ask), no original is deleted unless its conversion is live and verified, the fence is up exactly while a partition is
not whole, and the exit code, ``report.ok`` and the message say what happened.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import lock_held_by_other_process, make_broker_logdir
from runs import assert_scan_agrees, below_target, make_plan, run_verb, scan_partitions, snapshot
from test_crash_recovery import PARTITIONS, SUMMARIES, assert_migrated, crash, live_forms

from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.errors import StateWriteError
from migrate.format.entries import walk_entries
from migrate.model.plan_tree import dump_plan_json
from migrate.run import faults
from migrate.run.workspace import FENCE_NAME, state_path, work_dir

SUFFIXES = ("", "-wal", "-shm")


# --- helpers ----------------------------------------------------------------------------------------------------


@pytest.fixture
def setup(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    plan, plan_path = make_plan(tmp_path, broker)
    return broker, plan, plan_path, snapshot(broker)


def db_files(broker: Path, plan) -> list[Path]:
    return [Path(f"{state_path(broker, plan.plan_id)}{s}") for s in SUFFIXES]


def fence_up(broker: Path) -> bool:
    return (broker / FENCE_NAME).is_dir()


def assert_whole(broker: Path, before: dict) -> dict[str, str]:
    """Every partition wholly original or wholly converted, and the fence down (nothing is mixed)."""
    forms = live_forms(broker, before)
    assert set(forms.values()) <= {"original", "migrated"}, forms
    assert not fence_up(broker), forms
    return forms


def assert_rolled_back(broker: Path, plan, before: dict) -> None:
    assert snapshot(broker) == before
    assert not list(broker.rglob(".kafka-log-migrate-*/")), "a work dir was left behind"
    for (_, name), entry in scan_partitions(plan).items():  # the independent scan sees legacy data only
        assert below_target(entry, plan.options.target_magic), name
        assert 2 not in entry.batches_by_magic, (name, entry.batches_by_magic)


def finish_execute(broker: Path, plan) -> None:
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report
    assert_scan_agrees(plan, report)
    assert_migrated(broker, plan)  # fence down, Kafka's records, every .log all v2


def crash_mid_swap(plan_path: Path, broker: Path, before: dict) -> dict[str, str]:
    """execute killed after its second exchange: one partition converted (its original kept inside it), one
    exchanged (its original still in the fence), one built but not moved (original at its path); fence up."""
    crash("execute", plan_path, "after:exchange:2")
    forms = live_forms(broker, before)
    assert sorted(forms.values()) == ["migrated", "migrated", "original"], forms
    assert fence_up(broker)
    assert [p.name for p in (broker / FENCE_NAME).iterdir() if p.is_dir()] == [sorted(PARTITIONS)[1]]
    return forms


def originals(broker: Path) -> dict[str, str]:
    """Every file of an original directory kept for rollback (inside a converted one, or in the fence), by
    content."""
    kept = [p for p in broker.rglob("*") if p.is_file() and ("/original/" in str(p) or FENCE_NAME in str(p))]
    return {str(p.relative_to(broker)): hashlib.sha256(p.read_bytes()).hexdigest() for p in kept}


def first_entry(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: 12 + int.from_bytes(data[8:12], "big")]  # v0, v1 and v2 share the offset and length framing


# --- 1. a stale database: an older copy restored after a crash mid-swap --------------------------------------------


def stale_database(broker: Path, plan, plan_path: Path, before: dict, tmp_path: Path) -> None:
    crash("execute", plan_path, "commit:outcomes")  # all converted, none swapped
    aside = tmp_path / "db-copy"
    aside.mkdir()
    for f in db_files(broker, plan):
        if f.exists():
            shutil.copy2(f, aside / f.name)
    crash_mid_swap(plan_path, broker, before)
    for f in db_files(broker, plan):
        f.unlink(missing_ok=True)
    for f in aside.iterdir():
        shutil.copy2(f, broker / f.name)


def test_stale_database_status_tells_what_the_files_say_then_execute_finishes(setup, tmp_path, capsys, oracle):
    broker, plan, plan_path, before = setup
    stale_database(broker, plan, plan_path, before, tmp_path)
    ran = run_cli(capsys, "status", "--plan", str(plan_path))
    assert ran.code == 0
    assert "the files say otherwise" in ran.text, ran.text
    forms = live_forms(broker, before)
    for name, form in forms.items():
        if form != "original":  # the partitions the stale database calls ready are named as swapped or mixed
            assert any(name in line and "the files say" in line for line in ran.text.splitlines()), (name, ran.text)
    assert "exchanged" in ran.text and "converted" in ran.text
    assert fence_up(broker)
    finish_execute(broker, plan)
    assert_whole(broker, before)
    for part in PARTITIONS:  # Kafka's own reader agrees: valid, every record there, all v2
        summary = oracle.summary(broker / part)[0]
        assert summary["valid"], (part, summary["errors"])
        assert summary["sha256"] == SUMMARIES[part]["sha256"], part
        assert set(summary["magics"]) == {"2"}, part


def test_stale_database_then_rollback_restores_every_byte(setup, tmp_path):
    broker, plan, plan_path, before = setup
    stale_database(broker, plan, plan_path, before, tmp_path)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert sum(len(r.restored) for r in result.rollbacks) >= 2  # the converted and the exchanged one, at least
    assert_rolled_back(broker, plan, before)


def test_a_stale_migrated_database_after_a_crashed_rollback_never_lets_finalize_delete(setup, tmp_path, capsys):
    """The database says every partition is migrated (a copy from after execute), the files say a rollback put some
    originals back before it was killed: finalize must delete nothing, rollback must finish."""
    broker, plan, plan_path, before = setup
    finish_execute(broker, plan)
    copy = tmp_path / "migrated.db"
    src, dst = sqlite3.connect(state_path(broker, plan.plan_id)), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    crash("rollback", plan_path, "after:exchange-back:2")
    forms = live_forms(broker, before)
    assert sorted(forms.values()) == ["migrated", "original", "original"], forms
    for f in db_files(broker, plan):
        f.unlink(missing_ok=True)
    shutil.copy2(copy, state_path(broker, plan.plan_id))
    crashed = snapshot(broker)
    backups = originals(broker)
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1, ran.text
    assert originals(broker) == backups
    assert {k: v for k, v in snapshot(broker).items() if ".kafka-log-migrate-" not in k and k != "."} == {
        k: v for k, v in crashed.items() if ".kafka-log-migrate-" not in k and k != "."
    }
    assert fence_up(broker)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert_rolled_back(broker, plan, before)


# --- 2. a truncated database after a crash mid-swap ---------------------------------------------------------------


def truncate_database(broker: Path, plan) -> None:
    db, *others = db_files(broker, plan)
    os.truncate(db, 100)
    for f in others:
        f.unlink(missing_ok=True)


def test_truncated_database_rollback_restores_everything(setup):
    broker, plan, plan_path, before = setup
    crash_mid_swap(plan_path, broker, before)
    truncate_database(broker, plan)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    restored = sum(len(r.restored) for r in result.rollbacks)
    assert restored >= 2, result  # never "0 partitions restored" with the fence up
    assert any("unreadable" in line for r in result.rollbacks for line in r.reconciled), result
    assert_rolled_back(broker, plan, before)


def test_truncated_database_execute_finishes(setup):
    broker, plan, plan_path, before = setup
    crash_mid_swap(plan_path, broker, before)
    truncate_database(broker, plan)
    finish_execute(broker, plan)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert_rolled_back(broker, plan, before)


# --- 2b. a database that lost its -wal (and with it its last commits) after a crash mid-swap --------------------


@pytest.mark.parametrize("then", ["execute", "rollback"])
def test_a_database_that_lost_its_wal_after_a_crash_mid_swap(setup, capsys, then):
    broker, plan, plan_path, before = setup
    crash_mid_swap(plan_path, broker, before)
    for f in db_files(broker, plan)[1:]:
        f.unlink(missing_ok=True)
    ran = run_cli(capsys, "status", "--plan", str(plan_path))
    assert ran.code == 0
    assert "not started" not in ran.text and ("the files say otherwise" in ran.text or "rebuilt" in ran.text), ran.text
    if then == "execute":
        finish_execute(broker, plan)
        assert_whole(broker, before)
    else:
        result = pipeline.rollback(plan, SerialEngine(), plan_path)
        assert result.ok, result
        assert_rolled_back(broker, plan, before)


# --- 3. a deleted database after a crash mid-swap -----------------------------------------------------------------


@pytest.mark.parametrize("then", ["execute", "rollback"])
def test_deleted_database_status_says_rebuild_and_the_verbs_finish(setup, capsys, then):
    broker, plan, plan_path, before = setup
    crash_mid_swap(plan_path, broker, before)
    for f in db_files(broker, plan):
        f.unlink(missing_ok=True)
    ran = run_cli(capsys, "status", "--plan", str(plan_path))
    assert ran.code == 0
    assert "not started" not in ran.text, ran.text
    assert "missing" in ran.text and "rebuilt" in ran.text, ran.text
    assert not any(f.exists() for f in db_files(broker, plan)), "status wrote a database"
    if then == "execute":
        finish_execute(broker, plan)
        assert_whole(broker, before)
    else:
        result = pipeline.rollback(plan, SerialEngine(), plan_path)
        assert result.ok, result
        assert_rolled_back(broker, plan, before)


# --- 4. the database deleted under a running execute -------------------------------------------------------------


def test_database_deleted_mid_run_stops_with_the_cause_and_execute_finishes(setup, monkeypatch):
    from migrate.stages.convert import convert_task
    from migrate.stages.prepare import prepare_log_dir

    broker, plan, plan_path, before = setup
    log_dir = plan.log_dirs[0].log_dir
    prepare_log_dir(plan, log_dir)
    real_point = faults.point

    def delete_db(name: str) -> None:
        if name == "before:syncfs":  # the task converted, opened the state, and is about to record its outcomes
            for f in db_files(broker, plan):
                f.unlink(missing_ok=True)
        real_point(name)

    monkeypatch.setattr(faults, "point", delete_db)
    with pytest.raises(StateWriteError, match="was deleted or replaced while this run was using it"):
        convert_task(plan, plan.tasks[0].id, "run1")
    monkeypatch.setattr(faults, "point", real_point)
    assert not any(f.exists() for f in db_files(broker, plan)), "the run wrote into a new database"
    assert live_forms(broker, before) == dict.fromkeys(PARTITIONS, "original")
    # the fence of this plan is up: the state is rebuilt from the plan and the files
    finish_execute(broker, plan)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert_rolled_back(broker, plan, before)  # no backup orphaned


def test_database_deleted_under_a_whole_execute_fails_it_naming_the_cause(setup, monkeypatch):
    broker, plan, plan_path, before = setup
    real_point = faults.point
    deleted = []

    def delete_db(name: str) -> None:
        if name == "before:syncfs" and not deleted:
            deleted.append(name)
            for f in db_files(broker, plan):
                f.unlink(missing_ok=True)
        real_point(name)

    monkeypatch.setattr(faults, "point", delete_db)
    report = pipeline.execute(plan, SerialEngine())
    monkeypatch.setattr(faults, "point", real_point)
    assert deleted and not report.ok
    text = " ".join(e.message for e in report.errors)
    assert "deleted or replaced" in text, report.errors
    assert "original" in live_forms(broker, before).values() or fence_up(broker)
    finish_execute(broker, plan)
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert result.ok, result
    assert_rolled_back(broker, plan, before)


# --- 5. another plan's database under this plan's name -----------------------------------------------------------


def test_a_database_of_another_plan_is_refused_and_named(setup, tmp_path, capsys):
    broker, plan, plan_path, before = setup
    other_broker = make_broker_logdir(tmp_path / "other", partitions=["plain-v0-1"])
    other, _ = make_plan(tmp_path, other_broker, name="other.json")
    assert other.plan_id != plan.plan_id
    finish_other = pipeline.execute(other, SerialEngine())
    assert finish_other.ok
    src = sqlite3.connect(state_path(other_broker, other.plan_id))
    dst = sqlite3.connect(state_path(broker, plan.plan_id))
    src.backup(dst)  # a consistent copy, one file
    src.close()
    dst.close()
    planted = snapshot(broker)
    ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial")
    assert ran.code == 1
    assert "another plan" in ran.text and str(broker) in ran.text, ran.text
    assert "summary of plan" not in ran.text, (
        ran.text
    )  # no summary read from the other plan's rows: none of them ran here
    assert snapshot(broker) == planted
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok and any("another plan" in e.message for e in report.errors), report.errors
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert not result.ok
    assert snapshot(broker) == planted
    assert live_forms(broker, before) == dict.fromkeys(PARTITIONS, "original")


# --- 6. resume re-checks every source of a partition before its exchange ----------------------------------------


def top_files(part_dir: Path) -> dict[str, tuple]:
    out = {}
    for p in sorted(part_dir.iterdir()):
        if p.is_file():
            st = p.stat()
            out[p.name] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_ino, st.st_mtime_ns)
    return out


# the first partition's new directory built and recorded, then moved into the fence but not exchanged: its original
# is still at its path, where a broker (or a person) could have changed a file before the run was resumed
@pytest.mark.parametrize("point", ["after:swap-record", "after:new-into-fence"])
@pytest.mark.parametrize("change", ["append", "truncate", "replace", "delete"])
def test_resume_rechecks_every_source_before_the_exchange(setup, capsys, change, point):
    broker, plan, plan_path, before = setup
    crash("execute", plan_path, point)
    part = sorted(PARTITIONS)[0]  # the first partition of the batch
    later = sorted((broker / part).glob("*.log"))[-1]
    assert live_forms(broker, before)[part] == "original"
    original_later = later.read_bytes()
    if change == "append":  # a broker appends copies of the segment's own first message
        with later.open("ab") as f:
            f.write(first_entry(later) * 3)
    elif change == "truncate":
        os.truncate(later, len(first_entry(later)))
    elif change == "replace":
        tmp = later.with_name("new.tmp")
        tmp.write_bytes(original_later)
        os.replace(tmp, later)
    else:
        later.unlink()
    changed = later.read_bytes() if later.exists() else None
    files_before = top_files(broker / part)

    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    assert_scan_agrees(plan, report)
    assert top_files(broker / part) == files_before, "the changed partition was moved"
    assert not fence_up(broker)  # its new directory was removed: nothing is in the fence, nothing is mixed
    (failed,) = report.log_dirs[0].unmigrated
    assert failed.partition == part and str(later) in failed.problem.message, failed
    # the other partitions were finished by the same execute
    assert all(f == "migrated" for p, f in live_forms(broker, before).items() if p != part)

    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert not fence_up(broker) and not list(broker.rglob(".kafka-log-migrate-*/"))
    after = snapshot(broker)
    rel = f"{part}/{later.name}"
    assert (later.read_bytes() if later.exists() else None) == changed  # what the broker did is kept as it left it
    assert {k: v for k, v in after.items() if k not in (rel, ".", part)} == {
        k: v for k, v in before.items() if k not in (rel, ".", part)
    }


# --- 7. a live segment changed after a finished swap -------------------------------------------------------------


def test_an_append_after_the_swap_is_the_brokers_and_nothing_else(setup, capsys):
    """A broker started on the converted data appends to the active segment: its data, not a fault. execute has
    nothing left to do, verify says the converted data is exact and lists the append (exit 5), rollback refuses
    naming what it would lose, and finalize deletes the originals, saying what it found."""
    broker, plan, plan_path, _before = setup
    finish_execute(broker, plan)
    live = broker / "plain-v0-1" / "00000000000000000030.log"  # the partition's last segment: the active one
    size = live.stat().st_size
    with live.open("ab") as f:
        f.write(first_entry(live))
    appended = live.read_bytes()
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok, report.errors
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 5, ran.text
    assert (
        "TAKEN OVER" in ran.text and f"{live}: appended: offsets 30..30 ({len(appended) - size} bytes)" in ran.text
    ), ran.text
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 1 and "would lose" in ran.text and f"{live}: appended" in ran.text, ran.text
    kept = originals(broker)
    assert len(kept) == 12  # three originals kept whole: their segments and every other file of theirs
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert "plain-v0-1:" in ran.text and "appended" in ran.text, ran.text
    assert originals(broker) == {} and live.read_bytes() == appended


def test_a_same_size_same_mtime_rewrite_of_a_closed_converted_segment_stops_finalize(setup, capsys):
    broker, plan, plan_path, _before = setup
    finish_execute(broker, plan)
    backups = originals(broker)
    live = broker / "gzip-v0-0" / "00000000000000000000.log"  # closed: a later segment follows it
    st = live.stat()
    with open(live, "r+b") as f:  # the first batch's attributes and timestamps, rewritten in place
        f.seek(20)
        head = f.read(20)
        f.seek(20)
        f.write(bytes(b ^ 0x5A for b in head))
    os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = live.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    ran = run_cli(capsys, "verify", "--plan", str(plan_path))
    assert ran.code == 3 and f"differs: {live}" in ran.text, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1, ran.text
    assert str(live) in ran.text and "no broker operation explains" in ran.text, ran.text
    assert originals(broker) == backups


# --- 8. the broker's identity changed after planning -------------------------------------------------------------


@pytest.mark.parametrize("how", ["other-broker", "deleted"])
def test_meta_properties_changed_after_plan_refuses_execute(setup, capsys, how):
    broker, plan, plan_path, _before = setup
    meta = broker / "meta.properties"
    if how == "deleted":
        meta.unlink()
    else:
        meta.write_text(meta.read_text().replace("broker.id=1", "broker.id=2"))
    changed = snapshot(broker)
    ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial")
    assert ran.code == 1
    assert "meta.properties" in ran.text, ran.text
    assert snapshot(broker) == changed, "execute wrote in a log dir it refused"
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok and any("meta.properties" in e.message for e in report.errors)
    assert snapshot(broker) == changed


# --- 9. plan paths that leave the log dir: a small fuzz ----------------------------------------------------------


def listing(root: Path) -> dict[str, tuple]:
    """Every entry under root and root itself by name, inode, mtime and size (lstat: links are not followed)."""
    out = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = os.lstat(p)
        out[str(p.relative_to(root))] = (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)
    return out


def hostile_variants(log: str):
    """(partition name, partition dir, log dir) for the partition plain-v0-1, each leaving its log dir."""
    name = "plain-v0-1"
    return [
        (name, f"{log}/..", log),
        (name, f"{log}/{name}/../x", log),
        (name, f"{log}/../kafka-logs/{name}", log),
        (name, f"{log}/./{name}", log),
        (name, f"{log}//{name}", log),
        (name, f"{log}/{name}/", log),
        (name, f"{os.path.dirname(log)}/{name}", log),
        ("..", f"{log}/..", log),
        (".", f"{log}/.", log),
        (name, f"{log}/{name}", f"{log}/../kafka-logs"),
        (f"{name}/..", f"{log}/{name}/..", log),
    ]


def test_fuzz_plan_paths_outside_the_log_dir_are_refused_and_nothing_outside_changes(tmp_path, capsys):
    host = tmp_path / "host"
    broker = make_broker_logdir(host, partitions=PARTITIONS)
    (host / "neighbour.txt").write_text("not Kafka's")
    plan, _ = make_plan(tmp_path, broker)
    plans = tmp_path / "plans"
    plans.mkdir()
    for i, (name, part_dir, log) in enumerate(hostile_variants(str(broker))):
        entry = plan.log_dirs[0]
        parts = tuple(
            dataclasses.replace(p, name=name, dir=part_dir) if p.name == "plain-v0-1" else p for p in entry.partitions
        )
        hostile = dataclasses.replace(plan, log_dirs=(dataclasses.replace(entry, partitions=parts, log_dir=log),))
        hostile = dataclasses.replace(hostile, plan_id=hostile.content_id())
        path = plans / f"hostile-{i}.json"
        path.write_text(dump_plan_json(hostile))
        seen = listing(host)
        ran = run_cli(capsys, "execute", "--plan", str(path), "--engine", "serial")
        assert ran.code != 0, (part_dir, ran.text)
        assert listing(host) == seen, (part_dir, ran.text)
        ran = run_cli(capsys, "rollback", "--plan", str(path))
        assert ran.code != 0, (part_dir, ran.text)
        assert listing(host) == seen, (part_dir, ran.text)


# --- 10. work dirs and the fence planted as symbolic links --------------------------------------------------------


def test_a_work_dir_planted_as_a_symlink_is_never_followed(setup, tmp_path):
    broker, plan, plan_path, before = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00000000000000000000.log.orig").write_text("an operator's file")
    seen = listing(outside)
    link = work_dir(broker / "gzip-v0-0", plan.plan_id)
    link.symlink_to(outside)
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    assert any("symbolic link" in e.message for e in report.errors), report.errors
    assert listing(outside) == seen, "something was written through the link"
    assert live_forms(broker, before)["gzip-v0-0"] == "original"
    forms = live_forms(broker, before)
    assert set(forms.values()) <= {"original", "migrated"}
    assert fence_up(broker) == ("mixed" in forms.values())
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert listing(outside) == seen
    assert link.is_symlink()
    assert not result.ok or live_forms(broker, before) == dict.fromkeys(PARTITIONS, "original")


def test_a_partition_dir_swapped_for_a_symlink_after_plan_is_never_followed(setup, tmp_path):
    broker, plan, _plan_path, before = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    os.rename(broker / "lz4-v1-1", outside / "lz4-v1-1")  # same inodes, sizes and mtimes as planned
    (broker / "lz4-v1-1").symlink_to(outside / "lz4-v1-1")
    seen = listing(outside)
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    assert any("symbolic link" in e.message for e in report.errors), report.errors
    assert listing(outside) == seen, "something was written through the link"
    forms = live_forms(broker, before)  # through the link, read only: still the original
    assert forms["lz4-v1-1"] == "original" and set(forms.values()) <= {"original", "migrated"}, forms


def test_a_fence_planted_as_a_symlink_is_refused_before_anything_converts(setup, tmp_path):
    broker, plan, _plan_path, before = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "README.txt").write_text(f"Plan id: {plan.plan_id}\n")
    (broker / FENCE_NAME).symlink_to(outside)
    seen = listing(outside)
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok
    assert report.totals.verified == 0
    assert not list(broker.glob(f"*/{work_dir('', plan.plan_id).name}")), "staged before the fence was checked"
    assert listing(outside) == seen
    assert live_forms(broker, before) == dict.fromkeys(PARTITIONS, "original")
    assert (broker / FENCE_NAME).is_symlink()


# --- 11. the operator's items ------------------------------------------------------------------------------------


def test_an_execute_refused_for_a_held_lock_leaves_no_state_and_the_next_plan_runs(setup, tmp_path, capsys):
    broker, _plan, plan_path, before = setup
    with lock_held_by_other_process(broker):
        ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial")
        assert ran.code == 1, ran.text
        assert ".lock" in ran.text or "lock" in ran.text, ran.text
    assert not list(broker.glob(".kafka-log-migrate-*.db*")), "a refused execute left a state database"
    assert not fence_up(broker)
    assert live_forms(broker, before) == dict.fromkeys(PARTITIONS, "original")
    ran = run_cli(capsys, "plan", "--log-dirs", str(broker), "-o", str(tmp_path / "next.json"))
    assert ran.code == 0, ran.text


def test_status_after_a_crash_says_no_run_is_live_and_how_to_go_on(setup, capsys):
    broker, _plan, plan_path, before = setup
    crash_mid_swap(plan_path, broker, before)
    ran = run_cli(capsys, "status", "--plan", str(plan_path))
    assert ran.code == 0
    assert "no run is active" in ran.text, ran.text
    assert f"execute --plan {plan_path}" in ran.text and f"rollback --plan {plan_path}" in ran.text, ran.text
    assert "running now" not in ran.text


def test_verbs_after_finalize_say_it_was_finalized(setup, capsys):
    broker, plan, plan_path, before = setup
    finish_execute(broker, plan)
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    finalized = snapshot(broker)
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 1, ran.text
    assert "finalized" in ran.text and "0 partitions restored" not in ran.text, ran.text
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert "finalized earlier" in ran.text and "execute" not in ran.text.split("run log")[0], ran.text
    assert snapshot(broker) == finalized
    assert set(assert_whole(broker, before).values()) == {"migrated"}


def test_verbs_after_rollback_say_it_was_rolled_back(setup, capsys):
    broker, plan, plan_path, before = setup
    finish_execute(broker, plan)
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert snapshot(broker) == before
    ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
    assert ran.code == 0, ran.text
    assert "rolled back earlier" in ran.text, ran.text
    assert snapshot(broker) == before


def test_control_a_finished_execute_is_seen_as_migrated(setup):
    """Control: the helpers see a finished run as migrated (every .log all v2), so the checks above can fail."""
    broker, _plan, plan_path, before = setup
    assert run_verb("execute", plan_path, {}) == 0
    for log in broker.glob("*/*.log"):
        assert set(walk_entries(log.read_bytes()).magics.tolist()) == {2}
    assert set(assert_whole(broker, before).values()) == {"migrated"}
