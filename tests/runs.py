"""Helpers for tests that run the migration: plans on disk, fingerprints of a tree, and the independent ``scan`` that
must agree with what every execute and rollback reported."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

from migrate.model.plan_tree import Plan
from migrate.model.run_state import PartitionState
from migrate.model.scan_report import PartitionScan
from migrate.model.stage_reports import ExecuteReport
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
from migrate.reports.scan import scan_log_dirs
from migrate.run.faults import CRASH_EXIT
from migrate.run.workspace import FENCE_NAME


def make_plan(tmp_path: Path, *log_dirs: Path, name: str = "plan.json", **request) -> tuple[Plan, Path]:
    plan = build_plan(PlanRequest(log_dirs=tuple(str(d) for d in log_dirs), **request))
    path = tmp_path / name
    write_plan(plan, path)
    return plan, path


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root and root itself: files by content hash and mtime, directories by mtime."""
    out: dict[str, tuple] = {".": ("dir", root.stat().st_mtime_ns)}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        st = p.stat()
        out[rel] = (
            ("dir", st.st_mtime_ns) if p.is_dir() else (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mtime_ns)
        )
    return out


def scan_partitions(plan: Plan) -> dict[tuple[str, str], PartitionScan]:
    """(log dir, partition dir name) -> the scan's entry for it, from an independent read-only scan."""
    report = scan_log_dirs([d.log_dir for d in plan.log_dirs])
    out = {}
    for d, p in report.partitions():
        assert d.error is None, d.error
        out[(d.log_dir, p.dir)] = p
    return out


def below_target(entry: PartitionScan, target_magic: int) -> bool:
    return any(m < target_magic for m in entry.batches_by_magic)


def assert_scan_agrees(plan: Plan, report: ExecuteReport) -> None:
    """An independent scan sees the target format in exactly the partitions the execute report calls migrated, and
    legacy data in every other planned partition; ``report.ok`` only if it sees no legacy data in any of them."""
    seen = scan_partitions(plan)
    states = {(d.log_dir, p.partition): p.state for d in report.log_dirs for p in d.partitions}
    for d in plan.log_dirs:
        for p in d.partitions:
            entry = seen[(d.log_dir, p.name)]
            state = states.get((d.log_dir, p.name))
            if state is not None and state.mixed:
                # the report claims nothing about a partition mid-swap but that the fence keeps brokers out
                assert (Path(d.log_dir) / FENCE_NAME).is_dir(), (p.name, state)
                continue
            migrated = state == PartitionState.MIGRATED
            assert below_target(entry, plan.options.target_magic) != migrated, (p.name, states.get((d.log_dir, p.name)))
    if report.ok:
        assert all(
            states.get((d.log_dir, p.name)) == PartitionState.MIGRATED for d in plan.log_dirs for p in d.partitions
        )


_VERB = """
import sys
from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.planning.plan import load_plan
plan = load_plan(sys.argv[2])
if sys.argv[1] == "execute":
    pipeline.execute(plan, SerialEngine())
else:
    pipeline.rollback(plan, SerialEngine(), sys.argv[2])
"""


def run_verb(verb: str, plan_path: Path, env: dict[str, str]) -> int:
    """``execute`` or ``rollback`` in a process of its own, so that a crash point's os._exit is a real crash: its
    exit code, 0 or CRASH_EXIT (anything else fails the test with the command's stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", _VERB, verb, str(plan_path)], env={**os.environ, **env}, cwd=REPO, capture_output=True
    )
    assert proc.returncode in (0, CRASH_EXIT), proc.stderr.decode()[-3000:]
    return proc.returncode
