"""A broker's log dir as its loader sees it: partitions, their segments and index siblings, stray files; free space;
whether a path is a log dir at all. Read-only, small records.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from migrate.errors import LogDirAccessError
from migrate.kafka.names import (
    CHECKPOINT_FILES,
    CLEAN_SHUTDOWN_FILE,
    DELETED_SUFFIX,
    FENCE_NAME,
    INDEX_RE,
    INDEX_SUFFIXES,
    META_PROPERTIES,
    METADATA_TOPIC,
    SEGMENT_RE,
    SKIPPED_DIRS,
    STRAY_SUFFIXES,
    PartitionDirName,
    parse_partition_dir_name,
)

# --- segments ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FileInfo:
    path: Path
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path, st: os.stat_result) -> FileInfo:
        return cls(path, st.st_size, st.st_mtime_ns)


@dataclass(slots=True)
class Segment:
    """``<base>.log`` and its index siblings (None where absent: Kafka rebuilds a missing .index/.timeindex; a
    missing .txnindex means no aborted transactions)."""

    base_offset: int
    path: Path
    size: int
    mtime_ns: int
    index: FileInfo | None = None
    time_index: FileInfo | None = None
    txn_index: FileInfo | None = None


@dataclass(slots=True)
class Partition:
    name: str  # directory name
    topic: str
    partition: int
    path: Path
    segments: list[Segment] = field(default_factory=list)
    stray_files: list[str] = field(default_factory=list)  # .swap/.cleaned: a broker died mid-operation
    unexpected_files: list[str] = field(default_factory=list)  # *.log not named <20 digits>.log, orphan indexes
    # directories, links and special files (not this tool's work dirs): a swap carries regular files only
    other_entries: list[str] = field(default_factory=list)
    kind: str = "current"

    @property
    def topic_partition(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


OWN_DIR_PREFIX = ".kafka-log-migrate-"  # this tool's work dirs inside a partition dir (migrate.run.workspace)


def list_segments(partition_dir: str | Path) -> tuple[list[Segment], list[str], list[str]]:
    """(segments sorted by base offset, stray Kafka temp files, unexpected files) of a partition directory.

    Only regular files count, as for Kafka's loader (our work dir, a sub-directory, is invisible to it).
    """
    directory = Path(partition_dir)
    logs: dict[int, Segment] = {}
    indexes: dict[tuple[int, str], FileInfo] = {}
    stray: list[str] = []
    unexpected: list[str] = []
    with os.scandir(directory) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if not entry.is_file(follow_symlinks=False):
            continue
        name = entry.name
        if name.endswith(DELETED_SUFFIX):
            continue
        if name.endswith(STRAY_SUFFIXES):
            stray.append(name)
            continue
        m = SEGMENT_RE.match(name)
        if m:
            st = entry.stat()
            logs[int(m.group(1))] = Segment(int(m.group(1)), directory / name, st.st_size, st.st_mtime_ns)
            continue
        m = INDEX_RE.match(name)
        if m:
            indexes[(int(m.group(1)), m.group(2))] = FileInfo.of(directory / name, entry.stat())
        elif name.endswith((".log", *INDEX_SUFFIXES)):
            unexpected.append(name)
    for (base, suffix), info in sorted(indexes.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        seg = logs.get(base)
        if seg is None:
            unexpected.append(info.path.name)  # Kafka deletes an orphaned index at start-up
        elif suffix == ".index":
            seg.index = info
        elif suffix == ".timeindex":
            seg.time_index = info
        else:
            seg.txn_index = info
    return [logs[b] for b in sorted(logs)], stray, sorted(unexpected)


def read_partition(path: str | Path, parsed: PartitionDirName | None = None) -> Partition:
    """A partition directory with its segment files (name parsed from the directory name unless given)."""
    path = Path(path)
    parsed = parsed or parse_partition_dir_name(path.name)
    if parsed is None:
        raise LogDirAccessError(f"{path}: not a topic-partition directory name (expected <topic>-<partition>)")
    segments, stray, unexpected = list_segments(path)
    others = other_entries(path)
    return Partition(
        path.name, parsed.topic, parsed.partition, path, segments, stray, unexpected, others, kind=parsed.kind
    )


def other_entries(partition_dir: str | Path) -> list[str]:
    """The entries of a partition dir that are not regular files, this tool's work dirs aside: Kafka never reads
    them, and a swap, which moves the directory whole, cannot carry them."""
    with os.scandir(partition_dir) as it:
        return sorted(
            e.name for e in it if not e.is_file(follow_symlinks=False) and not e.name.startswith(OWN_DIR_PREFIX)
        )


@dataclass(slots=True)
class LogDirLayout:
    """What a broker would find in one log dir."""

    path: Path
    partitions: list[Partition] = field(default_factory=list)  # live partitions: what a migration may touch
    future: list[Partition] = field(default_factory=list)  # -future replicas (a log-dir move in progress)
    other_dirs: dict[str, str] = field(default_factory=dict)  # directory name -> why it is not migrated
    warnings: list[str] = field(default_factory=list)


def inspect_log_dir(log_dir: str | Path, each: Callable[[Partition], None] | None = None) -> LogDirLayout:
    """Classify every child directory of a log dir as Kafka's ``LogManager.loadLogs`` would, and list segments.

    ``each``: every live and future partition is handed to it as it is read, in the order the layout would list
    it, and not kept (``partitions`` and ``future`` stay empty): a record and a path per segment is about 1 KB, 1 GB
    for a broker of 10^6 segments, which a reader that needs one partition at a time (``scan``) need not hold.

    Raises LogDirAccessError if the log dir itself cannot be listed.
    """
    root = Path(log_dir)
    layout = LogDirLayout(root)
    try:
        with os.scandir(root) as it:
            children = sorted((e for e in it if e.is_dir()), key=lambda e: e.name)
    except FileNotFoundError:
        raise LogDirAccessError(f"{root}: no such directory. Check the log dir path (log.dirs).") from None
    except NotADirectoryError:
        raise LogDirAccessError(f"{root}: not a directory. Check the log dir path (log.dirs).") from None
    except PermissionError:
        raise LogDirAccessError(
            f"{root}: permission denied listing the log dir. Run as the user that owns it (the broker's user)."
        ) from None
    seen: dict[tuple[str, int], str] = {}
    for child in children:
        name = child.name
        path = root / name
        if name in SKIPPED_DIRS:
            layout.other_dirs[name] = "tiered-storage index cache (Kafka skips it)"
            continue
        if name == FENCE_NAME:
            layout.other_dirs[name] = "kafka-log-migrate fence"
            layout.warnings.append(
                f"{path}: a kafka-log-migrate migration is in progress on this log dir (no broker can start while "
                "this directory exists). Finish it with `kafka-log-migrate execute --plan PLAN.json` or undo it with "
                "`kafka-log-migrate rollback --plan PLAN.json`; do not delete it by hand."
            )
            continue
        parsed = parse_partition_dir_name(name)
        if parsed is None:
            layout.other_dirs[name] = "not a topic-partition directory"
            layout.warnings.append(
                f"{path}: not a topic-partition directory. A Kafka broker refuses to start with it in the log dir "
                "(\"Found directory ..., '...' is not in the form of topic-partition\"). It was not scanned or "
                "migrated; move it out of the log dir before starting the broker."
            )
            continue
        if parsed.topic == METADATA_TOPIC:
            layout.other_dirs[name] = "KRaft metadata log (not data)"
            continue
        if parsed.kind == "delete":
            layout.other_dirs[name] = "partition marked for deletion"
            layout.warnings.append(
                f"{path}: {parsed.topic_partition} marked for deletion; the broker deletes it after start-up. "
                "Not migrated."
            )
            continue
        if parsed.kind == "stray":
            layout.other_dirs[name] = "stray partition"
            layout.warnings.append(
                f"{path}: stray log of {parsed.topic_partition} (set aside by a KRaft broker: this broker no longer "
                "hosts it). Not migrated; delete it once you are sure it is not needed."
            )
            continue
        part = read_partition(path, parsed)
        if parsed.kind == "future":
            if each is None:
                layout.future.append(part)
            else:
                each(part)
            layout.warnings.append(
                f"{path}: future replica of {parsed.topic_partition} (a move between log dirs was in progress). "
                "Not migrated: start the broker and let the move finish (or cancel it), then scan again."
            )
            continue
        key = (parsed.topic, parsed.partition)
        if key in seen:
            layout.warnings.append(
                f"{path}: a second directory for {parsed.topic_partition} (besides {seen[key]}). A Kafka broker "
                "refuses to start with duplicate log directories; remove the wrong one."
            )
        seen.setdefault(key, name)
        if each is None:
            layout.partitions.append(part)
        else:
            each(part)
        if part.stray_files:
            layout.warnings.append(
                f"{path}: {', '.join(part.stray_files)} left by a broker that died during a cleaner, split or delete "
                "operation. Start the broker once so it completes or discards them, stop it cleanly, then migrate."
            )
        if part.unexpected_files:
            layout.warnings.append(
                f"{path}: {', '.join(part.unexpected_files)}: not Kafka segment files (a .log must be named "
                "<20-digit offset>.log; an index without its .log is deleted by the broker). Kafka's loader may fail "
                "on a misnamed .log: move such files out of the partition dir."
            )
    return layout


# --- free space -------------------------------------------------------------------------------------------------


def free_bytes(path: str | Path, free_bytes_cap: int | None = None) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path`` (``statvfs`` f_bavail), at most
    ``free_bytes_cap`` if given (tests and ``--assume-free-bytes`` simulate a nearly full disk)."""
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    return free if free_bytes_cap is None else min(free, free_bytes_cap)


# --- is this a log dir? -----------------------------------------------------------------------------------------


def validate_log_dir_path(raw: str) -> str | None:
    """Why ``raw`` cannot be read as a Kafka log dir (None if it can): a certificate or a plan must never cover a
    path that was not what the operator meant. A log dir holds ``meta.properties``, Kafka's checkpoint files, or at
    least one topic-partition directory; a partition directory given in its place is named with its parent."""
    if not raw.strip():
        return "an empty log dir path (check for a doubled or trailing comma in --log-dirs)"
    path = Path(raw)
    if not path.exists():
        return f"{raw}: no such directory. Check the path against log.dirs in the broker's server.properties."
    if not path.is_dir():
        return f"{raw}: not a directory. --log-dirs takes the broker's log.dirs, the directories holding partitions."
    resolved = path.resolve()
    parsed = parse_partition_dir_name(resolved.name)
    try:
        with os.scandir(resolved) as it:
            children = list(it)
    except PermissionError:
        return f"{raw}: permission denied. Run as the broker's user or as root."
    has_segments = any(c.is_file() and SEGMENT_RE.match(c.name) for c in children)
    if parsed is not None and has_segments:
        return (
            f"{raw} is a partition directory ({parsed.topic_partition}), not a log dir. Give its log dir instead: "
            f"--log-dirs {resolved.parent}"
        )
    names = {c.name for c in children}
    kafka_files = {META_PROPERTIES, *CHECKPOINT_FILES, CLEAN_SHUTDOWN_FILE}
    if names & kafka_files:
        return None
    if any(c.is_dir() and parse_partition_dir_name(c.name) is not None for c in children):
        return None
    return (
        f"{raw} does not look like a Kafka log dir: it has no meta.properties, no checkpoint files and no "
        "<topic>-<partition> directories. Check the path against log.dirs in the broker's server.properties."
    )
