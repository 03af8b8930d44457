"""Pre-staging is gentle on a live broker: the throttle holds read + write bytes to the rate over every window, the
pause file stops all I/O within a second, the abort file leaves no partial staged file, the page cache is left as
found, and a full disk leaves the log dir untouched with a message that says what to free."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, needs_root_power
from prestage_layout import broker_log_dir, snapshot

from migrate.cli import main
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.prestage import pagecache
from migrate.prestage.controls import Controls
from migrate.prestage.location import StagingPlaceError, default_staging_root, staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage
from migrate.prestage.record import RECORD_RE, judge_staged, staged_segments

RATE = 2_000_000


def _assert_whole(log_dir: Path) -> None:
    """Every staged file has its record beside it, and every record's files are as recorded."""
    root = default_staging_root(log_dir)
    for part in root.iterdir():
        names = os.listdir(part)
        bases = {int(RECORD_RE.match(n).group(1)) for n in names if RECORD_RE.match(n)}
        assert all(n.endswith(".prestaged.json") or int(n[:20]) in bases for n in names), names
    for staged in staged_segments(log_dir):
        source = log_dir / staged.record.partition / segment_name(staged.record.base_offset, ".log")
        assert judge_staged(staged, source, ConvertOptions().for_partition(3), deep=True).usable


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
        time.sleep(1.0)
        paused_at = _io(proc.pid)
        staged_sizes = sorted((p.name, p.stat().st_size) for p in staging.glob("*/*"))
        time.sleep(1.5)
        assert _io(proc.pid) == paused_at, "I/O went on more than a second after the pause file appeared"
        assert sorted((p.name, p.stat().st_size) for p in staging.glob("*/*")) == staged_sizes
        pause.unlink()
        time.sleep(0.7)
        abort.touch()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
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


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode != 0:
        needs_root_power("mounting a tmpfs needs CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_disk_removes_partial_outputs_and_leaves_the_log_dir_alone(small_disk, capsys):
    log_dir = broker_log_dir(small_disk / "data", partitions=2, segments=3, records=800)
    before = snapshot(log_dir)
    with open(small_disk / "filler", "wb") as f:  # room for about one staged segment of the four
        f.write(b"\0" * max(shutil.disk_usage(small_disk).free - 150_000, 0))

    assert main(["prestage", "--log-dirs", str(log_dir), "--rate", "0"]) == 1
    out = capsys.readouterr().out
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
