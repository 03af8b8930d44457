"""The append-only journal of a migration: one JSON object per line, fsynced before the step it records counts.

Every state change of every segment, partition and log dir is one event. ``execute`` after a crash resumes from the
journal and ``rollback`` undoes what it says was done, so the journal is written *before* an action it must know
about to undo (``segment-swap-begin`` lists which originals existed) and *after* an action that completed.

Crash testing: ``KAFKA_LOG_MIGRATE_CRASH_AT=EVENT[:N]`` kills the process right after the N-th (default first)
``EVENT`` line is durable; ``before:EVENT[:N]`` kills it just before that line is written, i.e. after the action it
records. Nothing else reads that variable.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.workspace import fsync_dir

CRASH_ENV = "KAFKA_LOG_MIGRATE_CRASH_AT"
_seen: Counter[str] = Counter()


def crash_point(name: str) -> None:
    """Die here (as a power cut would) if the crash-test variable names this point."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    head, sep, count = spec.rpartition(":")
    target, nth = (head, int(count)) if sep and count.isdigit() else (spec, 1)
    if target != name:
        return
    _seen[name] += 1
    if _seen[name] == nth:
        os._exit(77)


class Journal:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        crash_point(f"before:{event}")
        record = {"time": round(time.time(), 3), "event": event, **fields}
        line = json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        new = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            fsync_dir(self.path.parent)
        crash_point(event)
        return record

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        lines = self.path.read_text().split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                if i == len(lines) - 1:
                    break  # a line torn by a crash mid-write: the step it records did not count
                raise
        return out

    def state(self) -> JournalState:
        return JournalState.from_events(self.events())


@dataclass
class JournalState:
    """What the journal says, folded: the last state of every segment and partition, and of the log dir."""

    log_dir: str = "new"  # new | started | swapped | rolled-back | finalized
    fence_up: bool = False
    lock_existed: bool | None = None  # whether Kafka's .lock was there before the migration first touched the dir
    partitions: dict[str, str] = field(default_factory=dict)  # verified | failed | swapped | rolled-back
    segments: dict[str, dict[str, Any]] = field(default_factory=dict)  # "partition/base" -> latest info
    problems: dict[str, list[str]] = field(default_factory=dict)

    @staticmethod
    def key(partition: str, base_offset: int) -> str:
        return f"{partition}/{base_offset}"

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> JournalState:
        st = cls()
        for e in events:
            kind = e["event"]
            if kind == "execute-started" and st.log_dir == "new":
                st.log_dir = "started"
                st.lock_existed = e.get("lock_existed")
            elif kind == "fence-up":
                st.fence_up = True
            elif kind == "fence-down":
                st.fence_up = False
            elif kind == "segment-converted":
                st.segments[cls.key(e["partition"], e["base"])] = {"state": "converted", "result": e["result"]}
            elif kind == "partition-verified":
                st.partitions[e["partition"]] = "verified" if e["ok"] else "failed"
                if not e["ok"]:
                    st.problems[e["partition"]] = e.get("problems", [])
            elif kind == "segment-swap-begin":
                seg = st.segments.setdefault(cls.key(e["partition"], e["base"]), {})
                seg.update(state="swapping", originals=e["originals"], outputs=e["outputs"])
            elif kind == "segment-swapped":
                st.segments[cls.key(e["partition"], e["base"])]["state"] = "swapped"
            elif kind == "partition-swapped":
                st.partitions[e["partition"]] = "swapped"
            elif kind == "logdir-swapped":
                st.log_dir = "swapped"
            elif kind == "segment-rolled-back":
                st.segments[cls.key(e["partition"], e["base"])]["state"] = "rolled-back"
            elif kind == "partition-rolled-back":
                st.partitions[e["partition"]] = "rolled-back"
            elif kind == "rollback-finished":
                st.log_dir = "rolled-back"
            elif kind == "finalized":
                st.log_dir = "finalized"
        return st
