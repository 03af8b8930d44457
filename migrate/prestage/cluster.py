"""Pre-staging every broker of a cluster while it serves, from one command: on each broker's Dask worker (one per
broker host, as for a cluster plan) a pass over that broker's log dirs runs in a process of its own, so that its low
CPU and I/O priority are its own and not the worker's, which converts at full speed during the cut-over. Each broker
returns a small summary and the digests its staging records; the client compares the replicas on them
(``migrate.prestage.replicas``) before any broker is cut over.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass, replace

from migrate.codec import from_json, to_json
from migrate.errors import MigrateError
from migrate.kafka.properties import log_dirs_of, read_meta_properties
from migrate.prestage.controls import ControlSettings
from migrate.prestage.passes import PrestageReport, PrestageRequest, run_prestage
from migrate.prestage.priority import Priority, take_priority
from migrate.prestage.replicas import StagedDigest, staged_digests


@dataclass(frozen=True)
class PrestageJob:
    """What a broker's worker is asked: the request (its log dirs filled in on the broker), the controls, the
    priority, and the broker's server.properties when the log dirs come from it."""

    request: PrestageRequest
    settings: ControlSettings
    priority: Priority = Priority.LOW
    broker_config: str | None = None


@dataclass(frozen=True)
class BrokerPrestage:
    """What one broker's passes did, and the digests of everything staged there."""

    host: str
    broker_id: int | None
    log_dirs: tuple[str, ...]
    ok: bool
    ready: bool
    passes: int
    staged: int  # segments staged by this run
    staged_bytes: int  # their source bytes
    kept: int  # staged earlier and still usable
    left_bytes: int  # closed segments without usable staging after the last pass
    active_bytes: int  # the partitions' highest segments: converted at the cut-over
    problems: tuple[str, ...] = ()  # why the run stopped, refused and rejected segments
    notes: tuple[str, ...] = ()  # what the run said on the way (priority, pause, rate file)
    digests: tuple[StagedDigest, ...] = ()
    worker: str = ""
    refusal: str | None = None  # the broker could not pre-stage at all: why
    aborted: bool = False  # stopped by the operator's abort file (its own exit code, not a failure's)


def summarize(host: str, broker_id: int | None, log_dirs: tuple[str, ...], report: PrestageReport) -> BrokerPrestage:
    last = report.passes[-1].log_dirs if report.passes else []
    every = [d for p in report.passes for d in p.log_dirs]
    problems = [report.stopped] if report.stopped else []
    problems += [f"REFUSED: {why}" for d in every for why in d.refused]
    problems += [f"rejected: {why}" for d in every for why in d.rejected]
    return BrokerPrestage(
        host=host,
        broker_id=broker_id,
        log_dirs=log_dirs,
        ok=report.ok,
        ready=report.ready,
        passes=len(report.passes),
        staged=sum(d.staged for d in every),
        staged_bytes=sum(d.staged_source_bytes for d in every),
        kept=sum(d.kept for d in last),
        left_bytes=sum(d.left_bytes for d in last),
        active_bytes=sum(d.active_bytes for d in last),
        problems=tuple(problems[:50]),
        aborted=report.aborted,
    )


def run_job(job: PrestageJob) -> BrokerPrestage:
    """The passes of one broker, in this process: what ``python -m migrate.prestage`` runs on a broker's host."""
    host = socket.gethostname()
    try:
        log_dirs = log_dirs_of(job.broker_config) if job.broker_config else job.request.log_dirs
        metas = [read_meta_properties(d) for d in log_dirs]
    except (MigrateError, OSError) as exc:
        return _refused(host, job.request.log_dirs, str(exc))
    ids = {m.broker_id for m in metas if m is not None}
    broker_id = ids.pop() if len(ids) == 1 else None
    notes = [f"could not lower the {p}; the throttle still holds" for p in take_priority(job.priority)]
    controls = job.settings.build(on_pause=notes.append)
    request = replace(job.request, log_dirs=log_dirs)
    try:
        report = run_prestage(request, controls)
    except MigrateError as exc:
        return _refused(host, log_dirs, str(exc))
    staging = request.staging_dirs or (None,) * len(log_dirs)
    digests = tuple(d for log_dir, s in zip(log_dirs, staging) for d in staged_digests(log_dir, s))
    return replace(summarize(host, broker_id, log_dirs, report), notes=tuple(notes[:50]), digests=digests)


def _refused(host: str, log_dirs: tuple[str, ...], why: str) -> BrokerPrestage:
    return BrokerPrestage(host, None, log_dirs, False, False, 0, 0, 0, 0, 0, 0, refusal=why)


def prestage_broker(job: PrestageJob, worker: str) -> BrokerPrestage:
    """Run on a broker's worker: the broker's passes in a child process (its own priority), their summary back."""
    proc = subprocess.run(
        [sys.executable, "-m", "migrate.prestage", json.dumps(to_json(job))],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return replace(_refused(socket.gethostname(), job.request.log_dirs, f"pre-stage failed: {why}"), worker=worker)
    done = from_json(BrokerPrestage, json.loads(proc.stdout), "the broker's pre-stage summary")
    return replace(done, worker=worker)
