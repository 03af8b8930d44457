"""The staging tree turned against a running broker, as a hostile operator (or a confused script) would: links
planted where the pass writes and deletes (to the log dir, to a live partition, to a place outside, to each other,
dangling), hard links to live files, directories where files should be, two passes at once, and a staged segment
forged with its record. Each case runs with another process holding the log dir's fcntl ``.lock`` and no
clean-shutdown marker (a running broker), and lists every entry under the log dir and everywhere outside the
staging tree before and after (name, type, inode, size, mtime, ctime, content): the pass may refuse, but nothing
inside the log dir is created, renamed, changed or deleted, and nothing outside the staging tree is touched."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from kafka_layout import lock_held_by_other_process
from prestage_layout import broker_log_dir
from runs import assert_scan_agrees

from migrate import pipeline
from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE, segment_name
from migrate.planning.plan import load_plan
from migrate.prestage.controls import Controls
from migrate.prestage.location import StagingPlaceError, default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.record import staged_segments
from migrate.prestage.staged_index import INDEX_NAME
from migrate.prestage.tree import LOCK_FILE


def listing(root: Path, *, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry under ``root``, ``root`` included, but those under ``skip``: (type, inode, size, mtime, ctime,
    sha256 of a file's bytes or a link's target); never following a link."""
    out: dict[str, tuple] = {}
    todo = [root]
    while todo:
        path = todo.pop()
        if skip is not None and (path == skip or skip in path.parents):
            continue
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            kind, content = "link", os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            kind, content = "dir", ""
            todo += [path / name for name in os.listdir(path)]
        elif stat.S_ISREG(st.st_mode):
            kind, content = "file", hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            kind, content = "other", ""
        out[str(path.relative_to(root.parent))] = (kind, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, content)
    return out


def running_broker(tmp_path: Path) -> tuple[Path, Path]:
    """A log dir as a running broker keeps it (no clean-shutdown marker; the caller holds its .lock), and a place
    outside, holding files named like segments (an ``/etc``-like directory a link may point at)."""
    log_dir = broker_log_dir(tmp_path / "data", partitions=2, segments=3)
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    outside = tmp_path / "etc"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    for base in (0, 100):
        (outside / segment_name(base, ".log")).write_bytes(b"not a segment " * 10)
        (outside / segment_name(base, ".index")).write_bytes(b"\0" * 16)
    return log_dir, outside


def prestage(log_dir: Path) -> None:
    run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())


def prestage_cli(log_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "migrate.cli", "prestage", "--log-dirs", str(log_dir), "--rate", "0", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_untouched(tmp_path: Path, log_dir: Path, staging: Path, before: tuple[dict, dict]) -> None:
    live_before, outside_before = before
    assert listing(log_dir) == live_before, "the pass changed the log dir"
    assert listing(tmp_path, skip=staging) == outside_before, "the pass touched something outside the staging tree"


def snapshot(tmp_path: Path, log_dir: Path, staging: Path) -> tuple[dict, dict]:
    return listing(log_dir), listing(tmp_path, skip=staging)


@pytest.mark.parametrize("planted", ["root", "staging-dir"])
def test_a_default_staging_tree_linked_to_the_log_dir_is_refused_naming_the_link(tmp_path, planted):
    log_dir, _ = running_broker(tmp_path)
    parent = log_dir.parent / ".kafka-log-migrate-staging"
    if planted == "root":  # <parent>/.kafka-log-migrate-staging/<log dir name> -> the log dir
        parent.mkdir()
        link, target = parent / log_dir.name, log_dir
    else:  # .kafka-log-migrate-staging -> . : <parent>/.kafka-log-migrate-staging/kafka is the log dir itself
        link, target = parent, Path(".")
    link.symlink_to(target)
    with lock_held_by_other_process(log_dir):
        before = snapshot(tmp_path, log_dir, tmp_path / "nothing")
        done = prestage_cli(log_dir)
        assert_untouched(tmp_path, log_dir, tmp_path / "nothing", before)
    assert done.returncode == 1, done.stderr
    assert f"{link} is a symbolic link to {target}" in done.stderr
    assert "Nothing was written or deleted" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("name", "target"),
    [("t-0", "live partition"), ("t-0", "outside"), ("foo-9", "outside"), ("foo-9", "log dir")],
)
def test_a_staged_partition_dir_replaced_by_a_link_is_refused(tmp_path, name, target):
    log_dir, outside = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    with lock_held_by_other_process(log_dir):
        prestage(log_dir)
        assert (staging / "t-0" / segment_name(0, ".prestaged.json")).exists()
        if name == "t-0":
            (staging / "t-0").rename(tmp_path / "aside")  # the real staging dir moved away, a link in its place
        pointed = {"live partition": log_dir / "t-0", "outside": outside, "log dir": log_dir}[target]
        (staging / name).symlink_to(pointed)
        before = snapshot(tmp_path, log_dir, staging)
        staged_before = listing(staging)
        done = prestage_cli(log_dir)
        assert_untouched(tmp_path, log_dir, staging, before)
        assert listing(staging) == staged_before  # refused before anything: the tree as found, too
    assert done.returncode == 1, done.stderr
    assert f"{staging / name} is a symbolic link to {pointed}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("planted", ["hard link to a live segment", "directory for a file", "link to a live index"])
def test_what_a_pass_would_overwrite_or_delete_is_refused(tmp_path, planted):
    log_dir, _ = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    with lock_held_by_other_process(log_dir):
        prestage(log_dir)
        victim = staging / "t-0" / segment_name(0, ".log")
        victim.unlink()
        if planted == "hard link to a live segment":
            os.link(log_dir / "t-0" / segment_name(200, ".log"), victim)  # the active one
        elif planted == "directory for a file":
            victim.mkdir()
            (victim / "keep").write_text("mine")
        else:
            victim.symlink_to(log_dir / "t-0" / segment_name(200, ".index"))
        before = snapshot(tmp_path, log_dir, staging)
        staged_before = listing(staging)
        done = prestage_cli(log_dir)
        assert_untouched(tmp_path, log_dir, staging, before)
        assert listing(staging) == staged_before
    assert done.returncode == 1, done.stderr
    assert str(victim) in done.stderr and "Nothing was written or deleted" in done.stderr
    assert "Traceback" not in done.stderr


def test_files_no_record_names_are_left_alone_and_said(tmp_path, capsys):
    log_dir, _ = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    with lock_held_by_other_process(log_dir):
        prestage(log_dir)
        foreign = staging / "t-0" / segment_name(900, ".log")  # named like ours, written by someone else
        foreign.write_bytes(b"an operator's own file")
        gone = staging / "t-9"  # a partition the log dir no longer has, holding a file no record names
        gone.mkdir()
        (gone / "notes.txt").write_text("mine")
        before = snapshot(tmp_path, log_dir, staging)
        assert main(["prestage", "--log-dirs", str(log_dir), "--rate", "0"]) == 0
        assert_untouched(tmp_path, log_dir, staging, before)
    err = capsys.readouterr().err
    assert foreign.read_bytes() == b"an operator's own file" and (gone / "notes.txt").read_text() == "mine"
    assert f"left alone: {foreign}: no record of this tool names it" in err
    assert f"left alone: {gone / 'notes.txt'}: no record of this tool names it" in err


def test_a_crash_while_a_segment_is_linked_leaves_only_what_the_next_pass_removes(tmp_path):
    log_dir, _ = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    with lock_held_by_other_process(log_dir):
        before = listing(log_dir)
        crashed = subprocess.run(
            [sys.executable, "-m", "migrate.cli", "prestage", "--log-dirs", str(log_dir), "--rate", "0"],
            env={**os.environ, "KAFKA_LOG_MIGRATE_CRASH_AT": "after:prestage-link"},
            capture_output=True,
        )
        assert crashed.returncode == 77
        names = sorted(os.listdir(staging / "t-0"))
        assert names == [segment_name(0, sfx) for sfx in (".index", ".log", ".prestaging.json", ".timeindex")]
        assert prestage_cli(log_dir).returncode == 0
        assert listing(log_dir) == before
    assert sorted(os.listdir(staging / "t-0")) == sorted(
        [
            *(segment_name(b, sfx) for b in (0, 100) for sfx in (".index", ".log", ".prestaged.json", ".timeindex")),
            INDEX_NAME,
        ]
    )


def test_two_passes_at_once_one_runs_and_the_other_names_it(tmp_path):
    log_dir, _ = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    pause = tmp_path / "pause"
    pause.touch()  # the first pass holds the tree, paused before its first byte
    with lock_held_by_other_process(log_dir):
        first = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "migrate.cli",
                "prestage",
                "--log-dirs",
                str(log_dir),
                "--rate",
                "0",
                "--pause-file",
                str(pause),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            holder = staging / LOCK_FILE
            deadline = time.monotonic() + 120
            while not (holder.exists() and holder.read_text().strip()):  # waits for the holder, never races it
                assert first.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            second = prestage_cli(log_dir)
            assert second.returncode == 1, second.stderr
            assert f"held by a prestage pass (pid {first.pid} on host" in second.stderr and "since" in second.stderr
            assert "REFUSED" not in second.stderr and "this is a bug" not in second.stderr
            assert "Traceback" not in second.stderr
        finally:
            pause.unlink()
            _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert "staged 4 segments" in err and "REFUSED" not in err


def test_a_forged_staged_segment_is_taken_but_finalize_refuses_and_rollback_restores(tmp_path, capsys):
    """The strong attacker: a staged .log replaced by another valid converted segment (another partition's, same
    base offset) and its record edited so that every recorded identity and digest matches the forgery. Execute
    takes it without reading it, as designed; finalize reads the original again and refuses; rollback restores."""
    log_dir = broker_log_dir(tmp_path / "data", partitions=2, segments=3)
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()
    with lock_held_by_other_process(log_dir):
        prestage(log_dir)
    (log_dir / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":7}')  # the broker stopped cleanly
    staging = default_staging_root(log_dir)
    originals = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    victim, donor = staging / "t-0", staging / "t-1"
    record_file = victim / segment_name(100, ".prestaged.json")
    record = json.loads(record_file.read_text())
    donor_record = json.loads((donor / segment_name(100, ".prestaged.json")).read_text())
    for sfx in (".log", ".index", ".timeindex"):
        forged = victim / segment_name(100, sfx)
        forged.unlink()
        shutil.copy2(donor / segment_name(100, sfx), forged)
        st = forged.stat()
        record["staged"][sfx].update(inode=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    for key in ("source_digest", "output_digest_ts", "records", "output_bytes", "output_stats", "output_digests"):
        record["result"][key] = donor_record["result"][key]
    record_file.unlink()
    record_file.write_text(json.dumps(record))
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    plan = load_plan(plan_path)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok and report.cutover is not None and report.cutover.staged_segments == 4  # taken unread
    assert_scan_agrees(plan, report)
    capsys.readouterr()
    captured = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert captured.code == 1
    err = captured.out + captured.err
    print(err)
    assert "refusing to finalize" in err and "partition t-0" in err and segment_name(100, ".log") in err
    assert f"recorded source digest {donor_record['result']['source_digest'][:16]}" in err
    assert "Nothing was deleted" in err
    assert main(["rollback", "--plan", str(plan_path)]) == 0
    assert {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()} == originals


def test_an_unforged_cut_over_finalizes_after_proving_what_it_took(tmp_path, capsys):
    log_dir = broker_log_dir(tmp_path / "data", partitions=2, segments=3)
    prestage(log_dir)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    assert main(["execute", "--plan", str(plan_path), "--engine", "serial"]) == 0
    assert main(["finalize", "--plan", str(plan_path)]) == 0
    assert not [s for s in staged_segments(log_dir) if s.record.staged]


def test_a_record_edited_after_the_plan_is_not_taken(tmp_path):
    log_dir = broker_log_dir(tmp_path / "data", partitions=1, segments=3)
    prestage(log_dir)
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "--log-dirs", str(log_dir), "-o", str(plan_path)]) == 0
    record_file = default_staging_root(log_dir) / "t-0" / segment_name(0, ".prestaged.json")
    record = json.loads(record_file.read_text())
    record["staged_at"] = "2020-01-01T00:00:00Z"  # any edit, however harmless it looks
    record_file.unlink()
    record_file.write_text(json.dumps(record))
    report = pipeline.execute(load_plan(plan_path), SerialEngine())
    assert report.ok and report.cutover is not None and report.cutover.staged_segments == 1
    (fallback,) = report.cutover.fallbacks
    assert segment_name(0, ".log") in fallback and "changed since the plan" in fallback


# --- a fuzz of the staging tree -----------------------------------------------------------------------------------

FUZZ_SEEDS = 1000


def _plant(rng: random.Random, log_dir: Path, staging: Path, outside: Path, hold: Path) -> list:
    """One to three hostile changes to the staging tree; returns how to undo them (oldest last)."""
    undo: list = []
    parts = sorted(p for p in staging.iterdir() if p.is_dir() and not p.is_symlink())
    live_files = sorted(p for p in log_dir.rglob("*") if p.is_file())
    targets = [
        log_dir,
        log_dir / "t-0",
        log_dir / "t-1",
        *rng.sample(live_files, 2),
        outside,
        outside / "passwd",
        outside / segment_name(0, ".log"),
        staging,
        *(parts[:1]),
        tmp_path_nowhere(staging),
    ]
    for _ in range(rng.randint(1, 3)):
        parts = sorted(p for p in staging.iterdir() if p.is_dir() and not p.is_symlink())
        where = rng.choice(parts) if parts and rng.random() < 0.7 else staging
        existing = sorted(where.iterdir()) if where.is_dir() else []
        if existing and rng.random() < 0.4:
            name = rng.choice(existing).name
            if name == LOCK_FILE and where == staging and rng.random() < 0.5:
                name = "t-7"
        else:
            name = rng.choice(
                [segment_name(rng.choice((0, 100, 900)), sfx) for sfx in (".log", ".index")]
                + ["t-9", "foo-9", LOCK_FILE]
            )
        path = where / name
        if os.path.lexists(path):
            aside = hold / f"{len(os.listdir(hold))}"
            os.rename(path, aside)
            undo.append(("back", aside, path))
        else:
            undo.append(("remove", path))
        action = rng.choice(["symlink", "symlink", "hardlink", "dir", "file-for-dir"])
        if action == "symlink":
            path.symlink_to(rng.choice(targets))
        elif action == "hardlink":
            os.link(rng.choice([*live_files, outside / "passwd"]), path)
        elif action == "dir":
            path.mkdir()
            (path / segment_name(0, ".log")).write_bytes(b"x")
        else:
            path.write_bytes(b"a file where a directory may belong")
    return undo


def tmp_path_nowhere(staging: Path) -> Path:
    return staging.parent.parent / "nowhere" / "at-all"


def _undo(undo: list) -> None:
    for step in reversed(undo):
        if step[0] == "remove":
            path = step[1]
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif os.path.lexists(path):
                path.unlink()
        else:
            _, aside, path = step
            if os.path.lexists(path):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            os.rename(aside, path)


def test_a_fuzz_of_the_staging_tree_never_touches_the_log_dir_or_anything_outside(tmp_path):
    log_dir, outside = running_broker(tmp_path)
    staging = default_staging_root(log_dir)
    hold = tmp_path / "hold"
    hold.mkdir()
    refused = passed = 0
    with lock_held_by_other_process(log_dir):
        prestage(log_dir)
        fds_before = len(os.listdir("/proc/self/fd"))
        for seed in range(FUZZ_SEEDS):
            rng = random.Random(seed)
            undo = _plant(rng, log_dir, staging, outside, hold)
            before = snapshot(tmp_path, log_dir, staging)
            try:
                run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())
                passed += 1
            except StagingPlaceError as exc:
                refused += 1
                assert "Nothing was written or deleted" in str(exc) or "nothing was written" in str(exc), (seed, exc)
            assert listing(log_dir) == before[0], f"seed {seed}: the log dir changed"
            assert listing(tmp_path, skip=staging) == before[1], f"seed {seed}: something outside was touched"
            _undo(undo)
            assert len(os.listdir("/proc/self/fd")) == fds_before, f"seed {seed}: a descriptor was left open"
    assert refused > FUZZ_SEEDS // 2 and passed > 0, (refused, passed)
