"""Ctrl-C as a terminal sends it: SIGINT to the whole foreground process group (the driver and every LocalCluster
worker). The run stops with one line and exit 130, no worker prints a traceback, and the same command resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from migrate.run.faults import TRACE_ENV

pytestmark = pytest.mark.slow


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    log_dir = tmp_path / "kafka-logs"
    subprocess.run(
        [sys.executable, "benchmarks/gen_legacy.py", str(log_dir), "--records", "600000", "--partitions", "4"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return log_dir


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "migrate.cli", *args]


def test_ctrl_c_during_execute_prints_one_line_exits_130_and_the_run_resumes(generated, tmp_path):
    plan = tmp_path / "plan.json"
    subprocess.run(_cli("plan", "--log-dirs", str(generated), "-o", str(plan)), cwd=REPO, check=True)
    trace = tmp_path / "points.txt"  # every fault point passed, by the driver and its workers
    run = subprocess.Popen(
        _cli("execute", "--plan", str(plan), "--workers", "2", "--dashboard-address", "127.0.0.1:0"),
        cwd=REPO,
        env={**os.environ, TRACE_ENV: str(trace)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, which Ctrl-C reaches whole
    )
    try:
        # a fixed sleep raced the run: on an idle machine it finished first (exit 0), on a loaded one its workers
        # were not up yet; a worker starting its first conversion is the moment, about 2 s of work before the end
        deadline = time.monotonic() + 120
        while run.poll() is None and time.monotonic() < deadline:
            if trace.exists() and "before:convert" in trace.read_text():  # a whole segment or a range
                break
            time.sleep(0.02)
        time.sleep(0.3)  # mid-conversion
        os.killpg(run.pid, signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 130, err
    assert "Traceback" not in err and "kafka-log-migrate: interrupted; run the same command again to resume" in err
    again = subprocess.run(_cli("execute", "--plan", str(plan)), cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    scan = subprocess.run(_cli("scan", "--log-dirs", str(generated)), cwd=REPO, capture_output=True, text=True)
    assert scan.returncode == 0, scan.stdout  # 4 while any legacy data is left


HOLDUP_PRELOAD = '''"""A scheduler whose close is held up, as a dashboard page polling its loop held one for minutes."""
import time


def dask_teardown(scheduler):
    time.sleep(60)
'''


def test_ctrl_c_while_the_cluster_closes_after_the_swap_keeps_the_true_summary(tmp_path):
    """Every partition is migrated and the summary is on the terminal before the engine closes; a Ctrl-C while a
    held-up scheduler keeps close waiting says so and exits 0, not "interrupted; run the same command again"."""
    from kafka_layout import make_broker_logdir

    logdir = make_broker_logdir(tmp_path, partitions=["plain-v0-1", "gzip-v0-0"])
    plan = tmp_path / "plan.json"
    subprocess.run(_cli("plan", "--log-dirs", str(logdir), "-o", str(plan)), cwd=REPO, check=True, capture_output=True)
    preload = tmp_path / "holdup_preload.py"
    preload.write_text(HOLDUP_PRELOAD)
    run = subprocess.Popen(
        _cli("execute", "--plan", str(plan), "--dashboard", "--dashboard-address", "127.0.0.1:0"),
        cwd=REPO,
        env={**os.environ, "DASK_DISTRIBUTED__SCHEDULER__PRELOAD": f'["{preload}"]'},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    out: list[str] = []
    try:
        assert run.stdout is not None
        for line in run.stdout:  # the summary, printed before the close that the preload holds up for 60 s
            out.append(line)
            if line.startswith("Every planned partition is migrated"):
                break
        time.sleep(0.5)
        os.killpg(run.pid, signal.SIGINT)
        rest, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    text = "".join(out) + rest
    assert "Every planned partition is migrated" in text and "2 of 2 partitions migrated" in text, text
    assert run.returncode == 0, err
    assert "run the same command again" not in err and "Traceback" not in err, err
    assert "interrupted while closing the Dask cluster; the run above is complete, nothing to resume" in err, err
