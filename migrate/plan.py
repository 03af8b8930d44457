"""Plan a migration: look at the log dirs, refuse what is unsafe, and write a reviewable plan. Changes nothing.

The plan is JSON (``"version": 1``, schema in ``plans/plan.schema.json``): the options, per log dir its host and
partitions, per partition the segments that still hold legacy data (size, mtime and formats, so ``execute`` can
refuse inputs that changed since), estimates, and the tasks the engines will run. ``plan_id`` hashes all of it, so
two plans of the same inputs and options have the same id.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate import __version__
from migrate.errors import MigrateError
from migrate.logdir import (
    LogDirLockedError,
    free_bytes,
    has_clean_shutdown,
    is_locked,
    leader_epoch_entries,
    list_partitions,
)
from migrate.segment.profile import SegmentProfile, profile_segment
from migrate.segment.task import ConvertOptions
from migrate.workspace import fence_path, foreign_journals

PLAN_VERSION = 1
DEFAULT_TASK_BYTES = 128 << 20
# Growth of one uncompressed legacy message rewritten as a single-record v2 batch: 61 bytes of batch header and
# about 7 of record framing replace 26 (v0) or 34 (v1) bytes of message overhead.
V2_GROWTH_PER_MESSAGE = {0: 42, 1: 34}
V2_GROWTH_PER_WRAPPER = 64
SPACE_MARGIN = 1.05


class PlanRefusedError(MigrateError):
    """The log dirs are not in a state that can be migrated safely; the message says what to do."""


@dataclass
class PlanRequest:
    log_dirs: list[str]
    options: ConvertOptions = field(default_factory=ConvertOptions)
    topics: str | None = None  # regex over topic names
    leader_epoch: int | None = None  # None: per partition, from its leader-epoch-checkpoint
    host_map: dict[str, str] = field(default_factory=dict)  # log dir -> host (worker address or name)
    allow_unclean: bool = False
    task_bytes: int = DEFAULT_TASK_BYTES
    free_bytes_cap: int | None = None  # tests: pretend the disk has at most this much free space


def estimated_output_bytes(profile: SegmentProfile) -> int:
    growth = V2_GROWTH_PER_WRAPPER * profile.wrappers
    growth += sum(V2_GROWTH_PER_MESSAGE[int(m)] * n for m, n in profile.plain_legacy_by_magic.items())
    return profile.valid_bytes + growth


def build_plan(request: PlanRequest) -> dict[str, Any]:
    opts = request.options
    topic_re = re.compile(request.topics) if request.topics else None
    refusals: list[str] = []
    warnings: list[str] = []
    log_dir_entries = []
    for raw in request.log_dirs:
        log_dir = Path(raw).resolve()
        if not log_dir.is_dir():
            refusals.append(f"{log_dir}: not a directory")
            continue
        if is_locked(log_dir):
            refusals.append(str(LogDirLockedError.for_dir(log_dir)))
        if not has_clean_shutdown(log_dir) and not request.allow_unclean:
            refusals.append(
                f"{log_dir}: no .kafka_cleanshutdown marker, so the broker did not shut down cleanly and the last "
                "segments may hold unrecovered data. Start the broker once, let it recover, stop it cleanly, and "
                "plan again (or pass --allow-unclean if you have checked the segments yourself)."
            )
        if fence_path(log_dir).exists():
            refusals.append(
                f"{log_dir}: {fence_path(log_dir).name} exists: a migration is in progress here. Finish it with "
                "`execute --plan` or undo it with `rollback --plan` using its plan file."
            )
        for journal in foreign_journals(log_dir, "-"):
            refusals.append(
                f"{log_dir}: {journal.name} belongs to a migration that was not finalized or rolled back; run "
                "`finalize --plan` or `rollback --plan` with its plan file first."
            )
        partitions, dir_warnings = list_partitions(log_dir)
        warnings.extend(dir_warnings)
        entries = []
        for part in partitions:
            if topic_re and not topic_re.fullmatch(part.topic):
                continue
            if part.stray_files:
                refusals.append(
                    f"{part.path}: {', '.join(part.stray_files)} left by an interrupted broker operation; start the "
                    "broker once so it completes or discards them, stop it cleanly, and plan again."
                )
            segments = []
            for seg in part.segments:
                if seg.size == 0:
                    continue
                profile = profile_segment(seg.path)
                if profile.tail_bytes and not opts.truncate_tail:
                    refusals.append(
                        f"{seg.path}: {profile.tail_bytes} bytes of a partial entry at byte position "
                        f"{profile.tail_position} "
                        "(a crash left them; Kafka's recovery would truncate them). Plan with --truncate-tail to drop "
                        "them (the original stays in the backup) or restore the segment from a replica."
                    )
                if not profile.has_magic_below(opts.target_magic):
                    continue
                segments.append(
                    {
                        "base_offset": seg.base_offset,
                        "file": seg.path.name,
                        "size": seg.size,
                        "mtime_ns": seg.mtime_ns,
                        "magics": profile.entries_by_magic,
                        "estimated_output_bytes": estimated_output_bytes(profile),
                    }
                )
            if not segments:
                continue
            epochs = leader_epoch_entries(part.path)
            epoch = request.leader_epoch if request.leader_epoch is not None else (epochs[0][0] if epochs else 0)
            entries.append(
                {
                    "partition": part.name,
                    "dir": str(part.path),
                    "leader_epoch": epoch,
                    "bytes": sum(s["size"] for s in segments),
                    "estimated_output_bytes": sum(s["estimated_output_bytes"] for s in segments),
                    "segments": segments,
                }
            )
        need = int(sum(p["estimated_output_bytes"] for p in entries) * SPACE_MARGIN)
        free = free_bytes(log_dir, request.free_bytes_cap)
        if need > free:
            refusals.append(
                f"{log_dir}: the converted segments need about {need} bytes of staging space (originals are kept as "
                f"hard links until finalize), but only {free} bytes are free. Free space, or migrate fewer topics at "
                "a time (--topics)."
            )
        log_dir_entries.append(
            {
                "log_dir": str(log_dir),
                "host": request.host_map.get(raw) or request.host_map.get(str(log_dir)),
                "free_bytes": free,
                "partitions": entries,
            }
        )
    if refusals:
        raise PlanRefusedError("refusing to plan:\n  - " + "\n  - ".join(refusals))
    # the id covers inputs and options only: free space changes from one minute to the next
    body = {
        "version": PLAN_VERSION,
        "options": opts.to_dict(),
        "log_dirs": [{k: v for k, v in d.items() if k != "free_bytes"} for d in log_dir_entries],
    }
    plan_id = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "version": PLAN_VERSION,
        "plan_id": plan_id,
        "tool": f"kafka-log-migrate {__version__}",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "planned_on": socket.gethostname(),
        "options": opts.to_dict(),
        "log_dirs": log_dir_entries,
        "estimates": {
            "partitions": sum(len(d["partitions"]) for d in log_dir_entries),
            "segments": sum(len(p["segments"]) for d in log_dir_entries for p in d["partitions"]),
            "bytes": sum(p["bytes"] for d in log_dir_entries for p in d["partitions"]),
            "estimated_output_bytes": sum(
                p["estimated_output_bytes"] for d in log_dir_entries for p in d["partitions"]
            ),
        },
        "tasks": make_tasks(log_dir_entries, request.task_bytes),
        "warnings": warnings,
    }


def make_tasks(log_dirs: list[dict[str, Any]], task_bytes: int) -> list[dict[str, Any]]:
    """Group segments into tasks of about ``task_bytes``: a task per tiny file would drown the scheduler."""
    tasks = []
    for d in log_dirs:
        current: list[list[Any]] = []
        size = 0
        for p in d["partitions"]:
            for s in p["segments"]:
                current.append([p["partition"], s["base_offset"]])
                size += s["size"]
                if size >= task_bytes:
                    tasks.append({"log_dir": d["log_dir"], "segments": current, "bytes": size})
                    current, size = [], 0
        if current:
            tasks.append({"log_dir": d["log_dir"], "segments": current, "bytes": size})
    for i, t in enumerate(tasks):
        t["id"] = f"t{i:05d}"
    return tasks


def load_plan(path: str | Path) -> dict[str, Any]:
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise MigrateError(f"cannot read plan {path}: {exc}") from exc
    if plan.get("version") != PLAN_VERSION:
        raise MigrateError(f"{path}: plan version {plan.get('version')!r}, this tool reads version {PLAN_VERSION}")
    return plan
