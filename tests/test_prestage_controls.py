"""Pre-staging is gentle on a live broker: the throttle holds read + write bytes to the rate over every window, the
pause file stops all I/O within a second, the abort file leaves no partial staged file, the page cache is left as
found, and a full disk leaves the log dir untouched with a message that says what to free."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_root_power, run_cli
from prestage_layout import broker_log_dir, judge, snapshot, staging_root

from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.prestage import pagecache
from migrate.prestage.controls import MAX_PIECE, Controls, SpaceFloor
from migrate.prestage.location import StagingPlaceError, default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.record import RECORD_RE, staged_segments
from migrate.prestage.staged_index import INDEX_NAME

RATE = 2_000_000


def _assert_whole(log_dir: Path) -> None:
    """Every staged file has its record beside it, and every record's files are as recorded."""
    root = default_staging_root(log_dir)
    for part in (p for p in root.iterdir() if p.is_dir()):  # the partitions' staging dirs, not the lock file
        names = os.listdir(part)
        bases = {int(RECORD_RE.match(n).group(1)) for n in names if RECORD_RE.match(n)}
        assert all(n.endswith(".prestaged.json") or n == INDEX_NAME or int(n[:20]) in bases for n in names), names
    for staged in staged_segments(log_dir):
        source = log_dir / staged.record.partition / segment_name(staged.record.base_offset, ".log")
        assert judge(staged, source, ConvertOptions().for_partition(3), deep=True).usable


def test_the_throttle_holds_reads_and_writes_to_the_rate_over_every_window(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=3, segments=3, records=3700)  # 6 closed segments of 0.5 MB
    controls = Controls(rate=RATE, window_seconds=1.0)
    started = time.monotonic()
    report = run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), controls)
    elapsed = time.monotonic() - started
    (done,) = report.passes[0].log_dirs
    assert done.staged == 6
    assert controls.total >= done.staged_source_bytes + done.staged_bytes  # every byte read and written is counted
    assert controls.total >= 3 * RATE  # long enough to hold the rate over several windows
    assert controls.max_window_bytes(1.0) <= 1.1 * RATE
    assert max(controls.window_totals()) <= 1.1 * RATE
    assert elapsed >= (controls.total - 0.04 * RATE) / RATE


def _io(pid: int) -> int:
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["rchar"]) + int(fields["wchar"])


def test_the_pause_file_stops_io_within_a_second_and_the_abort_file_leaves_nothing_partial(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=2, segments=3, records=7400)  # 4 closed segments of 1 MB
    pause, abort = tmp_path / "pause", tmp_path / "abort"
    cmd = [sys.executable, "-m", "migrate.cli", "prestage", "--log-dirs", str(log_dir), "--rate", "2MB"]
    cmd += ["--throttle-window", "1", "--pause-file", str(pause), "--abort-file", str(abort)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        staging = default_staging_root(log_dir)
        deadline = time.monotonic() + 30
        while not any(staging.glob("*/*.log")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # mid-segment
        pause.touch()
        # it checks the pause file at least once a second; a loaded machine may run it later than that, so wait
        # (bounded) for its I/O counters to stand still for a second rather than race a fixed sleep
        deadline, paused_at = time.monotonic() + 60, _io(proc.pid)
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = _io(proc.pid)
            if now == paused_at:
                break
            paused_at = now
        staged_sizes = sorted((p.name, p.stat().st_size) for p in staging.glob("*/*"))
        time.sleep(1.5)
        assert _io(proc.pid) == paused_at, "I/O went on more than a second after the pause file appeared"
        assert sorted((p.name, p.stat().st_size) for p in staging.glob("*/*")) == staged_sizes
        pause.unlink()
        time.sleep(0.7)
        abort.touch()
        out, err = proc.communicate(timeout=120)  # a loaded machine starts and ends a process slowly
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 6, err  # the operator's stop: its own exit code, not a failure's 1
    assert "paused:" in err and "resumed:" in err and f"abort file {abort} found" in out
    _assert_whole(log_dir)
    assert len(list(staged_segments(log_dir))) < 4  # it did stop early


def test_the_page_cache_is_left_as_found(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=3, records=3700)
    hot, cold = (log_dir / "t-0" / segment_name(b, ".log") for b in (0, 3700))
    for path in (hot, cold):
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    hot.read_bytes()  # what a consumer keeps in the cache

    def resident(path: Path):
        fd = os.open(path, os.O_RDONLY)
        try:
            return pagecache.resident_pages(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    if resident(hot) is None or resident(cold).any() or not resident(hot).all():
        # checked, not skipped: on a filesystem that keeps every page (tmpfs) this test could prove nothing
        pytest.fail(
            f"{tmp_path} does not show page-cache residency to mincore (tmpfs keeps every page): run the tests with "
            "--basetemp on a disk-backed filesystem"
        )
    run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())
    assert resident(hot).all(), "pages resident before the pre-stage were evicted"
    assert not resident(cold).any(), "pages the pre-stage brought in were left in the cache"
    staged = list(staged_segments(log_dir))
    assert len(staged) == 2
    for s in staged:
        for path in s.files.values():
            assert not resident(path).any(), f"{path}: staged output left in the page cache"


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str):
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)]).returncode != 0:
        needs_root_power("mounting a tmpfs needs CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    with _tmpfs(tmp_path / "small-disk", "1m") as mount:
        yield mount


@pytest.fixture
def sixteen_mb_disk(tmp_path):
    with _tmpfs(tmp_path / "disk", "16m") as mount:
        yield mount


def test_a_full_disk_removes_partial_outputs_and_leaves_the_log_dir_alone(small_disk, capsys):
    log_dir = broker_log_dir(small_disk / "data", partitions=2, segments=3, records=800)
    before = snapshot(log_dir)
    with open(small_disk / "filler", "wb") as f:  # room for about one staged segment of the four
        f.write(b"\0" * max(shutil.disk_usage(small_disk).free - 150_000, 0))

    ran = run_cli(capsys, "prestage", "--log-dirs", str(log_dir), "--rate", "0", "--min-free", "0")
    assert ran.code == 1
    out = ran.out
    assert "No space left on device" in out and "the log dirs were not touched" in out
    assert "bytes free of" in out and "run prestage again" in out and "stopped early" in out
    assert snapshot(log_dir) == before
    _assert_whole(log_dir)
    staged = len(list(staged_segments(log_dir)))
    assert staged < 4


def test_a_log_dir_that_is_a_mount_root_is_refused(small_disk, tmp_path):
    (small_disk / "meta.properties").write_text("version=0\nbroker.id=1\n")
    with pytest.raises(StagingPlaceError, match="root of its own filesystem"):
        staging_root(small_disk)
    with pytest.raises(StagingPlaceError, match="another filesystem"):
        staging_root(small_disk, tmp_path / "elsewhere")


def test_the_free_space_floor_stops_a_pass_before_the_broker_runs_short(small_disk, capsys):
    log_dir = broker_log_dir(small_disk / "data", partitions=1, segments=3, records=800)
    before = snapshot(log_dir)
    with open(small_disk / "filler", "wb") as f:  # room above a 10% floor for one staged segment, not two
        f.write(b"\0" * max(shutil.disk_usage(small_disk).free - 550_000, 0))
    ran = run_cli(capsys, "prestage", "--log-dirs", str(log_dir), "--rate", "0")
    assert ran.code == 1  # --min-free 10% by default
    out = ran.out
    assert "the floor is 104.9 KB (--min-free)" in out and "the next segment may need" in out, out
    assert snapshot(log_dir) == before
    _assert_whole(log_dir)
    assert len(list(staged_segments(log_dir))) == 1  # the first fitted; the second would have passed the floor


class _BrokerWrites(Controls):
    """The broker's own appends fill the filesystem while a segment is staged (at the ``after``-th piece of I/O)."""

    def __init__(self, filler: Path, size: int, after: int, **kw) -> None:
        super().__init__(**kw)
        self.piece = 4096
        self.filler, self.size, self.after, self.calls = filler, size, after, 0

    def gate(self, size: int) -> None:
        self.calls += 1
        if self.calls == self.after:
            self.filler.write_bytes(b"\0" * self.size)
        super().gate(size)


def test_the_floor_is_watched_while_a_segment_is_written(sixteen_mb_disk, monkeypatch):
    from migrate.prestage import controls as controls_module

    monkeypatch.setattr(controls_module, "_SPACE_CHECK_BYTES", 256 << 10)  # a small segment: look every 256 KiB
    log_dir = broker_log_dir(sixteen_mb_disk / "data", partitions=1, segments=2, records=30_000)
    before = snapshot(log_dir)
    free = shutil.disk_usage(sixteen_mb_disk).free
    # once the read is under way the broker's appends leave 3 MB: the floor (1.6 MB) is passed half-way through
    # the 5 MB output, long before the disk is full
    writes = _BrokerWrites(sixteen_mb_disk / "broker-writes", free - (3 << 20), after=2, space_floor=SpaceFloor(0.10))
    controls = writes
    report = run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), controls)
    assert "floor" in report.stopped and "the segment in progress was discarded" in report.stopped
    assert snapshot(log_dir) == before
    assert list(staged_segments(log_dir)) == []
    root = default_staging_root(log_dir)
    assert not root.exists() or all(not os.listdir(p) for p in root.iterdir() if p.is_dir())  # no partial output


def test_the_rate_file_changes_the_rate_while_running(tmp_path):
    rate_file = tmp_path / "rate"
    notes: list[str] = []
    controls = Controls(1_000_000, rate_file=rate_file, on_pause=notes.append, rate_file_poll_seconds=0)
    controls.check()
    assert controls.rate == 1_000_000  # no file yet: --rate holds
    rate_file.write_text("20MB\n")
    controls.check()
    assert controls.rate == 20_000_000 and controls.piece == MAX_PIECE
    assert notes[-1].endswith("the rate is now 20.0 MB/s")
    rate_file.write_text("fast please")
    os.utime(rate_file, ns=(1, 1))
    controls.check()
    assert controls.rate == 20_000_000 and "the rate stays 20.0 MB/s" in notes[-1]
    rate_file.write_text("0")
    os.utime(rate_file, ns=(2, 2))
    controls.check()
    assert controls.rate is None and notes[-1].endswith("the rate is now unlimited")


def test_a_pass_runs_at_the_lowest_cpu_and_a_low_io_priority(tmp_path):
    log_dir = broker_log_dir(tmp_path, partitions=1, segments=2)
    probe = (
        f"import os, sys; sys.path.insert(0, {str(REPO / 'tests')!r}); from migrate.cli import main; "
        "from prestage_layout import io_priority; "
        "code = main(['prestage', '--log-dirs', sys.argv[1], '--rate', '0'] + sys.argv[2:]); "
        "print(os.getpriority(os.PRIO_PROCESS, 0), *io_priority()); sys.exit(code)"
    )
    seen = {}
    for extra in ([], ["--priority", "idle"], ["--priority", "normal"]):
        proc = subprocess.run([sys.executable, "-c", probe, str(log_dir), *extra], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        seen[" ".join(extra) or "default"] = proc.stdout.split()[-3:]
    assert seen["default"] == ["19", "2", "7"]  # nice 19, best effort at its lowest level
    assert seen["--priority idle"] == ["19", "3", "0"]
    assert seen["--priority normal"][0] == str(os.getpriority(os.PRIO_PROCESS, 0))
