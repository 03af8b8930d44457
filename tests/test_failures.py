"""The failures an operator meets, reproduced as they happen, and what the tool does about each.

Each test follows a failure listed in the control-plane issue: a refused segment in a shared task, a full disk, an
immutable file, a live file appended to between conversion and swap, a changed file found by rollback, two runs at
once, files owned by the broker's user, torn tails versus damage, unreadable scan inputs, and a hand-edited plan.
After every execute and rollback an independent ``scan`` must agree with what the command reported.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from broker_life import append
from conftest import REPO, expected_summaries, needs_root_power, run_cli
from kafka_layout import make_broker_logdir
from runs import assert_scan_agrees, below_target, make_plan, scan_partitions, snapshot

from migrate import pipeline
from migrate.cli import main
from migrate.engines import SerialEngine
from migrate.errors import RunLockedError
from migrate.format.entries import walk_entries
from migrate.model.run_state import PartitionState
from migrate.planning.plan import PlanRefusedError, build_plan
from migrate.planning.request import PlanRequest
from migrate.run.faults import FAIL_ENV
from migrate.run.run_lock import RunLock
from migrate.run.workspace import FENCE_NAME

PARTITIONS = ["plain-v0-0", "plain-v0-1", "gzip-v0-0", "lz4-v1-1", "snappy-v0-0"]
SUMMARIES = expected_summaries()


@pytest.fixture
def broker(tmp_path: Path) -> Path:
    return make_broker_logdir(tmp_path, partitions=PARTITIONS)


def damage(path: Path, at: int) -> int:
    """Flip one byte at ``at`` keeping size, mtime and inode (what the plan recorded); returns the start of the
    entry holding that byte."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x5A]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    walk = walk_entries(path.read_bytes())
    return int(next(p for p, s in zip(walk.positions, walk.sizes) if p <= at < p + s))


def states(report) -> dict[str, PartitionState]:
    return {p.partition: p.state for d in report.log_dirs for p in d.partitions}


# --- a refused segment fails its own partition only ---------------------------------------------------------------


def test_a_refused_segment_fails_only_its_partition_even_inside_a_shared_task(broker, tmp_path, capsys):
    plan, plan_path = make_plan(tmp_path, broker)
    assert len(plan.tasks) == 1  # every segment of every partition in one task
    victim = broker / "gzip-v0-0" / "00000000000000000092.log"
    entry = damage(victim, 300)
    report = pipeline.execute(plan, SerialEngine())
    assert not report.ok and not report.errors  # a refusal is an outcome, not a stage error
    assert_scan_agrees(plan, report)
    assert states(report) == {
        "plain-v0-0": PartitionState.MIGRATED,
        "plain-v0-1": PartitionState.MIGRATED,
        "gzip-v0-0": PartitionState.FAILED,
        "lz4-v1-1": PartitionState.MIGRATED,
        "snappy-v0-0": PartitionState.MIGRATED,
    }
    (refused,) = report.problems
    assert refused.problem.kind == "corrupt" and refused.problem.path == str(victim)
    assert refused.problem.position == entry and f"byte position {entry}" in refused.problem.message
    # the bad segment is gzip-v0-0's last: everything else was converted and verified, that one refused
    assert (report.totals.verified, report.totals.refused, report.totals.skipped) == (plan.estimates.segments - 1, 1, 0)
    assert not (broker / FENCE_NAME).exists()  # every partition wholly old or wholly new
    # the command line says so, and exits 1
    capsys.readouterr()
    ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial")
    assert ran.code == 1
    out = ran.out
    assert "4 of 5 partitions migrated" in out and "  FAILED  gzip-v0-0: " in out and str(victim) in out
    ran = run_cli(capsys, "verify", "--plan", str(plan_path), "--engine", "serial")
    assert ran.code == 1
    assert "1 planned partitions are not migrated, e.g. gzip-v0-0" in ran.out
    ran = run_cli(capsys, "finalize", "--plan", str(plan_path))
    assert ran.code == 1
    assert "not migrated (e.g. gzip-v0-0: failed)" in ran.out
    # --partial finalizes the migrated four and leaves gzip-v0-0 exactly as it was
    gzip_before = {p.name: p.read_bytes() for p in (broker / "gzip-v0-0").glob("*.log")}
    assert main(["finalize", "--plan", str(plan_path), "--partial"]) == 0
    assert {p.name: p.read_bytes() for p in (broker / "gzip-v0-0").glob("*.log")} == gzip_before
    assert not list(broker.glob("*/.kafka-log-migrate*")) and not list(broker.glob(".kafka-log-migrate*"))


def test_a_write_error_during_conversion_stops_the_run_and_the_next_execute_finishes(broker, tmp_path, monkeypatch):
    plan, _ = make_plan(tmp_path, broker)
    monkeypatch.setenv(FAIL_ENV, "before:convert:3=ENOSPC")
    report = pipeline.execute(plan, SerialEngine())
    monkeypatch.delenv(FAIL_ENV)
    assert not report.ok
    assert_scan_agrees(plan, report)
    assert all(s != PartitionState.MIGRATED for s in states(report).values())  # stopped before any swap
    (failed,) = report.problems
    assert failed.problem.kind == "io-error" and "No space left on device" in failed.problem.message
    assert "Free space on that filesystem, then run `execute` again" in failed.problem.message
    assert not (broker / FENCE_NAME).exists()  # nothing is mixed, so no broker is kept out
    again = pipeline.execute(plan, SerialEngine())
    assert again.ok, again
    assert_scan_agrees(plan, again)
    assert again.totals.verified == plan.estimates.segments - report.totals.verified  # exactly what remained


@pytest.mark.parametrize("point", ["before:convert-range:2", "before:join", "before:syncfs"])
def test_a_write_error_among_ranges_fails_their_segment_and_the_next_execute_finishes(
    broker, tmp_path, monkeypatch, point
):
    plan, _ = make_plan(tmp_path, broker, range_bytes=3000)
    assert all(t.byte_range for t in plan.tasks if any(s.partition == "gzip-v0-0" for s in t.segments))
    monkeypatch.setenv(FAIL_ENV, f"{point}=ENOSPC")
    report = pipeline.execute(plan, SerialEngine())
    monkeypatch.delenv(FAIL_ENV)
    assert not report.ok
    assert_scan_agrees(plan, report)
    assert all(s != PartitionState.MIGRATED for s in states(report).values())  # stopped before any swap
    said = [p.problem.message for p in report.problems] + [e.message for e in report.errors]
    assert any("No space left on device" in m for m in said), said
    again = pipeline.execute(plan, SerialEngine())
    assert again.ok, (again.errors, again.problems)
    assert_scan_agrees(plan, again)
    assert not list(broker.glob("*/.kafka-log-migrate-*/*.range-*"))  # no part file outlives the run that joined it


# --- a full disk or an I/O error at each write point of the swap --------------------------------------------------

SWAP_WRITE_POINTS = [
    "before:link",
    "before:link:4",
    "before:swap-record",
    "before:commit:swap-begun",
    "before:new-into-fence",
    "before:exchange",
    "before:keep-original:2",
    "before:syncfs-swap",
    "before:commit:partition-migrated",
    "before:fence-down",
    "before:commit:fence-down",
]


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EIO"])
@pytest.mark.parametrize("point", SWAP_WRITE_POINTS)
@pytest.mark.parametrize("then", ["execute", "rollback"])
def test_a_write_error_in_the_swap_stops_at_a_state_both_recoveries_finish(
    tmp_path, point, errno_name, then, monkeypatch
):
    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0", "lz4-v1-1"])
    before = snapshot(broker)
    plan, plan_path = make_plan(tmp_path, broker)
    monkeypatch.setenv(FAIL_ENV, f"{point}={errno_name}")
    report = pipeline.execute(plan, SerialEngine())
    monkeypatch.delenv(FAIL_ENV)
    assert not report.ok and report.errors, report
    assert_scan_agrees(plan, report)
    mixed = [p for p, s in states(report).items() if s.mixed]
    assert (broker / FENCE_NAME).exists() == bool(mixed) or point.startswith("before:commit:fence") or "fence" in point
    if then == "execute":
        again = pipeline.execute(plan, SerialEngine())
        assert again.ok, again
        assert_scan_agrees(plan, again)
        assert not (broker / FENCE_NAME).exists()
    else:
        assert pipeline.rollback(plan, SerialEngine(), plan_path).ok
        assert snapshot(broker) == before


@pytest.mark.parametrize(
    "range_bytes, left, state_room",
    [(None, 0.1, 0), (20000, 0.1, 0), (20000, 0.5, 150_000), (20000, 0.9, 190_000)],
    ids=["whole-segments", "ranges-in-prepare", "ranges-in-convert", "ranges-late"],
)
def test_a_real_full_disk_stops_cleanly_and_execute_finishes_once_space_is_freed(
    tmp_path, range_bytes, left, state_room
):
    """The disk fills up at different moments: ``state_room`` for the run's state (its SQLite files take about 120 KB
    here) plus a part of the output moves the moment into the conversion stage (with ranges, the 60 KB lz4 segment
    in 3; the injected cases below hit each range write point exactly). Each range also keeps three small files
    until its join, a few pages each, which on this 600 KB disk rules out ranges of a few KB (nothing at the default
    64 MiB)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mount)]).returncode != 0:
        needs_root_power("mounting a tmpfs needs CAP_SYS_ADMIN (the injected-ENOSPC cases cover every write point)")
    try:
        broker = make_broker_logdir(mount, partitions=["plain-v0-0", "gzip-v0-0", "lz4-v0-0", "mixed-v0-v1-0"])
        before = snapshot(broker)
        plan, plan_path = make_plan(tmp_path, broker, range_bytes=range_bytes)
        assert any(t.byte_range for t in plan.tasks) == (range_bytes is not None)
        filler = mount / "filler"
        with open(filler, "wb") as f:  # leave a part of what the conversion needs
            free = shutil.disk_usage(mount).free - int(plan.estimates.estimated_output_bytes * left) - state_room
            f.write(b"\0" * max(free, 0))
        report = pipeline.execute(plan, SerialEngine())
        assert not report.ok
        text = " ".join([e.message for e in report.errors] + [p.problem.message for p in report.problems])
        assert "No space left on device" in text or "full" in text, report
        assert_scan_agrees(plan, report)
        filler.unlink()
        again = pipeline.execute(plan, SerialEngine())
        assert again.ok, (report.errors, report.problems, again.errors, again.problems)
        assert_scan_agrees(plan, again)
        assert pipeline.rollback(plan, SerialEngine(), plan_path).ok
        assert snapshot(broker) == before
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# --- a file that refuses a link or a rename -----------------------------------------------------------------------


def test_an_immutable_file_fails_its_partition_and_the_others_migrate(broker, tmp_path, monkeypatch):
    plan, _ = make_plan(tmp_path, broker)
    victim = broker / "lz4-v1-1" / "leader-epoch-checkpoint"  # carried into the new directory by a hard link
    immutable = subprocess.run(["chattr", "+i", str(victim)], capture_output=True).returncode == 0
    if not immutable:  # a filesystem without attributes: the same EPERM, injected where the link is made
        monkeypatch.setenv(FAIL_ENV, "before:link:6=EPERM")
    try:
        report = pipeline.execute(plan, SerialEngine())
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(victim)], check=True)
        monkeypatch.delenv(FAIL_ENV, raising=False)
    assert not report.ok
    assert_scan_agrees(plan, report)
    failed = {p: s for p, s in states(report).items() if s != PartitionState.MIGRATED}
    assert list(failed.values()) == [PartitionState.FAILED]
    assert not (broker / FENCE_NAME).exists()  # its swap was undone: wholly old
    problem = report.log_dirs[0].unmigrated[0].problem
    assert "Operation not permitted" in problem.message and "lsattr" in problem.message
    again = pipeline.execute(plan, SerialEngine())  # the attribute is gone: the partition migrates
    assert again.ok, again
    assert_scan_agrees(plan, again)


# --- a live file that changes between conversion and swap, or after the swap --------------------------------------


@pytest.mark.parametrize("range_bytes", [None, 3000], ids=["whole-segments", "ranges"])
def test_messages_appended_after_conversion_fail_the_partition_and_are_never_lost(broker, tmp_path, range_bytes):
    from migrate.model.stage_reports import RangePart
    from migrate.stages.convert import convert_task
    from migrate.stages.join import join_segment
    from migrate.stages.prepare import prepare_log_dir
    from migrate.stages.swap import swap_log_dir

    plan, plan_path = make_plan(tmp_path, broker, range_bytes=range_bytes)
    log_dir = plan.log_dirs[0].log_dir
    prepare_log_dir(plan, log_dir)
    parts: dict[tuple[str, int], list[RangePart]] = {}
    for task in plan.tasks:
        value = convert_task(plan, task.id, "run1").range_part
        if value is not None:
            parts.setdefault((task.segments[0].partition, task.segments[0].base_offset), []).append(value)
    for (name, base), found in parts.items():  # the segments converted in ranges, joined as execute joins them
        join_segment(plan, log_dir, name, base, found, "run1")
    assert bool(parts) == (range_bytes is not None) and (range_bytes is None or ("plain-v0-1", 30) in parts)
    # a broker appends ten messages (copies of the segment's own first message) before the swap
    live = broker / "plain-v0-1" / "00000000000000000030.log"
    data = live.read_bytes()
    first = data[: 12 + int.from_bytes(data[8:12], "big")]
    with live.open("ab") as f:
        f.write(first * 10)
    appended = live.read_bytes()
    swap = swap_log_dir(plan, log_dir)
    assert [f.partition for f in swap.failed] == ["plain-v0-1"]
    assert "changed after it was converted" in swap.failed[0].problem.message
    assert live.read_bytes() == appended  # untouched, appended messages included
    report = pipeline.execute(plan, SerialEngine())  # a later execute sees the same change and refuses again
    assert not report.ok
    assert_scan_agrees(plan, report)
    assert live.read_bytes() == appended
    assert main(["finalize", "--plan", str(plan_path)]) == 1  # the only copy of those messages is never deleted


def test_rollback_checks_every_partition_before_renaming_anything(broker, tmp_path):
    plan, plan_path = make_plan(tmp_path, broker)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok
    migrated = snapshot(broker)
    third = sorted(PARTITIONS)[2]
    appended = append(broker / third, 3)  # a broker took producers' records there: rollback would lose them
    result = pipeline.rollback(plan, SerialEngine(), plan_path)
    assert not result.ok and len(result.refused) == 1 and str(broker / third) in result.refused[0]
    assert f"offsets {appended.start}..{appended.stop - 1}" in result.refused[0]
    after = snapshot(broker)
    assert {k: v for k, v in after.items() if not k.startswith(third) and k != "."} == {
        k: v for k, v in migrated.items() if not k.startswith(third) and k != "."
    }
    seen = scan_partitions(plan)
    assert not any(below_target(seen[(plan.log_dirs[0].log_dir, p)], 2) for p in PARTITIONS)  # all still migrated


# --- one run at a time ---------------------------------------------------------------------------------------------


def test_a_second_run_is_refused_at_once_naming_the_holder(broker, tmp_path, capsys):
    plan, plan_path = make_plan(tmp_path, broker)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from migrate.run.run_lock import RunLock; "
            "lock = RunLock([sys.argv[1]], sys.argv[2], 'execute').acquire(); "
            "print('held', flush=True); time.sleep(60)",
            str(broker),
            plan.plan_id,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=rf"execute \(pid {holder.pid} on host {os.uname().nodename}"):
            pipeline.execute(plan, SerialEngine())
        ran = run_cli(capsys, "rollback", "--plan", str(plan_path))
        assert ran.code == 1
        assert f"pid {holder.pid}" in ran.err
    finally:
        holder.kill()
        holder.wait()
    report = pipeline.execute(plan, SerialEngine())  # the kernel released the dead holder's lock
    assert report.ok
    assert_scan_agrees(plan, report)


def test_a_lock_left_by_a_crashed_run_does_not_block_the_next(broker, tmp_path):
    plan, _ = make_plan(tmp_path, broker)
    lock = RunLock([str(broker)], plan.plan_id, "execute").acquire()
    os.close(lock._held[0][1])  # the process "died": its descriptor and fcntl lock are gone, the file stays
    lock._held.clear()
    assert pipeline.execute(plan, SerialEngine()).ok


# --- ownership ------------------------------------------------------------------------------------------------------


def test_outputs_take_the_owner_group_and_mode_of_the_files_they_replace(broker, tmp_path):
    # giving a file to another uid needs root (CI runs as root); the mode is checked either way
    owner = (4321, 4322) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    for log in broker.glob("*/*.log"):
        os.chown(log, *owner)
        log.chmod(0o640)
    plan, _ = make_plan(tmp_path, broker)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok
    for p in plan.log_dirs[0].partitions:
        for s in p.segments:
            for sfx in (".log", ".index", ".timeindex"):
                st = (Path(p.dir) / f"{s.base_offset:020d}{sfx}").stat()
                assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (*owner, 0o640), (p.name, s.base_offset, sfx)


def test_the_partition_directory_keeps_its_owner_group_mode_and_mtime_through_execute_and_rollback(broker, tmp_path):
    """The swap exchanges whole directories: the new one takes the original's owner, group and mode (Kafka's user
    must still own it), and rollback brings the original directory itself back, its mtime too."""
    owner = (4321, 4322) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    dirs = sorted(d for d in broker.iterdir() if d.is_dir() and not d.name.startswith("."))
    for i, d in enumerate(dirs):
        os.chown(d, *owner)
        d.chmod(0o750 if i % 2 else 0o700)
        os.utime(d, ns=(1_600_000_000_000_000_000 + i, 1_600_000_000_000_000_000 + i))
    before = {d.name: (st.st_ino, st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns) for d in dirs if (st := d.stat())}
    plan, plan_path = make_plan(tmp_path, broker)
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok
    assert_scan_agrees(plan, report)
    for d in dirs:
        st = d.stat()
        assert st.st_ino != before[d.name][0], d  # a new directory, exchanged in
        assert (st.st_uid, st.st_gid, st.st_mode) == before[d.name][1:4], d
    assert pipeline.rollback(plan, SerialEngine(), plan_path).ok
    after = {d.name: (st.st_ino, st.st_uid, st.st_gid, st.st_mode, st.st_mtime_ns) for d in dirs if (st := d.stat())}
    assert after == before  # the original directories themselves, mtime included


# --- torn tails and damage ------------------------------------------------------------------------------------------


def test_a_torn_tail_is_listed_with_what_it_drops_and_only_that_is_dropped(tmp_path, oracle):
    broker = make_broker_logdir(tmp_path, partitions=["truncated-tail-0", "truncated-tail-1"])
    with pytest.raises(PlanRefusedError, match=r"partial entry at byte position 621 after offset 23.*--truncate-tail"):
        build_plan(PlanRequest(log_dirs=(str(broker),)))
    from migrate.model.plan_tree import ConvertOptions

    plan, _ = make_plan(tmp_path, broker, options=ConvertOptions(truncate_tail=True))
    drops = {p.name: s.tail_drop for p in plan.log_dirs[0].partitions for s in p.segments if s.tail_drop}
    assert drops["truncated-tail-0"].position == 621 and drops["truncated-tail-0"].bytes == 60
    assert drops["truncated-tail-0"].last_kept_offset == 23 and drops["truncated-tail-0"].claimed_offset == 24
    assert drops["truncated-tail-1"].bytes == 2163 and drops["truncated-tail-1"].last_kept_offset == 24
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok
    assert_scan_agrees(plan, report)
    for part in ("truncated-tail-0", "truncated-tail-1"):
        summary = oracle.summary(broker / part)[0]
        assert summary["valid"] and summary["sha256"] == SUMMARIES[part]["sha256"], part


def test_a_bad_size_field_in_the_middle_is_damage_never_a_tail_to_truncate(tmp_path):
    from migrate.model.plan_tree import ConvertOptions

    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-0"])
    last = broker / "plain-v0-0" / "00000000000000000080.log"
    data = bytearray(last.read_bytes())
    walk = walk_entries(bytes(data))
    middle = int(walk.positions[len(walk.positions) // 2])
    data[middle + 8 : middle + 12] = (len(data)).to_bytes(4, "big")  # runs past the end; valid entries follow
    st = last.stat()
    last.write_bytes(bytes(data))
    os.utime(last, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(PlanRefusedError) as info:
        build_plan(PlanRequest(log_dirs=(str(broker),), options=ConvertOptions(truncate_tail=True)))
    text = str(info.value)
    assert f"the entry at byte position {middle} runs past the end" in text
    assert "a valid entry follows at byte position" in text and "This is damage, not a torn tail" in text
    assert "Plan with --truncate-tail" not in text


def test_a_partial_entry_in_a_segment_that_is_not_the_last_is_damage(tmp_path):
    from migrate.model.plan_tree import ConvertOptions

    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    first = broker / "plain-v0-1" / "00000000000000000000.log"
    st = first.stat()
    with open(first, "r+b") as f:
        f.truncate(st.st_size - 9)
    with pytest.raises(PlanRefusedError, match="it is not the partition's last segment"):
        build_plan(PlanRequest(log_dirs=(str(broker),), options=ConvertOptions(truncate_tail=True)))


# --- plan reads everything it certifies ---------------------------------------------------------------------------


def test_plan_refuses_checksum_errors_and_check_refuses_what_only_a_deep_read_finds(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    plain = broker / "plain-v0-1" / "00000000000000000000.log"
    entry = damage(plain, 200)
    with pytest.raises(PlanRefusedError, match=rf"CRC-32 of the message does not match.*byte position {entry}"):
        build_plan(PlanRequest(log_dirs=(str(broker),)))
    damage(plain, 200)  # flipped back
    # offsets going backwards with valid checksums: an offset field is outside every CRC
    gzip = broker / "gzip-v0-0" / "00000000000000000092.log"
    data = bytearray(gzip.read_bytes())
    walk = walk_entries(bytes(data))
    second = int(walk.positions[1])
    data[second : second + 8] = (0).to_bytes(8, "big")
    st = gzip.stat()
    gzip.write_bytes(bytes(data))
    os.utime(gzip, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert build_plan(PlanRequest(log_dirs=(str(broker),))).estimates.segments == 4  # the shallow read sees nothing
    with pytest.raises(PlanRefusedError, match=rf"{gzip}.*byte position {second}"):
        build_plan(PlanRequest(log_dirs=(str(broker),), check=True))


def test_free_space_is_checked_on_the_filesystem_each_partition_lives_on(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-0", "plain-v0-1"])
    other = tmp_path / "other-disk"
    other.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)]).returncode == 0
    target = other if mounted else Path("/dev/shm") / f"klm-{os.getpid()}"
    target.mkdir(exist_ok=True)
    try:
        shutil.move(str(broker / "plain-v0-0"), str(target / "plain-v0-0"))
        (broker / "plain-v0-0").symlink_to(target / "plain-v0-0")
        if mounted:  # the partition fits, its staging does not; the log dir's own disk has plenty
            (other / "filler").write_bytes(b"\0" * (shutil.disk_usage(other).free - 2048))
        if mounted:
            with pytest.raises(PlanRefusedError, match=rf"{target}/plain-v0-0: the converted segments of 1 partitions"):
                build_plan(PlanRequest(log_dirs=(str(broker),)))
        else:
            plan = build_plan(PlanRequest(log_dirs=(str(broker),)))
            spaces = {fs.example_dir: fs.partitions for fs in plan.log_dirs[0].filesystems}
            assert spaces[str(target / "plain-v0-0")] == 1 and len(spaces) == 2
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(other)], check=True)
        else:
            shutil.rmtree(target)


# --- scan certifies only what it read -----------------------------------------------------------------------------


def test_scan_never_certifies_what_it_could_not_read(broker, tmp_path, capsys):
    v2only = make_broker_logdir(tmp_path / "v2", partitions=["already-v2-0"])
    assert main(["scan", "--log-dirs", str(v2only)]) == 0
    assert main(["scan", "--log-dirs", str(tmp_path / "no-such-dir")]) == 1
    assert main(["scan", "--log-dirs", f"{v2only},{tmp_path / 'typo'}"]) == 1
    assert main(["scan", "--log-dirs", f"{v2only},"]) == 2
    assert run_cli(capsys, "scan", "--log-dirs", "").code == 2
    assert main(["scan", "--log-dirs", str(broker / "plain-v0-0")]) == 1
    assert f"is a partition directory (plain-v0-0), not a log dir. Give its log dir instead: --log-dirs {broker}" in (
        capsys.readouterr().out
    )
    assert main(["scan", "--log-dirs", str(tmp_path)]) == 1  # a directory holding log dirs is not one


def test_a_topic_named_like_a_deleted_dir_is_scanned_and_migrated(tmp_path):
    broker = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    (broker / "plain-v0-1").rename(broker / "events.deleted-0")
    plan, _ = make_plan(tmp_path, broker)
    assert [p.name for p in plan.log_dirs[0].partitions] == ["events.deleted-0"]
    report = pipeline.execute(plan, SerialEngine())
    assert report.ok
    assert_scan_agrees(plan, report)


# --- plans --------------------------------------------------------------------------------------------------------


def test_a_hand_edited_plan_is_refused(broker, tmp_path, capsys):
    _, plan_path = make_plan(tmp_path, broker)
    plan_path.write_text(plan_path.read_text().replace('"leader_epoch": 0', '"leader_epoch": 5', 1))
    before = snapshot(broker)
    ran = run_cli(capsys, "execute", "--plan", str(plan_path), "--engine", "serial")
    assert ran.code == 1
    assert "was edited after it was made" in ran.err
    assert snapshot(broker) == before


def test_an_entry_above_max_message_bytes_is_a_plan_warning_not_a_refusal(tmp_path):
    from migrate.model.plan_tree import ConvertOptions

    broker = make_broker_logdir(tmp_path, partitions=["gzip-v0-0"])
    sizes = walk_entries((broker / "gzip-v0-0" / "00000000000000000000.log").read_bytes()).sizes
    limit = int(sizes.max()) - 1
    plan, _ = make_plan(tmp_path, broker, options=ConvertOptions(max_message_bytes=limit))
    warning = next(w for w in plan.warnings if "larger than --max-message-bytes" in w and "00000000000000000000" in w)
    assert f"an entry of {int(sizes.max())} bytes" in warning and "the topic's max.message.bytes is at least" in warning
    report = pipeline.execute(plan, SerialEngine())  # the converted batches did not grow: nothing refused
    assert report.ok, report
    assert_scan_agrees(plan, report)
