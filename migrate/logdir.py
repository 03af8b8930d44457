"""Kafka's log dir layout: partition directory names, segment files, .lock, the clean-shutdown marker, checkpoints.

Facts (docs/kafka-on-disk-facts.md sections 2 and 3): a broker takes an fcntl (POSIX record) lock on
``<log dir>/.lock`` for as long as it runs, and deletes the file on a clean stop; ``.kafka_cleanshutdown`` exists
only after a clean stop; a partition dir is ``<topic>-<partition>``; segments are ``<20-digit base offset>.log`` with
``.index``, ``.timeindex`` and ``.txnindex`` siblings; ``.swap``, ``.cleaned`` and ``.deleted`` files are left by an
interrupted broker operation that the broker completes or discards at its next start.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from migrate.errors import MigrateError

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
STRAY_SUFFIXES = (".swap", ".cleaned", ".deleted")
SKIPPED_DIRS = {"__cluster_metadata-0", "remote-log-index-cache"}


class LogDirLockedError(MigrateError):
    """Another process holds Kafka's .lock on a log dir: a running broker, or another kafka-log-migrate."""

    @classmethod
    def for_dir(cls, log_dir: str | Path) -> LogDirLockedError:
        return cls(
            f"{log_dir}: another process holds the fcntl lock on {Path(log_dir) / LOCK_FILE}, so a Kafka broker (or "
            "another kafka-log-migrate) is using this log dir. Stop the broker cleanly and try again."
        )


@dataclass
class Segment:
    base_offset: int
    path: Path
    size: int
    mtime_ns: int


@dataclass
class Partition:
    name: str
    topic: str
    partition: int
    path: Path
    segments: list[Segment] = field(default_factory=list)
    stray_files: list[str] = field(default_factory=list)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a ``<topic>-<partition>`` directory name, as Kafka parses it; None if it is not one."""
    topic, sep, number = name.rpartition("-")
    if not sep or not topic or not number.isdigit():
        return None
    return topic, int(number)


def list_partitions(log_dir: str | Path) -> tuple[list[Partition], list[str]]:
    """The topic-partition dirs of a log dir with their segments, and warnings about anything else found there."""
    partitions: list[Partition] = []
    warnings: list[str] = []
    for entry in sorted(Path(log_dir).iterdir()):
        if not entry.is_dir() or entry.name in SKIPPED_DIRS or entry.name.startswith("."):
            continue
        if entry.name.endswith(("-delete", "-future")) or ".delete" in entry.name:
            warnings.append(f"{entry}: a partition being deleted or moved by the broker; not migrated")
            continue
        parsed = parse_partition_dir(entry.name)
        if parsed is None:
            warnings.append(
                f"{entry}: not a topic-partition directory (a Kafka broker refuses to start with it in the log dir); "
                "skipped"
            )
            continue
        part = Partition(entry.name, parsed[0], parsed[1], entry)
        for f in sorted(entry.iterdir()):
            if not f.is_file():
                continue
            m = SEGMENT_RE.match(f.name)
            if m:
                st = f.stat()
                part.segments.append(Segment(int(m.group(1)), f, st.st_size, st.st_mtime_ns))
            elif f.name.endswith(STRAY_SUFFIXES):
                part.stray_files.append(f.name)
        part.segments.sort(key=lambda s: s.base_offset)
        partitions.append(part)
    return partitions, warnings


def is_locked(log_dir: str | Path) -> bool:
    """Whether another process holds Kafka's fcntl lock on ``<log dir>/.lock`` (never creates the file)."""
    lock = Path(log_dir) / LOCK_FILE
    if not lock.exists():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.lockf(f, fcntl.LOCK_UN)
    return False


class LogDirLock:
    """Hold Kafka's own lock on a log dir, so no broker can start on it while we change files.

    fcntl locks belong to the process and are released when *any* descriptor of the file closes, so the one
    descriptor is kept open for the whole hold. A .lock we created is removed again; Kafka's own is left.
    """

    def __init__(self, log_dir: str | Path, remove_after: bool | None = None) -> None:
        """``remove_after``: delete .lock on release (default: only if this lock created it). A run resumed after
        a crash passes what the first run saw, since the crash left our .lock behind."""
        self.path = Path(log_dir) / LOCK_FILE
        self.remove_after = remove_after
        self.created = False
        self._file = None

    def __enter__(self) -> LogDirLock:
        self.created = not self.path.exists()
        if self.remove_after is None:
            self.remove_after = self.created
        self._file = open(self.path, "a")
        try:
            fcntl.lockf(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            if self.created:
                self.path.unlink(missing_ok=True)
            raise LogDirLockedError.for_dir(self.path.parent) from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.remove_after:
            self.path.unlink(missing_ok=True)
        if self._file is not None:
            fcntl.lockf(self._file, fcntl.LOCK_UN)
            self._file.close()


def has_clean_shutdown(log_dir: str | Path) -> bool:
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def leader_epoch_entries(partition_dir: str | Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a partition's leader-epoch-checkpoint; [] if it has none."""
    path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
    if not path.exists():
        return []
    lines = path.read_text().split("\n")
    try:
        if int(lines[0]) != 0:
            raise ValueError(f"version {lines[0]}")
        count = int(lines[1])
        entries = []
        for i in range(count):
            epoch, start = lines[2 + i].split()
            entries.append((int(epoch), int(start)))
    except (ValueError, IndexError) as exc:
        raise MigrateError(
            f"{path} is malformed ({exc}); Kafka would take this log dir offline. Fix or restore the file first."
        ) from exc
    return entries


def free_bytes(path: str | Path, cap: int | None = None) -> int:
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    return free if cap is None else min(free, cap)
