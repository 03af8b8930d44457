"""The last lines an operator reads are true on every path a test can provoke: a run that failed or was cut short,
a first run and a resumed one, a disk never touched, a damaged file after the swap, a reader of stdout gone, a
usage error, a truncated plan, a log dir without meta.properties."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO
from kafka_layout import make_broker_logdir
from runs import make_plan

from migrate.cli import main
from migrate.run.faults import FAIL_ENV

PARTITIONS = ["plain-v0-1", "gzip-v0-0", "lz4-v1-1"]


def test_a_full_disk_ends_with_what_was_converted_and_no_rollback_for_an_untouched_disk(tmp_path, capsys, monkeypatch):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    _plan, path = make_plan(tmp_path, log_dir)
    monkeypatch.setenv(FAIL_ENV, "before:convert:3=ENOSPC")
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 1
    monkeypatch.delenv(FAIL_ENV)
    captured = capsys.readouterr()
    last = [line for line in captured.err.splitlines() if line.startswith(("finished:", "ended:"))]
    assert len(last) == 1 and last[0].startswith("ended: ") and " converted by this run (" in last[0], captured.err
    assert "2 of 6 segments" in last[0] and last[0].endswith(", 1 failed, 3 skipped"), last[0]
    assert "(100%)" not in last[0]
    head = captured.out.splitlines()[0]
    assert "2 segments converted and verified" in head and "already done" not in head, head
    assert "done by an earlier run" not in head and "not attempted (their partition failed or the run stopped)" in head
    advice = captured.out.splitlines()[-1]
    assert advice.startswith("Not migrated: ") and "rollback" not in advice.replace("nothing to roll back", "")
    assert "no partition was swapped" in advice, advice
    # the next run finishes what remains, and says what an earlier run did
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 0
    again = capsys.readouterr()
    assert "2 done by an earlier run" in again.out.splitlines()[0] and "not attempted" not in again.out, again.out
    assert next(x for x in again.err.splitlines() if x.startswith("finished: ")).count("(100%)") == 1


def test_verify_after_damage_to_a_converted_file_advises_rollback_not_a_replica(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    _plan, path = make_plan(tmp_path, log_dir)
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 0
    victim = log_dir / "gzip-v0-0" / "00000000000000000000.log"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x7F
    victim.write_bytes(bytes(data))  # same size; mtime put back, as damage under the file system would leave it
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    capsys.readouterr()
    assert main(["verify", "--plan", str(path)]) == 3
    out = capsys.readouterr().out
    assert "DIFFERENCES" in out and "replica" not in out, out
    assert f"`kafka-log-migrate rollback --plan {path}` puts every original back" in out
    assert "(migrated)" not in out and "migrated, its originals kept until finalize" in out
    assert main(["rollback", "--plan", str(path)]) == 0  # as advised: the originals are back


def test_scan_json_into_head_exits_with_scans_own_code(tmp_path):
    """The reader goes away before scan writes: scan's verdict (4, legacy data left) is still its exit code."""
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    run = subprocess.Popen(
        [sys.executable, "-m", "migrate.cli", "scan", "--log-dirs", str(log_dir), "--json"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert run.stdout is not None and run.stderr is not None
    run.stdout.close()  # as `| head` does once it has its lines; here before the first
    err = run.stderr.read().decode()
    assert run.wait(timeout=60) == 4, err
    assert "Traceback" not in err and "Broken pipe" not in err, err


def test_a_log_dir_without_meta_properties_is_not_said_to_be_broker_none(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    (log_dir / "meta.properties").unlink()
    main(["scan", "--log-dirs", str(log_dir)])
    out = capsys.readouterr().out
    assert "None" not in out and out.splitlines()[0] == f"log dir {log_dir}", out


def test_a_truncated_plan_is_named_once(tmp_path, capsys):
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    _, path = make_plan(tmp_path, log_dir)
    path.write_bytes(path.read_bytes()[:300])
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 1
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert error.count(str(path)) == 1 and "not JSON" in error and "kafka-log-migrate plan" in error, error


def test_a_missing_option_is_one_line_naming_it_and_where_the_options_are(tmp_path, capsys):
    assert main(["plan", "--log-dirs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "kafka-log-migrate plan: error: the following arguments are required: -o/--output "
        "(`kafka-log-migrate plan --help` lists every option)"
    ], err


def test_a_refusal_names_its_log_dir_once(tmp_path, capsys):
    """finalize refused after a verify found a difference: the log dir was named twice ("error: D: D: ...")."""
    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    _, path = make_plan(tmp_path, log_dir)
    assert main(["execute", "--plan", str(path), "--engine", "serial"]) == 0
    victim = log_dir / "gzip-v0-0" / "00000000000000000000.log"
    st = victim.stat()
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x7F
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert main(["verify", "--plan", str(path)]) == 3
    capsys.readouterr()
    assert main(["finalize", "--plan", str(path)]) == 1
    (error,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("error: ")]
    assert error.startswith(f"error: {log_dir}: refusing to finalize") and error.count(str(log_dir)) == 2, error


def test_scan_sizes_are_human_and_its_columns_fit_a_long_topic_name(tmp_path, capsys):
    """Sizes as every verb prints them (not v0:61200000B beside 378.0 MB), in columns as wide as their content."""
    log_dir = make_broker_logdir(tmp_path, partitions=PARTITIONS)
    long_name = "orders.eu-west-1.payments.settlement.v2.dead-letter-queue.retry-7-0"
    (log_dir / "gzip-v0-0").rename(log_dir / long_name)
    assert main(["scan", "--log-dirs", str(log_dir)]) == 4
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("  ") and ("LEGACY" in line or "v2-only" in line)]
    assert len(rows) == len(PARTITIONS), out
    state_column = {line.index("LEGACY") if "LEGACY" in line else line.index("v2-only") for line in rows}
    assert len(state_column) == 1 and state_column.pop() > len(long_name), out  # one column, after the long name
    assert not re.search(r"v\d:\d+B", out) and re.search(r"LEGACY +v0 \d+\.\d KB", out), out
    assert re.search(r"with legacy data \(\d+\.\d KB\)$", out.splitlines()[-1]), out


def test_a_run_refused_by_one_still_starting_names_it_once(tmp_path):
    """The other run holds the run lock but has not written who it is yet: "another kafka-log-migrate run (...)",
    not "another kafka-log-migrate another process"."""
    from migrate.errors import RunLockedError
    from migrate.run.run_lock import RunLock
    from migrate.run.workspace import run_lock_path

    log_dir = make_broker_logdir(tmp_path, partitions=["plain-v0-1"])
    path = run_lock_path(str(log_dir), "0123456789abcdef")
    path.touch()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import fcntl, sys, time\nf = open({str(path)!r}, 'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\ntime.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        try:
            with RunLock([str(log_dir)], "0123456789abcdef", "execute"):
                raise AssertionError("the lock was taken while another process held it")
        except RunLockedError as exc:
            message = str(exc)
    finally:
        holder.kill()
        holder.wait()
    assert message.startswith("another kafka-log-migrate run (it has not written who it is yet"), message
    assert message.count("another") == 1, message
