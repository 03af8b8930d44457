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
