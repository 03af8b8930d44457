"""Kafka's log dir layout: the names and files a broker reads, and the lock it takes. Pure functions, small records.

Facts (docs/kafka-on-disk-facts.md sections 2 and 3):

- Every sub-directory of a log dir except ``remote-log-index-cache`` goes through
  ``LocalLog.parseTopicPartitionName``: ``<topic>-<partition>`` (topic = text before the last ``-``, partition an
  int), or ``<topic>-<partition>.<id>-delete`` / ``-future`` / ``-stray``. Any other directory stops the broker at
  start-up ("Found directory ..., '...' is not in the form of topic-partition"). ``__cluster_metadata-*`` is the
  KRaft metadata log, not data.
- A segment is ``<20-digit base offset>.log`` with ``.index``, ``.timeindex`` and ``.txnindex`` siblings.
  ``.swap``, ``.cleaned`` and ``.deleted`` files are left by a broker that died during a cleaner/split/delete
  operation; it completes or discards them at its next start.
- A running broker holds an fcntl (POSIX record) lock on ``<log dir>/.lock`` (``FileChannel.tryLock``, i.e.
  ``fcntl(F_SETLK)``, not ``flock``) and deletes the file on a clean stop; ``.kafka_cleanshutdown`` exists only
  after a clean stop.
- Checkpoints (``recovery-point-offset-checkpoint`` ...) are ``CheckpointFile``s: a version line ``0``, a count line,
  then one entry per line, fields split on whitespace; ``leader-epoch-checkpoint`` has ``epoch startOffset``
  entries.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from migrate.errors import LogDirAccessError, LogDirLockedError, MalformedLogDirFileError

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_CHECKPOINT, CLEANER_CHECKPOINT)

SEGMENT_RE = re.compile(r"^(\d{20})\.log$", re.ASCII)
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
_INDEX_RE = re.compile(r"^(\d{20})(\.index|\.timeindex|\.txnindex)$", re.ASCII)
STRAY_SUFFIXES = (".swap", ".cleaned", ".deleted")
SKIPPED_DIRS = {"remote-log-index-cache"}
METADATA_TOPIC = "__cluster_metadata"
DIR_SUFFIXES = {"-delete": "delete", "-future": "future", "-stray": "stray"}
# our own fence (migrate.run.workspace.FENCE_NAME): deliberately not a topic-partition name, see workspace.py
_FENCE_NAME = "kafka-log-migrate.IN-PROGRESS"

# Java's \s (ASCII whitespace), as used by Kafka's patterns and Pattern.split
_JAVA_WS = "[ \t\n\x0b\f\r]"
_JAVA_NOT_WS = "[^ \t\n\x0b\f\r]"
_SPECIAL_DIR_RE = {
    suffix: re.compile(rf"({_JAVA_NOT_WS}+)-({_JAVA_NOT_WS}+)\.({_JAVA_NOT_WS}+){suffix}") for suffix in DIR_SUFFIXES
}
_JAVA_INTEGER = re.compile(r"[+-]?\d+")  # Integer.parseInt / Long.parseLong accept a sign and (Unicode) digits
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # BufferedReader.readLine


def _java_int(text: str, bits: int = 32) -> int | None:
    """``Integer.parseInt`` (bits=32) / ``Long.parseLong`` (bits=64): the value, or None where Java throws."""
    if not _JAVA_INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None


def _java_split(line: str) -> list[str]:
    """``Pattern.compile("\\\\s+").split(line)``: a leading empty field is kept, trailing empty fields dropped."""
    parts = re.split(f"{_JAVA_WS}+", line)
    while parts and parts[-1] == "" and len(parts) > 1:
        parts.pop()
    return parts


def _read_lines(path: Path) -> list[str]:
    """The lines of ``path`` as ``BufferedReader.readLine`` returns them (no final empty line after a newline)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedLogDirFileError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# --- partition directory names ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionDirName:
    """A directory name Kafka's loader accepts: ``kind`` is current, delete, future or stray."""

    name: str
    topic: str
    partition: int
    kind: str = "current"

    @property
    def topic_partition(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir_name(name: str) -> PartitionDirName | None:
    """Parse a log dir child's name exactly as Kafka's ``LocalLog.parseTopicPartitionName`` does; None where Kafka
    throws (and so refuses to start). ``__cluster_metadata-0`` parses (the caller skips it, as Kafka does)."""
    if not name or "-" not in name:
        return None
    kind = "current"
    base = name
    for suffix, suffix_kind in DIR_SUFFIXES.items():
        if name.endswith(suffix):
            if not _SPECIAL_DIR_RE[suffix].fullmatch(name):
                return None
            kind = suffix_kind
            base = name[: name.rindex(".")]
            break
    topic, _, number = base.rpartition("-")
    if not topic or not number:
        return None
    partition = _java_int(number)
    if partition is None:
        return None
    return PartitionDirName(name, topic, partition, kind)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a live ``<topic>-<partition>`` directory name; None for anything else (including
    ``-delete``/``-future``/``-stray`` dirs)."""
    parsed = parse_partition_dir_name(name)
    if parsed is None or parsed.kind != "current":
        return None
    return parsed.topic, parsed.partition


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
    stray_files: list[str] = field(default_factory=list)  # .swap/.cleaned/.deleted: a broker died mid-operation
    unexpected_files: list[str] = field(default_factory=list)  # *.log not named <20 digits>.log, orphan indexes
    kind: str = "current"

    @property
    def topic_partition(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)


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
        if not entry.is_file():
            continue
        name = entry.name
        if name.endswith(STRAY_SUFFIXES):
            stray.append(name)
            continue
        m = SEGMENT_RE.match(name)
        if m:
            st = entry.stat()
            logs[int(m.group(1))] = Segment(int(m.group(1)), directory / name, st.st_size, st.st_mtime_ns)
            continue
        m = _INDEX_RE.match(name)
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
    return Partition(path.name, parsed.topic, parsed.partition, path, segments, stray, unexpected, parsed.kind)


@dataclass(slots=True)
class LogDirLayout:
    """What a broker would find in one log dir."""

    path: Path
    partitions: list[Partition] = field(default_factory=list)  # live partitions: what a migration may touch
    future: list[Partition] = field(default_factory=list)  # -future replicas (a log-dir move in progress)
    other_dirs: dict[str, str] = field(default_factory=dict)  # directory name -> why it is not migrated
    warnings: list[str] = field(default_factory=list)


def inspect_log_dir(log_dir: str | Path) -> LogDirLayout:
    """Classify every child directory of a log dir as Kafka's ``LogManager.loadLogs`` would, and list segments.

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
        if name == _FENCE_NAME:
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
            layout.future.append(part)
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
        layout.partitions.append(part)
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


def list_partitions(log_dir: str | Path) -> tuple[list[Partition], list[str]]:
    """The live topic-partition dirs of a log dir with their segments, and warnings about everything else."""
    layout = inspect_log_dir(log_dir)
    return layout.partitions, layout.warnings


# --- .lock ------------------------------------------------------------------------------------------------------

# fcntl locks belong to the process: a second descriptor of the same file in this process would "succeed" in
# locking it again, and closing it would drop the first one's lock. So this process remembers what it holds.
_held: dict[str, tuple[int, LogDirLock]] = {}
_held_guard = threading.Lock()


def _lock_key(lock_path: Path) -> str:
    return os.path.realpath(lock_path)


def _held_here(lock_path: Path) -> LogDirLock | None:
    entry = _held.get(_lock_key(lock_path))
    if entry is None or entry[0] != os.getpid():  # after fork() the child holds no fcntl lock
        return None
    return entry[1]


# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid (native alignment)
_FLOCK = struct.Struct("@hhqqi4x")


def _getlk_pid(fd: int) -> int | None:
    """fcntl(F_GETLK): the pid of a process whose lock would block an exclusive lock of the whole file, 0 if
    its pid is unknown (another pid namespace), None if nobody's would. Linux only."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if l_type == fcntl.F_UNLCK else max(pid, 0)


_CAN_GETLK = sys.platform.startswith("linux")


def lock_holder(log_dir: str | Path) -> int | None:
    """Who holds Kafka's fcntl lock on ``<log dir>/.lock``: a pid (0 if unknown), or None if nobody does.

    Read-only: never creates the file; probes with F_GETLK on a read-only descriptor (elsewhere than Linux: takes
    and releases the lock on the existing file). ``flock`` locks are not Kafka's and do not count. This process's
    own LogDirLock counts (its pid is returned).
    """
    path = Path(log_dir) / LOCK_FILE
    if _held_here(path) is not None:
        return os.getpid()
    try:
        fd = os.open(path, (os.O_RDONLY if _CAN_GETLK else os.O_WRONLY) | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # a broker creates .lock before locking it: no file, no holder
    except PermissionError:
        if not _CAN_GETLK:
            raise
        raise LogDirAccessError(
            f"{path}: permission denied opening Kafka's lock file. Run as the broker's user to check whether a "
            "broker is using this log dir."
        ) from None
    try:
        if _CAN_GETLK:
            return _getlk_pid(fd)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return 0
            raise
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_locked(log_dir: str | Path) -> bool:
    """Whether a process (a broker, another kafka-log-migrate, or this process's LogDirLock) holds Kafka's lock."""
    return lock_holder(log_dir) is not None


class LogDirLock:
    """Hold Kafka's own lock on a log dir (as ``LogManager.lockLogDirs`` does), so no broker can start on it while
    files change: ``fcntl(F_SETLK)`` on ``<log dir>/.lock``, created if missing.

    The one descriptor stays open for the whole hold (closing any descriptor of the file would drop the lock).
    On release the file is deleted if this lock created it (``remove_after`` overrides: a run resumed after a crash
    passes what the first run saw, since the crash left our .lock behind); Kafka's own is left in place.
    """

    def __init__(self, log_dir: str | Path, remove_after: bool | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.path = self.log_dir / LOCK_FILE
        self.remove_after = remove_after
        self.created = False
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> LogDirLock:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this LogDirLock")
        with _held_guard:
            if _held_here(self.path) is not None:
                raise LogDirLockedError(str(self.log_dir), os.getpid(), same_process=True)
            for _ in range(5):
                fd, created = self._open()
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    holder = _getlk_pid(fd) if _CAN_GETLK else None
                    os.close(fd)  # the file stays: whoever holds the lock is using it, even one we just created
                    if exc.errno in (errno.EACCES, errno.EAGAIN):
                        raise LogDirLockedError(str(self.log_dir), holder) from None
                    raise LogDirAccessError(f"{self.path}: cannot lock ({exc.strerror})") from exc
                # a broker stopping right now unlocks and deletes .lock: a lock on a deleted file fences nothing
                if self._same_file(fd):
                    break
                os.close(fd)
            else:
                raise LogDirAccessError(
                    f"{self.path} keeps being replaced while we try to lock it: something is starting or stopping on "
                    f"{self.log_dir}. Make sure the broker is stopped, then try again."
                )
            self._fd = fd
            self.created = created
            if self.remove_after is None:
                self.remove_after = created
            _held[_lock_key(self.path)] = (os.getpid(), self)
        return self

    def _open(self) -> tuple[int, bool]:
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            try:
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                return os.open(self.path, flags), False
        except PermissionError:
            raise LogDirAccessError(
                f"{self.path}: permission denied opening Kafka's lock file for writing. Run kafka-log-migrate as "
                f"the user the broker runs as (the owner of {self.log_dir})."
            ) from None
        except (FileNotFoundError, NotADirectoryError):
            raise LogDirAccessError(f"{self.log_dir}: no such log dir. Check the path (log.dirs).") from None

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        fd = self._fd
        if fd is None:
            return
        with _held_guard:
            try:
                if self.remove_after and self._same_file(fd):
                    self.path.unlink(missing_ok=True)  # still locked while it goes, as Kafka's FileLock.destroy
                fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
                self._fd = None
                _held.pop(_lock_key(self.path), None)

    def __enter__(self) -> LogDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# --- .kafka_cleanshutdown ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanShutdown:
    """The clean-shutdown marker: 3.7+ brokers write ``{"version":0,"brokerEpoch":N}``, older ones an empty file
    (``version``/``broker_epoch`` None)."""

    version: int | None = None
    broker_epoch: int | None = None


def has_clean_shutdown(log_dir: str | Path) -> bool:
    """Whether ``.kafka_cleanshutdown`` exists: all Kafka checks before skipping recovery of the whole dir."""
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def read_clean_shutdown(log_dir: str | Path) -> CleanShutdown | None:
    """The clean-shutdown marker of a log dir, None if absent. Raises MalformedLogDirFileError for content that is
    neither empty nor the JSON form (Kafka then treats the broker epoch as unknown, but still skips recovery)."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    if not raw.strip():
        return CleanShutdown()
    hint = (
        "Kafka still skips log recovery (the file exists) but treats the broker epoch as unknown, i.e. as an unclean "
        "shutdown for leader election. Nothing was changed; do not edit this file by hand."
    )
    try:
        content = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedLogDirFileError(str(path), f"not JSON ({exc})", hint=hint) from exc
    if not isinstance(content, dict):
        raise MalformedLogDirFileError(str(path), "JSON that is not an object", hint=hint)

    def number(key: str, bits: int) -> int | None:
        value = content.get(key)
        if value is None:
            return None
        parsed = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str):  # Jackson coerces "7" to a number
            parsed = _java_int(value, bits)
        if parsed is None:
            raise MalformedLogDirFileError(str(path), f"{key} is {value!r}, not an integer", hint=hint)
        return parsed

    epoch = number("brokerEpoch", 64)
    if epoch is None:
        raise MalformedLogDirFileError(str(path), "no brokerEpoch field", hint=hint)
    return CleanShutdown(number("version", 32), epoch)


# --- meta.properties --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """``meta.properties``: version 0 (ZooKeeper mode, ``broker.id``) or 1 (KRaft, ``node.id``)."""

    version: int | None
    broker_id: int | None  # node.id in KRaft, broker.id in ZooKeeper mode
    cluster_id: str | None
    directory_id: str | None
    properties: dict[str, str]


_PROPS_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _java_properties(path: Path) -> list[tuple[int, str, str]]:
    """(line number, key, value) of a Java ``.properties`` file, as ``java.util.Properties.load`` reads it."""
    try:
        text = path.read_bytes().decode("utf-8")  # Kafka's PropertiesUtils reads with a UTF-8 reader
    except UnicodeDecodeError as exc:
        raise MalformedLogDirFileError(str(path), f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    natural = _LINE_BREAK.split(text)
    out: list[tuple[int, str, str]] = []
    i = 0
    while i < len(natural):
        start = i
        line = natural[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # a line ending in an odd number of backslashes continues on the next one (leading blanks dropped)
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + (natural[i].lstrip(" \t\f") if i < len(natural) else "")
            i += 1
        key_chars: list[str] = []
        j = 0
        while j < len(line) and line[j] not in "=: \t\f":
            if line[j] == "\\" and j + 1 < len(line):
                j += 1
            key_chars.append(line[j])
            j += 1
        while j < len(line) and line[j] in " \t\f":
            j += 1
        if j < len(line) and line[j] in "=:":
            j += 1
        value = line[j:].lstrip(" \t\f")
        out.append((start + 1, _unescape(path, start + 1, "".join(key_chars)), _unescape(path, start + 1, value)))
    return out


def _unescape(path: Path, line: int, text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    j = 0
    while j < len(text):
        c = text[j]
        if c != "\\" or j + 1 >= len(text):
            out.append(c)
            j += 1
            continue
        n = text[j + 1]
        if n == "u":
            digits = text[j + 2 : j + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise MalformedLogDirFileError(str(path), f"malformed \\uxxxx escape {text[j : j + 6]!r}", line=line)
            out.append(chr(int(digits, 16)))
            j += 6
        else:
            out.append(_PROPS_ESCAPES.get(n, n))
            j += 2
    return "".join(out)


def read_meta_properties(log_dir: str | Path) -> MetaProperties | None:
    """``<log dir>/meta.properties``, None if absent; MalformedLogDirFileError (with the line) for a version,
    ``broker.id`` or ``node.id`` that is not an integer."""
    path = Path(log_dir) / META_PROPERTIES
    if not path.exists():
        return None
    props: dict[str, str] = {}
    numbers: dict[str, int | None] = {"version": None, "broker.id": None, "node.id": None}
    for line, key, value in _java_properties(path):
        props[key] = value
        if key in numbers:
            parsed = _java_int(value.strip())
            if parsed is None:
                raise MalformedLogDirFileError(
                    str(path),
                    f"{key}={value!r} is not an integer",
                    line=line,
                    hint="Kafka refuses to start with this file. Restore it (it was written by kafka-storage.sh "
                    "format or by the broker) before migrating.",
                )
            numbers[key] = parsed
    version = numbers["version"]
    node_id = numbers["node.id"] if version == 1 or numbers["broker.id"] is None else numbers["broker.id"]
    return MetaProperties(version, node_id, props.get("cluster.id"), props.get("directory.id"), props)


# --- checkpoints ------------------------------------------------------------------------------------------------


def _read_checkpoint(path: Path, fields: int) -> list[tuple[int, list[str]]]:
    """(line number, fields) of each entry of a ``CheckpointFile`` (version 0), checked as Kafka's reader checks."""
    lines = _read_lines(path)
    if not lines:
        return []  # Kafka creates checkpoint files empty; an empty file is an empty list

    def integer(lineno: int, text: str, what: str) -> int:
        value = _java_int(text)
        if value is None:
            raise MalformedLogDirFileError(
                str(path), f"malformed {what} line {text!r} (expected an integer)", line=lineno
            )
        return value

    version = integer(1, lines[0], "version")
    if version != 0:
        raise MalformedLogDirFileError(str(path), f"unknown checkpoint version {version} (Kafka writes 0)", line=1)
    if len(lines) == 1:
        return []
    expected = integer(2, lines[1], "entry count")
    entries = []
    for lineno, line in enumerate(lines[2:], start=3):
        parts = _java_split(line)
        if len(parts) != fields:
            raise MalformedLogDirFileError(
                str(path), f"malformed entry {line!r} (expected {fields} fields separated by spaces)", line=lineno
            )
        entries.append((lineno, parts))
    if len(entries) != expected:
        raise MalformedLogDirFileError(
            str(path), f"line 2 declares {expected} entries but the file holds {len(entries)}", line=2
        )
    return entries


def read_offset_checkpoint(path: str | Path) -> dict[tuple[str, int], int]:
    """An ``OffsetCheckpointFile`` (recovery-point-offset-checkpoint, replication-offset-checkpoint,
    log-start-offset-checkpoint, cleaner-offset-checkpoint): {(topic, partition): offset}. A missing file reads as
    empty (Kafka creates it empty); anything Kafka's reader would reject raises MalformedLogDirFileError."""
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[tuple[str, int], int] = {}
    for lineno, (topic, partition_text, offset_text) in _read_checkpoint(path, 3):
        partition = _java_int(partition_text)
        offset = _java_int(offset_text, 64)
        if partition is None or offset is None:
            raise MalformedLogDirFileError(
                str(path),
                f"malformed entry {' '.join([topic, partition_text, offset_text])!r} (expected 'topic partition "
                "offset' with integer partition and offset)",
                line=lineno,
            )
        out[(topic, partition)] = offset
    return out


def read_leader_epoch_checkpoint(path: str | Path) -> list[tuple[int, int]]:
    """A ``leader-epoch-checkpoint`` file: [(epoch, start offset)] in file order; [] if missing."""
    path = Path(path)
    if not path.exists():
        return []
    out: list[tuple[int, int]] = []
    for lineno, (epoch_text, start_text) in _read_checkpoint(path, 2):
        epoch, start = _java_int(epoch_text), _java_int(start_text, 64)
        if epoch is None or start is None:
            raise MalformedLogDirFileError(
                str(path),
                f"malformed entry '{epoch_text} {start_text}' (expected 'epoch startOffset', both integers)",
                line=lineno,
            )
        out.append((epoch, start))
    return out


def leader_epoch_entries(partition_dir: str | Path) -> list[tuple[int, int]]:
    """(epoch, start offset) entries of a partition's leader-epoch-checkpoint; [] if it has none."""
    return read_leader_epoch_checkpoint(Path(partition_dir) / LEADER_EPOCH_CHECKPOINT)


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
