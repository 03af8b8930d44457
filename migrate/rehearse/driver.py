"""A canary-broker rehearsal (issue 10): migrate one broker's data, prove it right, roll back, prove the originals came
back byte for byte, and time every step to size the cluster's maintenance window. Kafka's own upgrade plan for the
message-format change (KIP-32) starts with one canary broker and rolls it back if anything goes wrong; this is that
rehearsal, offline.

The steps, in order (``copy`` only with ``--on-copy``)::

    fingerprint   every file and directory under the log dirs: path, kind, size, mtime, mode, inode, sha256
    copy          the log dirs copied into DIR: segments as hard links (else reflinks, else plain copies), the
                  broker's small files (checkpoints, meta.properties, .lock, ...) always as plain copies; the copy is
                  fingerprinted and checked against the source
    plan-check    ``plan --check``: every entry read, every CRC checked; a refusal names the file and byte position
    baseline      Apache Kafka's own reader (the oracle) and kafka-python read every partition before anything changes
    execute       the pipeline's execute
    verify        our verifier, an independent scan, the oracle and kafka-python on the live files
    rollback      the pipeline's rollback (refused over live files changed after the swap unless --force)
    compare       a second fingerprint, which must equal the first exactly (on a copy, the source's too)

After a failure the rehearsal still puts the data back: a failed execute or verify is rolled back, and ``compare``
always runs, so the report says whether the broker's files are as they were. The rehearsal's own progress lives in a
small JSON state file beside the report, written atomically after every step: a crash or Ctrl-C leaves a state
``rehearse --resume`` finishes (the pipeline's verbs themselves resume after a crash).

Everything here is engine-free: the command hands in a factory for the engine execute, verify and rollback run on.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import fcntl
import hashlib
import json
import mmap
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate import __version__, pipeline
from migrate.codec import from_json, to_json
from migrate.compaction.pass_one import CompactionRule
from migrate.engines import Engine
from migrate.errors import MigrateError
from migrate.kafka.layout import inspect_log_dir, validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.model import (
    DEFAULT_RANGE_BYTES,
    ConvertOptions,
    LeaveReport,
    LogDirPhase,
    PartitionState,
    PartitionStatus,
    Plan,
    SegmentTotals,
    StageError,
)
from migrate.planning.plan import PlanRefusedError, PlanRequest, build_plan, load_plan, write_plan
from migrate.reports.scan import scan_log_dirs
from migrate.run import faults
from migrate.run.workspace import fsync_dir, sync_filesystem
from migrate.units import human_bytes, parse_data_bytes

REHEARSAL_VERSION = 1
# hard-linked into a copy: the migration never writes into them, it renames over them (and a running broker, which
# would append to them, is refused); the small files (checkpoints, .lock, meta.properties, ...) are plain copies
COPY_LINK_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
COPY_MARKER = ".kafka-log-migrate-rehearsal-copy"
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# errors that mean "this filesystem cannot link/clone here", so the next method is tried; anything else is real
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EACCES}
_NO_CLONE = {errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EBADF}
MAX_CHANGES_LISTED = 200
READER_CHUNK = 200  # partition dirs per oracle call: a broker's 10^5 partitions would overflow ARG_MAX in one
SMALL_REHEARSAL_BYTES = 1 << 30
DEFAULT_ORACLE = Path(__file__).resolve().parent.parent.parent / "shared" / "oracle" / "oracle"


class StepStatus(str, enum.Enum):
    RUNNING = "running"  # only ever seen in the state file of a process that died during the step
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"  # Ctrl-C

    def __str__(self) -> str:
        return self.value


class StepFailed(MigrateError):
    """A step ran and did not pass: the message says what, where, and what to do."""


# --- the records --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileFingerprint:
    path: str  # relative to the fingerprinted root; "." is the root itself
    kind: str  # "file", "dir", "symlink" or "other"
    size: int
    mtime_ns: int
    mode: int
    inode: int
    sha256: str = ""  # files (and symlinks to files): of the content
    target: str = ""  # symlinks: where they point
    followed: str = ""  # symlinks: the kind they lead to ("dir", "file"; "" if dangling); size, mtime, mode are its


@dataclass(frozen=True)
class TreeFingerprint:
    root: str
    taken: str
    files: int
    dirs: int
    bytes: int
    digest: str  # sha256 over every entry: two fingerprints with one digest are identical
    entries: tuple[FileFingerprint, ...]


@dataclass(frozen=True)
class FingerprintChange:
    path: str
    change: str  # "added", "removed", "kind", "size", "content", "mtime", "mode", "inode", "target"
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class FingerprintComparison:
    what: str  # "rehearsed log dir", "canary log dir (source of the copy)", "copy against its source"
    before_root: str
    after_root: str
    identical: bool
    entries_before: int
    entries_after: int
    before_digest: str
    after_digest: str
    total_changes: int
    changes: tuple[FingerprintChange, ...]  # the first MAX_CHANGES_LISTED


@dataclass(frozen=True)
class CopiedLogDir:
    source: str
    copy: str
    files: int
    bytes: int
    segment_methods: dict[str, int]  # segment files (.log, .index, ...) by method: hardlink, reflink, copy
    other_methods: dict[str, int]  # the broker's small files: always plain copies
    dereferenced_symlinks: tuple[str, ...] = ()  # copied as what they point to, so nothing of the copy leads back


@dataclass(frozen=True)
class CopyReport:
    dir: str
    method: str  # in words, for the operator: "hard links for segment files, plain copies for the other files"
    log_dirs: tuple[CopiedLogDir, ...]
    fidelity: tuple[FingerprintComparison, ...]  # each copy against its source, inodes aside


@dataclass(frozen=True)
class PlanSummary:
    plan_id: str
    path: str
    partitions: int
    segments: int
    bytes: int
    estimated_output_bytes: int
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refusal:
    step: str
    message: str
    file: str | None = None
    position: int | None = None
    offset: int | None = None


@dataclass(frozen=True)
class PartitionDigest:
    """One partition as a reader sees it: the oracle's canonical record digests (README of shared/oracle)."""

    path: str
    records: int
    sha256: str
    sha256_ts: str
    magics: dict[str, int]
    valid: bool
    error: str = ""


@dataclass(frozen=True)
class ReaderVerdict:
    reader: str
    stage: str  # "baseline" (the originals) or "verify" (the live files after execute)
    available: bool
    ok: bool | None  # None when not available
    seconds: float
    partitions: int
    detail: str
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ExecuteSummary:
    plan_id: str
    engine: str
    ok: bool
    totals: SegmentTotals
    stage_seconds: dict[str, float]
    partitions: int
    migrated: int
    unmigrated: tuple[PartitionStatus, ...] = ()
    errors: tuple[StageError, ...] = ()
    accelerator: str = ""


@dataclass(frozen=True)
class Growth:
    bytes_in: int
    bytes_out: int
    growth_bytes: int
    growth_ratio: float | None
    estimated_output_bytes: int  # the plan's estimate, for comparison
    held_until_finalize_bytes: int  # the originals stay as hard links: this much more disk until finalize


@dataclass(frozen=True)
class BrokerBytes:
    broker: str
    bytes: int


@dataclass(frozen=True)
class StepRate:
    step: str
    bytes: int
    seconds: float
    bytes_per_second: float | None
    representative: bool = True
    note: str = ""


@dataclass(frozen=True)
class BrokerWindow:
    broker: str
    bytes: int
    seconds_by_step: dict[str, float]
    window_seconds: float  # the window's steps one after the other, on this broker
    rollback_seconds: float | None


@dataclass(frozen=True)
class Projection:
    basis: str
    window_steps: tuple[str, ...]
    rates: tuple[StepRate, ...]
    brokers: tuple[BrokerWindow, ...]
    cluster_parallel_seconds: float | None  # every broker at once: the slowest broker's window
    cluster_serial_seconds: float | None  # one broker after the other
    caveats: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepRecord:
    name: str
    status: StepStatus
    started: str = ""
    seconds: float = 0.0  # wall time of the last attempt
    attempts: int = 1
    bytes: int = 0  # input bytes the step worked through: the basis of its throughput
    bytes_per_second: float | None = None
    message: str = ""


@dataclass(frozen=True)
class RehearsalConfig:
    log_dirs: tuple[str, ...]  # the canary's log dirs, resolved
    on_copy: str | None = None
    options: ConvertOptions = field(default_factory=ConvertOptions)
    topics: str | None = None
    leader_epoch: int | None = None
    allow_unclean: bool = False
    task_bytes: int = 64 << 20
    task_segments: int = 256
    free_bytes_cap: int | None = None
    compact: tuple[CompactionRule, ...] = ()  # plan --compact, as for `plan`
    drop_tombstones_older_than_ms: int | None = None
    compact_memory_limit: int | None = None
    range_bytes: int | None = DEFAULT_RANGE_BYTES  # plan --range-bytes
    oracle: str = ""  # path of shared/oracle/oracle; "" for none
    independent_reader: str = "kafka-python"  # or "none"
    cluster: tuple[BrokerBytes, ...] = ()
    force: bool = False


@dataclass
class RehearsalState:
    """The rehearsal's progress: written atomically after every step, read by ``rehearse --resume``."""

    version: int
    id: str
    tool: str
    host: str
    started: str
    config: RehearsalConfig
    report_path: str
    plan_path: str
    targets: tuple[str, ...] = ()  # the log dirs rehearsed on: the canary's own, or their copies
    steps: tuple[StepRecord, ...] = ()
    events: tuple[str, ...] = ()
    source_before: dict[str, TreeFingerprint] = field(default_factory=dict)
    target_before: dict[str, TreeFingerprint] = field(default_factory=dict)
    copy: CopyReport | None = None
    plan: PlanSummary | None = None
    refusals: tuple[Refusal, ...] = ()
    baseline_oracle: dict[str, PartitionDigest] = field(default_factory=dict)
    baseline_independent: dict[str, PartitionDigest] = field(default_factory=dict)
    readers: tuple[ReaderVerdict, ...] = ()
    execute: ExecuteSummary | None = None
    growth: Growth | None = None
    verify_seconds: float = 0.0  # our verifier alone (the window's verify; the other readers are the rehearsal's)
    rollback: LeaveReport | None = None
    comparisons: tuple[FingerprintComparison, ...] = ()
    engine: str = ""
    engine_start_seconds: float = 0.0

    def step(self, name: str) -> StepRecord | None:
        return next((s for s in self.steps if s.name == name), None)

    def set_step(self, record: StepRecord) -> None:
        self.steps = (*(s for s in self.steps if s.name != record.name), record)
        order = step_names(self.config)
        self.steps = tuple(sorted(self.steps, key=lambda s: order.index(s.name)))

    def event(self, text: str) -> None:
        self.events = (*self.events, f"{_now()} {text}")


@dataclass(frozen=True)
class RehearsalReport:
    version: int
    tool: str
    id: str
    ok: bool
    verdict: str  # one line: PASSED, or FAILED/INCOMPLETE with the first failing step named
    first_failing_step: str | None
    next_steps: str
    host: str
    started: str
    updated: str
    log_dirs: tuple[str, ...]  # the canary's
    rehearsed_on: tuple[str, ...]  # the canary's own, or the copies
    report_path: str
    state_path: str
    plan_path: str
    plan: PlanSummary | None
    engine: str
    engine_start_seconds: float
    steps: tuple[StepRecord, ...]
    copy: CopyReport | None
    growth: Growth | None
    execute: ExecuteSummary | None
    refusals: tuple[Refusal, ...]
    readers: tuple[ReaderVerdict, ...]
    oracle: str  # the oracle's verdict in one line
    rollback: LeaveReport | None
    fingerprints: tuple[FingerprintComparison, ...]
    projection: Projection | None
    events: tuple[str, ...]
    html_report: str | None = None


def step_names(config: RehearsalConfig) -> list[str]:
    copy = ["copy"] if config.on_copy else []
    return ["fingerprint", *copy, "plan-check", "baseline", "execute", "verify", "rollback", "compare"]


# --- small helpers ------------------------------------------------------------------------------------------------


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse_cluster_bytes(text: str) -> tuple[BrokerBytes, ...]:
    """``1:120G,2:118G``: each broker's bytes to migrate (``scan --json`` prints them as summary.legacyBytes)."""
    out = []
    for item in text.split(","):
        broker, sep, size = item.strip().partition(":")
        if not sep or not broker.strip():
            raise ValueError(f"{item!r}: expected BROKER:BYTES, e.g. 1:120G")
        out.append(BrokerBytes(broker.strip(), parse_data_bytes(size)))
    names = [b.broker for b in out]
    if len(set(names)) != len(names):
        raise ValueError(f"a broker is listed twice in {text!r}")
    return tuple(out)


def write_atomically(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    fsync_dir(path.parent)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# --- fingerprints -------------------------------------------------------------------------------------------------


def _sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fingerprint_tree(root: str | Path) -> TreeFingerprint:
    """Every entry under ``root`` and root itself. Symlinks are recorded as links and followed (a partition dir may
    be a symlink onto another disk, and its files are what Kafka reads), each directory once."""
    root = Path(root)
    entries: list[FileFingerprint] = []
    seen_dirs: set[tuple[int, int]] = set()

    def add(rel: str, path: Path) -> None:
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            raise MigrateError(
                f"{path} disappeared while it was being fingerprinted: something is using this log dir. Stop the "
                "broker (and any other tool working on it) and rehearse again."
            ) from None
        link = os.readlink(path) if stat.S_ISLNK(lst.st_mode) else ""
        try:
            st = os.stat(path) if link else lst
        except FileNotFoundError:
            entries.append(FileFingerprint(rel, "symlink", 0, lst.st_mtime_ns, lst.st_mode, lst.st_ino, "", link))
            return
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
        digest = _sha256_file(path) if kind == "file" else ""
        size = st.st_size if kind == "file" else 0
        if link:
            entries.append(
                FileFingerprint(rel, "symlink", size, st.st_mtime_ns, st.st_mode, lst.st_ino, digest, link, kind)
            )
        else:
            entries.append(FileFingerprint(rel, kind, size, st.st_mtime_ns, st.st_mode, st.st_ino, digest))
        if kind == "dir" and (st.st_dev, st.st_ino) not in seen_dirs:
            seen_dirs.add((st.st_dev, st.st_ino))
            with os.scandir(path) as it:
                names = sorted(e.name for e in it)
            for name in names:
                add(name if rel == "." else f"{rel}/{name}", path / name)

    add(".", root)
    entries.sort(key=lambda e: e.path)
    body = json.dumps([dataclasses.astuple(e) for e in entries], separators=(",", ":")).encode()
    return TreeFingerprint(
        root=str(root),
        taken=_now(),
        files=sum(1 for e in entries if e.kind == "file"),
        dirs=sum(1 for e in entries if e.kind == "dir"),
        bytes=sum(e.size for e in entries if e.kind == "file"),
        digest=hashlib.sha256(body).hexdigest(),
        entries=tuple(entries),
    )


def compare_fingerprints(
    what: str, before: TreeFingerprint, after: TreeFingerprint, *, inodes: bool = True
) -> FingerprintComparison:
    """Every difference between two fingerprints; ``inodes=False`` compares a copy with its source."""
    old = {e.path: e for e in before.entries}
    new = {e.path: e for e in after.entries}
    changes: list[FingerprintChange] = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a is None:
            assert b is not None
            changes.append(FingerprintChange(path, "added", "", f"{b.kind}, {b.size} bytes"))
            continue
        if b is None:
            changes.append(FingerprintChange(path, "removed", f"{a.kind}, {a.size} bytes", ""))
            continue
        if a.kind != b.kind:
            changes.append(FingerprintChange(path, "kind", a.kind, b.kind))
            continue
        if a.size != b.size:
            changes.append(FingerprintChange(path, "size", str(a.size), str(b.size)))
        elif a.sha256 != b.sha256:
            changes.append(FingerprintChange(path, "content", a.sha256, b.sha256))
        if a.mtime_ns != b.mtime_ns:
            changes.append(FingerprintChange(path, "mtime", str(a.mtime_ns), str(b.mtime_ns)))
        if a.mode != b.mode:
            changes.append(FingerprintChange(path, "mode", oct(a.mode), oct(b.mode)))
        if a.target != b.target:
            changes.append(FingerprintChange(path, "target", a.target, b.target))
        if inodes and a.inode != b.inode:
            changes.append(FingerprintChange(path, "inode", str(a.inode), str(b.inode)))
    return FingerprintComparison(
        what=what,
        before_root=before.root,
        after_root=after.root,
        identical=not changes,
        entries_before=len(before.entries),
        entries_after=len(after.entries),
        before_digest=before.digest,
        after_digest=after.digest,
        total_changes=len(changes),
        changes=tuple(changes[:MAX_CHANGES_LISTED]),
    )


def dereferenced(fp: TreeFingerprint) -> TreeFingerprint:
    """The tree as a copy holds it: what each symlink leads to as a real directory or file, not the link itself."""
    entries = tuple(
        dataclasses.replace(e, kind=e.followed, target="", followed="") if e.kind == "symlink" and e.followed else e
        for e in fp.entries
    )
    return dataclasses.replace(fp, entries=entries)


# --- the copy -----------------------------------------------------------------------------------------------------


def copy_targets(log_dirs: Iterable[str], dest: str | Path) -> list[Path]:
    """Where each log dir's copy goes: DIR/<its name>, numbered when two log dirs share a name."""
    log_dirs = list(log_dirs)
    names = [Path(d).name for d in log_dirs]
    dest = Path(dest)
    if len(set(names)) == len(names):
        return [dest / n for n in names]
    return [dest / f"{i}-{n}" for i, n in enumerate(names)]


def _reflink(src: Path, dst: Path) -> bool:
    """A copy-on-write clone (FICLONE, what ``cp --reflink=always`` does): True if the filesystem made one."""
    try:
        with open(src, "rb") as s, open(dst, "xb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
    except OSError as exc:
        dst.unlink(missing_ok=True)
        if exc.errno in _NO_CLONE:
            return False
        raise
    shutil.copystat(src, dst)
    return True


class _Copier:
    """Copies one log dir; remembers which methods this filesystem refused so it does not retry them per file."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.segment_methods: Counter[str] = Counter()
        self.other_methods: Counter[str] = Counter()
        self.files = 0
        self.bytes = 0
        self.dereferenced: list[str] = []

    def file(self, src: Path, dst: Path) -> None:
        faults.point("rehearse:copy-file")
        size = os.stat(src).st_size
        if src.name.endswith(COPY_LINK_SUFFIXES):
            self.segment_methods[self._segment(src, dst)] += 1
        else:
            shutil.copy2(src, dst)  # a broker rewrites these in place: never share their inodes
            self.other_methods["copy"] += 1
        self.files += 1
        self.bytes += size

    def _segment(self, src: Path, dst: Path) -> str:
        if "hardlink" not in self.refused:
            try:
                os.link(src, dst, follow_symlinks=True)
                return "hardlink"
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                self.refused.add("hardlink")
        if "reflink" not in self.refused:
            if _reflink(src, dst):
                return "reflink"
            self.refused.add("reflink")
        shutil.copy2(src, dst)
        return "copy"

    def tree(self, src: Path, dst: Path, rel: str = ".") -> None:
        os.mkdir(dst)
        with os.scandir(src) as it:
            children = sorted(it, key=lambda e: e.name)
        for entry in children:
            child_rel = entry.name if rel == "." else f"{rel}/{entry.name}"
            s, d = src / entry.name, dst / entry.name
            if entry.is_symlink():
                self.dereferenced.append(child_rel)
            if entry.is_dir(follow_symlinks=True):
                self.tree(s, d, child_rel)
            elif entry.is_file(follow_symlinks=True):
                self.file(s, d)
            # sockets and fifos have no place in a log dir and nothing to copy
        shutil.copystat(src, dst)  # last: filling the directory changed its mtime


def copy_log_dir(source: str | Path, copy: str | Path) -> CopiedLogDir:
    copier = _Copier()
    copier.tree(Path(source).resolve(), Path(copy))
    sync_filesystem(copy)  # the copy is the rehearsal's "before": a power cut must not leave it half written
    fsync_dir(Path(copy).parent)
    return CopiedLogDir(
        source=str(source),
        copy=str(copy),
        files=copier.files,
        bytes=copier.bytes,
        segment_methods=dict(sorted(copier.segment_methods.items())),
        other_methods=dict(sorted(copier.other_methods.items())),
        dereferenced_symlinks=tuple(copier.dereferenced),
    )


def copy_method_words(copies: Iterable[CopiedLogDir]) -> str:
    seg: Counter[str] = Counter()
    other: Counter[str] = Counter()
    for c in copies:
        seg.update(c.segment_methods)
        other.update(c.other_methods)
    words = {"hardlink": "hard links", "reflink": "copy-on-write reflinks", "copy": "plain copies"}

    def describe(counts: Counter[str]) -> str:
        if not counts:
            return "none"
        return " and ".join(f"{words[m]} ({n})" for m, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    return f"segment files: {describe(seg)}; the broker's other files: {describe(other)}"


# --- readers: Apache Kafka's own (the oracle) and kafka-python ----------------------------------------------------


class ReaderUnavailable(Exception):
    """The reader cannot run here (no Java, no oracle, no kafka-python): reported as "not available"."""


def partition_dirs(log_dirs: Iterable[str]) -> list[Path]:
    out = []
    for d in log_dirs:
        layout = inspect_log_dir(d)
        out += [p.path for p in (*layout.partitions, *layout.future)]
    return sorted(out)


def oracle_problem(oracle: str) -> str | None:
    """Why the oracle cannot run here, or None."""
    if not oracle:
        return "not available: no oracle given (--oracle none)"
    if not os.access(oracle, os.X_OK):
        return f"not available: {oracle} is missing or not executable (give --oracle PATH to ../shared/oracle/oracle)"
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if missing:
        return f"not available: {' and '.join(missing)} not on the PATH (the oracle needs Java 17+)"
    return None


def oracle_digests(oracle: str, dirs: list[Path]) -> dict[str, PartitionDigest]:
    """``oracle dump --summary`` of every partition dir: Apache Kafka's FileRecords reading each one."""
    out: dict[str, PartitionDigest] = {}
    for i in range(0, len(dirs), READER_CHUNK):
        chunk = [str(d) for d in dirs[i : i + READER_CHUNK]]
        proc = subprocess.run([oracle, "dump", "--summary", *chunk], capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise ReaderUnavailable(f"the oracle failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            out[d["path"]] = PartitionDigest(
                path=d["path"],
                records=int(d["records"]),
                sha256=d["sha256"],
                sha256_ts=d["sha256_ts"],
                magics={str(k): int(v) for k, v in d["magics"].items()},
                valid=bool(d["valid"]),
                error="; ".join(d.get("errors") or [])[:1000],
            )
    missing = [d for d in map(str, dirs) if d not in out]
    if missing:
        raise ReaderUnavailable(f"the oracle printed no summary for {missing[0]}")
    return out


def kafka_python_version() -> str:
    try:
        import kafka
    except ImportError:
        raise ReaderUnavailable("not available: kafka-python is not installed (pip install kafka-python)") from None
    return f"kafka-python {getattr(kafka, '__version__', '?')}"


def _nullable(b: Any) -> bytes:
    return b"\x01" if b is None else b"\x00" + struct.pack(">i", len(b)) + bytes(b)


def kafka_python_digest(partition: Path) -> PartitionDigest:
    """kafka-python's view of a partition, hashed the oracle's way (offset, key, value, headers; ``_ts`` with the
    timestamp), every batch CRC and every legacy inner message CRC checked."""
    view = _KafkaPythonView()
    for log in sorted(partition.glob("*.log")):  # 20-digit names: name order is offset order
        if log.stat().st_size == 0:
            continue
        with open(log, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view.read(log, data)  # returns with no view of ``data`` left, so the map can close
    return PartitionDigest(
        path=str(partition),
        records=view.records,
        sha256=view.h.hexdigest(),
        sha256_ts=view.hts.hexdigest(),
        magics=dict(sorted(view.magics.items())),
        valid=not view.problems,
        error="; ".join(view.problems[:5]),
    )


class _KafkaPythonView:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.hts = hashlib.sha256()
        self.records = 0
        self.magics: Counter[str] = Counter()
        self.problems: list[str] = []

    def read(self, log: Path, data: mmap.mmap) -> None:
        from kafka.record import MemoryRecords
        from kafka.record.legacy_records import LegacyRecordBatch

        memory = MemoryRecords(data)
        position = 0
        problem = ""
        try:
            while memory.has_next():
                batch = memory.next_batch()
                self.magics[str(batch.magic)] += 1
                if not batch.validate_crc():
                    self.problems.append(f"{log}: the batch at byte position {position} fails its CRC")
                legacy = isinstance(batch, LegacyRecordBatch)
                for r in batch:
                    if legacy and not r.validate_crc():
                        self.problems.append(f"{log}: offset {r.offset} fails its CRC (byte position {position})")
                    head = struct.pack(">q", r.offset)
                    ts = struct.pack(">q", -1 if r.timestamp is None else r.timestamp)
                    body = _nullable(r.key) + _nullable(r.value) + struct.pack(">i", len(r.headers))
                    for name, value in r.headers:
                        raw = name.encode()
                        body += struct.pack(">i", len(raw)) + raw + _nullable(value)
                    self.h.update(head + body)
                    self.hts.update(head + ts + body)
                    self.records += 1
                position += 12 + struct.unpack_from(">i", data, position + 8)[0]
            trailing = len(data) - memory.valid_bytes()
            if trailing:
                problem = f"{log}: {trailing} bytes after the last complete batch (byte position {position})"
        except Exception as exc:  # kafka-python's errors share no base class: any of them is a failed read
            problem = f"{log}: kafka-python cannot read on at byte position {position}: {exc}"
        if problem:
            self.problems.append(problem)


def judge_after(
    reader: str,
    before: dict[str, PartitionDigest],
    after: dict[str, PartitionDigest],
    planned: set[str],
    options: ConvertOptions,
) -> list[str]:
    """What a reader found wrong with the live data after execute, against its view of the originals: planned
    partitions hold the same records, all in the target format and valid; the others are exactly as they were."""
    problems = []
    for path, old in sorted(before.items()):
        new = after.get(path)
        if new is None:
            problems.append(f"{path}: {reader} could not read it after execute")
            continue
        if new.sha256 != old.sha256 or new.records != old.records:
            problems.append(
                f"{path}: {reader} reads different records after execute ({new.records} records, sha256 "
                f"{new.sha256[:16]}, originally {old.records} records, sha256 {old.sha256[:16]})"
            )
        # v0 records have no timestamp; --timestamps mtime gives them one, so only partitions without v0 keep sha256_ts
        keeps_times = options.timestamps.value == "none" or not old.magics.get("0")
        if keeps_times and new.sha256_ts != old.sha256_ts:
            problems.append(f"{path}: {reader} reads different timestamps after execute")
        if path in planned:
            if not new.valid:
                problems.append(f"{path}: {reader} finds it invalid after execute: {new.error}")
            below = sorted(m for m in new.magics if int(m) < options.target_magic)
            if below:
                problems.append(f"{path}: {reader} still sees message format(s) v{', v'.join(below)} after execute")
        elif new.valid != old.valid:
            problems.append(f"{path}: was not planned, yet {reader} judges it differently after execute")
    return problems


# --- the projection -----------------------------------------------------------------------------------------------

WINDOW_STEPS = ("plan-check", "execute", "verify")


def project(state: RehearsalState) -> Projection | None:
    """From the canary's measured throughput to every broker's window: brokers in parallel take the slowest
    broker's window, one after the other the sum."""
    passed = [(rec := state.step(s)) is not None and rec.status == StepStatus.PASSED for s in WINDOW_STEPS]
    if state.plan is None or not all(passed):
        return None  # a window from steps that did not pass would be a guess presented as a measurement
    basis_bytes = state.plan.bytes
    rates: list[StepRate] = []
    caveats: list[str] = []
    for name in (*WINDOW_STEPS, "rollback"):
        rec = state.step(name)
        if rec is None or rec.status != StepStatus.PASSED:
            continue
        seconds = state.verify_seconds if name == "verify" else rec.seconds
        rate = basis_bytes / seconds if seconds > 0 and basis_bytes else None
        representative = rec.attempts == 1
        note = ""
        if not representative:
            note = f"{name} was interrupted and resumed: its time covers only the resumed part"
            caveats.append(f"{note}; rehearse again without interruption for a usable figure.")
        if name == "verify":
            note = "our verifier alone; the oracle and kafka-python are the rehearsal's extra checks"
        rates.append(StepRate(name, basis_bytes, round(seconds, 3), rate, representative, note))
    caveats.append(
        "Throughput is bytes of planned legacy segments per wall second on this broker with this engine; give each "
        "broker's legacy bytes (`kafka-log-migrate scan --json`, summary.legacyBytes) to --cluster-bytes."
    )
    caveats.append("Rollback (and the swap inside execute) scale with the number of files more than with bytes.")
    if basis_bytes < SMALL_REHEARSAL_BYTES:
        caveats.append(
            f"Measured on {human_bytes(basis_bytes)} only: fixed costs (engine start-up "
            f"{state.engine_start_seconds:.1f} s, per-step overheads) dominate, so larger brokers will run faster per "
            "byte than projected. Rehearse on a broker holding at least a few GB for a tight estimate."
        )
    by_step = {r.step: r for r in rates}
    brokers = []
    canary = BrokerBytes("canary (measured)", basis_bytes)
    for b in (canary, *state.config.cluster):
        seconds = {
            s: round(b.bytes / by_step[s].bytes_per_second, 3)
            for s in WINDOW_STEPS
            if s in by_step and by_step[s].bytes_per_second
        }
        rollback = by_step.get("rollback")
        brokers.append(
            BrokerWindow(
                broker=b.broker,
                bytes=b.bytes,
                seconds_by_step=seconds,
                window_seconds=round(sum(seconds.values()), 3),
                rollback_seconds=round(b.bytes / rollback.bytes_per_second, 3)
                if rollback and rollback.bytes_per_second
                else None,
            )
        )
    cluster = brokers[1:]
    if not cluster:
        caveats.append("No cluster given: pass --cluster-bytes 1:120G,2:118G or --broker-bytes N --brokers K.")
    return Projection(
        basis=f"{human_bytes(basis_bytes)} of legacy segments on this broker ({state.engine or 'no'} engine)",
        window_steps=WINDOW_STEPS,
        rates=tuple(rates),
        brokers=tuple(brokers),
        cluster_parallel_seconds=max((b.window_seconds for b in cluster), default=None),
        cluster_serial_seconds=round(sum(b.window_seconds for b in cluster), 3) if cluster else None,
        caveats=tuple(caveats),
    )


# --- refusals -----------------------------------------------------------------------------------------------------

_PATH_RE = re.compile(r"(/[^\s,():]+)")
_POSITION_RE = re.compile(r"byte position (\d+)")
_OFFSET_RE = re.compile(r"byte position \d+, offset (\d+)")


def refusal_from_text(step: str, text: str) -> Refusal:
    """A refusal message (``plan`` lists them as text) with its file and byte position picked out."""
    path = _PATH_RE.search(text)
    position = _POSITION_RE.search(text)
    offset = _OFFSET_RE.search(text)
    return Refusal(
        step=step,
        message=text,
        file=path.group(1) if path else None,
        position=int(position.group(1)) if position else None,
        offset=int(offset.group(1)) if offset else None,
    )


def plan_refusals(exc: PlanRefusedError) -> list[Refusal]:
    lines = str(exc).split("\n  - ")[1:] or [str(exc)]
    return [refusal_from_text("plan-check", line.strip()) for line in lines]


# --- the state file and the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RehearsalPaths:
    report: Path
    state: Path
    plan: Path
    lock: Path

    @classmethod
    def beside(cls, report: str | Path) -> RehearsalPaths:
        report = Path(report).resolve()
        base = str(report.with_suffix("")) if report.suffix == ".json" else str(report)
        return cls(report, Path(base + ".state.json"), Path(base + ".plan.json"), Path(base + ".lock"))


def load_state(path: Path) -> RehearsalState:
    from migrate.errors import ModelError

    try:
        data = json.loads(path.read_text())
        return from_json(RehearsalState, data, "rehearsal state")
    except (OSError, ValueError, ModelError) as exc:
        raise MigrateError(
            f"{path}: cannot read the rehearsal state ({exc}). If the rehearsal's data was rolled back (check with "
            "`kafka-log-migrate status --plan` on its plan file), delete this file and rehearse again."
        ) from exc


def save_state(state: RehearsalState, paths: RehearsalPaths) -> None:
    write_atomically(paths.state, json.dumps(to_json(state), separators=(",", ":")) + "\n")


def finished(state: RehearsalState) -> bool:
    """The rehearsal needs nothing more: no step was cut short and the data is back (or was never changed)."""
    if any(s.status in (StepStatus.RUNNING, StepStatus.INTERRUPTED) for s in state.steps):
        return False
    rollback = state.step("rollback")
    if rollback is not None and rollback.status == StepStatus.FAILED:
        return False
    last = step_names(state.config)[-1]
    return state.step(last) is not None


def build_report(state: RehearsalState, paths: RehearsalPaths) -> RehearsalReport:
    names = step_names(state.config)
    ok = all((s := state.step(n)) is not None and s.status == StepStatus.PASSED for n in names)
    bad = next((s for s in state.steps if s.status not in (StepStatus.PASSED, StepStatus.SKIPPED)), None)
    plan_cmd = f"kafka-log-migrate rollback --plan {paths.plan}"
    resume_cmd = f"kafka-log-migrate rehearse --resume -o {paths.report}"
    if ok:
        verdict = "PASSED: every step passed and the rollback left every file byte-identical (mtimes included)"
        next_steps = (
            "Size the maintenance window from the projection, then migrate the cluster broker by broker (`plan`, "
            "`execute`, `verify`, and `finalize` once the brokers run well)."
        )
        if state.copy is not None:
            next_steps += (
                f" The copy in {state.copy.dir} can be deleted (rm -r; its hard links do not touch the canary)."
            )
    elif bad is None:
        missing = next(n for n in names if state.step(n) is None)
        verdict = f"INCOMPLETE: step {missing} has not run yet"
        next_steps = f"Continue with `{resume_cmd}`."
    elif bad.status in (StepStatus.RUNNING, StepStatus.INTERRUPTED):
        how = (
            "was interrupted (Ctrl-C)" if bad.status == StepStatus.INTERRUPTED else "was running when the process ended"
        )
        verdict = f"INCOMPLETE: step {bad.name} {how}"
        next_steps = (
            f"Finish the rehearsal with `{resume_cmd}` (it resumes {bad.name}, then verifies, rolls back and compares "
            f"fingerprints)"
            + (f", or put the originals back now with `{plan_cmd}`." if state.plan is not None else ".")
        )
    else:
        verdict = f"FAILED at step {bad.name}: {bad.message}"
        rollback = state.step("rollback")
        if rollback is not None and rollback.status == StepStatus.FAILED:
            next_steps = (
                f"The data is NOT back as it was. Read the rollback step above; once the cause is fixed run "
                f"`{resume_cmd}` (add --force to put the originals back over changed live files), or `{plan_cmd}`."
            )
        else:
            next_steps = "The data was left as it was found (see fingerprints). Fix the cause above and rehearse again."
    projection = project(state)
    oracle = next((r for r in reversed(state.readers) if r.reader.startswith("Apache Kafka")), None)
    return RehearsalReport(
        version=REHEARSAL_VERSION,
        tool=state.tool,
        id=state.id,
        ok=ok,
        verdict=verdict,
        first_failing_step=None if ok or bad is None else bad.name,
        next_steps=next_steps,
        host=state.host,
        started=state.started,
        updated=_now(),
        log_dirs=state.config.log_dirs,
        rehearsed_on=state.targets,
        report_path=str(paths.report),
        state_path=str(paths.state),
        plan_path=str(paths.plan),
        plan=state.plan,
        engine=state.engine,
        engine_start_seconds=state.engine_start_seconds,
        steps=state.steps,
        copy=state.copy,
        growth=state.growth,
        execute=state.execute,
        refusals=state.refusals,
        readers=state.readers,
        oracle=(
            f"{oracle.stage}: {'OK' if oracle.ok else 'FAILED' if oracle.ok is False else 'not available'}: "
            f"{oracle.detail}"
            if oracle
            else "not run"
        ),
        rollback=state.rollback,
        fingerprints=state.comparisons,
        projection=projection,
        events=state.events,
    )


def render_html(report: RehearsalReport, json_path: Path) -> Path | None:
    """The HTML rehearsal report beside the JSON one: the hook for the HTML run report
    (``migrate/reports/run_report.py``, being built separately). Its contract:
    ``migrate.reports.run_report.render_rehearsal(report_json: dict) -> str`` (a whole HTML page); until a module
    offers it, no HTML is written and the JSON report says so (``html_report`` is null)."""
    try:
        from migrate.reports import run_report
    except ImportError:
        return None
    render = getattr(run_report, "render_rehearsal", None)
    if render is None:
        return None
    target = json_path.with_suffix(".html")
    write_atomically(target, render(to_json(report)))
    return target


def write_report(state: RehearsalState, paths: RehearsalPaths, html: bool = False) -> RehearsalReport:
    report = build_report(state, paths)
    if html:
        page = render_html(report, paths.report)
        report = dataclasses.replace(report, html_report=str(page) if page else None)
    write_atomically(paths.report, json.dumps(to_json(report), indent=1) + "\n")
    return report


# --- the run ------------------------------------------------------------------------------------------------------


class RehearsalLock:
    """One rehearsal per state file: an fcntl lock on ``<report>.lock`` (released by the kernel however we end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> RehearsalLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise MigrateError(
                    f"another `kafka-log-migrate rehearse` holds {self.path}: wait for it to finish, or use another "
                    "-o for a separate rehearsal."
                ) from None
            raise
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


EngineFactory = Callable[[], tuple[Engine, str]]
AfterStep = Callable[[str, RehearsalState], None]


def new_state(config: RehearsalConfig, paths: RehearsalPaths) -> RehearsalState:
    """A fresh rehearsal's state, refused where it would fingerprint its own files or copy a log dir into itself."""
    sources = [Path(d).resolve() for d in config.log_dirs]
    ours = [paths.report, paths.state, paths.plan, paths.lock, Path(f"{paths.plan}.state")]
    for d in sources:
        for p in ours:
            if _inside(p, d):
                raise MigrateError(
                    f"{p} would be inside the log dir {d}: the rehearsal fingerprints every file there and must not "
                    "find its own. Give -o a path outside the broker's log dirs."
                )
    if config.on_copy:
        dest = Path(config.on_copy).resolve()
        config = dataclasses.replace(config, on_copy=str(dest))
        for d in sources:
            if _inside(dest, d) or _inside(d, dest):
                raise MigrateError(
                    f"--on-copy {dest} and the log dir {d} contain one another; give --on-copy a directory outside "
                    "the broker's log dirs (on the same filesystem, so segment files can be hard links)."
                )
        for p in ours:
            if _inside(p, dest):
                raise MigrateError(f"{p} would be inside the copy {dest}; give -o a path outside --on-copy.")
    # one spelling of each path: the plan resolves log dirs, and readers' views are matched against it
    config = dataclasses.replace(config, log_dirs=tuple(str(d) for d in sources))
    return RehearsalState(
        version=REHEARSAL_VERSION,
        id=secrets.token_hex(6),
        tool=f"kafka-log-migrate {__version__}",
        host=socket.gethostname(),
        started=_now(),
        config=config,
        report_path=str(paths.report),
        plan_path=str(paths.plan),
    )


class Rehearsal:
    """Runs (or resumes) the steps, saving the state and the report after each."""

    def __init__(
        self,
        state: RehearsalState,
        paths: RehearsalPaths,
        engine_factory: EngineFactory,
        after_step: AfterStep | None = None,
    ) -> None:
        self.state = state
        self.paths = paths
        self.engine_factory = engine_factory
        self.after_step = after_step
        self._engine: Engine | None = None
        self._accelerator = ""

    # --- driving ------------------------------------------------------------------------------------------------

    def run(self) -> RehearsalReport:
        with RehearsalLock(self.paths.lock):
            try:
                self._run_steps()
            finally:
                if self._engine is not None:
                    self._engine.close()
                    self._engine = None
                self._save()
            return write_report(self.state, self.paths, html=True)

    def _run_steps(self) -> None:
        rerun = False
        order = step_names(self.state.config)
        for name in order:
            record = self.state.step(name)
            if record is not None and not rerun:
                if record.status == StepStatus.RUNNING:
                    self.state.event(
                        f"step {name} was running when the process ended (killed or crashed; started {record.started}, "
                        f"attempt {record.attempts}): resuming it"
                    )
                    rerun = True
                elif record.status == StepStatus.INTERRUPTED:
                    self.state.event(f"step {name} was interrupted by Ctrl-C: resuming it")
                    rerun = True
                elif record.status == StepStatus.FAILED and name == "rollback":
                    self.state.event(
                        "rollback failed last time: trying it again"
                        + (" with --force" if self.state.config.force else "")
                    )
                    rerun = True
                else:
                    continue
            why_not = self._skip_reason(name)
            if why_not:
                self.state.set_step(StepRecord(name, StepStatus.SKIPPED, _now(), message=why_not))
                self._save()
                continue
            status = self._run_step(name, record)
            if name in ("fingerprint", "copy") and status != StepStatus.PASSED:
                # nothing else can be judged without the first fingerprint or the copy: stop, changing nothing
                for rest in order[order.index(name) + 1 :]:
                    self.state.set_step(StepRecord(rest, StepStatus.SKIPPED, _now(), message=f"{name} failed"))
                self._save()
                return

    def _skip_reason(self, name: str) -> str:
        def failed(step: str) -> bool:
            rec = self.state.step(step)
            return rec is not None and rec.status != StepStatus.PASSED

        if name in ("plan-check", "baseline", "execute"):
            order = step_names(self.state.config)
            broken = next((s for s in order[: order.index(name)] if failed(s)), None)
            if broken:
                return f"not run: {broken} did not pass, so nothing was executed"
        if name == "verify" and failed("execute"):
            ex = self.state.step("execute")
            if ex is not None and ex.status == StepStatus.SKIPPED:
                return "not run: nothing was executed"
            return "not run: execute did not migrate every partition (the rollback puts them back)"
        if name == "rollback":
            ex = self.state.step("execute")
            if ex is None or ex.status == StepStatus.SKIPPED:
                return "not needed: nothing was executed"
        return ""

    def _run_step(self, name: str, previous: StepRecord | None) -> StepStatus:
        attempts = previous.attempts + 1 if previous is not None else 1
        started = _now()
        self.state.set_step(StepRecord(name, StepStatus.RUNNING, started, attempts=attempts))
        self.state.event(f"step {name} started" + (f" (attempt {attempts})" if attempts > 1 else ""))
        self._save()
        clock = time.perf_counter()
        status, message, done_bytes = StepStatus.PASSED, "", 0
        try:
            done_bytes, message = getattr(self, "_step_" + name.replace("-", "_"))()
        except MigrateError as exc:  # StepFailed included: the message is written for the operator
            status, message = StepStatus.FAILED, str(exc)
        except KeyboardInterrupt:
            seconds = round(time.perf_counter() - clock, 3)
            self.state.set_step(
                StepRecord(name, StepStatus.INTERRUPTED, started, seconds, attempts, message="interrupted by Ctrl-C")
            )
            self.state.event(f"step {name} interrupted by Ctrl-C after {seconds} s")
            self._save()
            raise
        except Exception as exc:  # a bug or an I/O error: still roll back and compare, and say what it was
            status, message = StepStatus.FAILED, f"{type(exc).__name__}: {exc}"
        seconds = round(time.perf_counter() - clock, 3)
        rate = done_bytes / seconds if done_bytes and seconds > 0 else None
        self.state.set_step(StepRecord(name, status, started, seconds, attempts, done_bytes, rate, message))
        self.state.event(
            f"step {name} {status.value} in {seconds} s" + (f": {message}" if status != StepStatus.PASSED else "")
        )
        self._save()
        faults.point(f"rehearse:after-{name}")
        if self.after_step is not None:
            self.after_step(name, self.state)
        return status

    def _save(self) -> None:
        save_state(self.state, self.paths)
        write_report(self.state, self.paths)

    def _engine_now(self) -> Engine:
        if self._engine is None:
            clock = time.perf_counter()
            self._engine, self._accelerator = self.engine_factory()
            self.state.engine = self._engine.name
            self.state.engine_start_seconds = round(time.perf_counter() - clock, 3)
        return self._engine

    def _plan(self) -> Plan:
        return load_plan(self.paths.plan)

    # --- the steps ----------------------------------------------------------------------------------------------

    def _step_fingerprint(self) -> tuple[int, str]:
        problems = [p for p in (validate_log_dir_path(d) for d in self.state.config.log_dirs) if p]
        if problems:
            raise StepFailed("; ".join(problems))
        fps = {d: fingerprint_tree(d) for d in self.state.config.log_dirs}
        self.state.source_before = fps
        if not self.state.config.on_copy:
            self.state.targets = self.state.config.log_dirs
            self.state.target_before = fps
        files = sum(f.files for f in fps.values())
        size = sum(f.bytes for f in fps.values())
        return size, f"{files} files, {sum(f.dirs for f in fps.values())} directories, {human_bytes(size)}"

    def _step_copy(self) -> tuple[int, str]:
        config = self.state.config
        assert config.on_copy
        dest = Path(config.on_copy).resolve()
        targets = copy_targets(config.log_dirs, dest)
        marker = dest / COPY_MARKER
        if marker.exists() and marker.read_text().strip() == self.state.id:
            for t in targets:  # a copy cut short by a crash: ours alone (the marker says so), so start it again
                if t.exists():
                    shutil.rmtree(t)
        elif dest.exists() and any(dest.iterdir()):
            raise StepFailed(
                f"--on-copy {dest} is not empty: the copy must not mix with other files. Give an empty or new "
                "directory on the same filesystem as the log dirs."
            )
        for d in config.log_dirs:
            holder = lock_holder(d)
            if holder is not None:
                raise StepFailed(
                    f"{d}/.lock is held{f' by process {holder}' if holder else ''}: a broker is running on the "
                    "canary, and hard-linked segments would share the files it appends to. Stop the broker cleanly, "
                    "then rehearse again."
                )
        dest.mkdir(parents=True, exist_ok=True)
        write_atomically(marker, self.state.id + "\n")
        self.state.targets = tuple(map(str, targets))
        self._save()  # the targets are known before any file exists there
        copies = [copy_log_dir(src, dst) for src, dst in zip(config.log_dirs, targets)]
        self.state.target_before = {str(t): fingerprint_tree(t) for t in targets}
        fidelity = []
        for c in copies:
            src = dereferenced(self.state.source_before[c.source])
            dst = self.state.target_before[c.copy]
            fidelity.append(compare_fingerprints("copy against its source", src, dst, inodes=False))
        self.state.copy = CopyReport(str(dest), copy_method_words(copies), tuple(copies), tuple(fidelity))
        differing = [f for f in fidelity if not f.identical]
        if differing:
            first = differing[0].changes[0]
            raise StepFailed(
                f"the copy {differing[0].after_root} differs from its source at {first.path} ({first.change}: "
                f"{first.before} -> {first.after}); was the canary's data changing while it was copied? Stop the "
                "broker and rehearse again."
            )
        size = sum(c.bytes for c in copies)
        return size, f"{sum(c.files for c in copies)} files into {dest}: {self.state.copy.method}"

    def _step_plan_check(self) -> tuple[int, str]:
        c = self.state.config
        request = PlanRequest(
            log_dirs=self.state.targets,
            options=c.options,
            topics=c.topics,
            leader_epoch=c.leader_epoch,
            allow_unclean=c.allow_unclean,
            check=True,
            task_bytes=c.task_bytes,
            task_segments=c.task_segments,
            free_bytes_cap=c.free_bytes_cap,
            compact=c.compact,
            drop_tombstones_older_than_ms=c.drop_tombstones_older_than_ms,
            compact_memory_limit=c.compact_memory_limit,
            range_bytes=c.range_bytes,
        )
        try:
            plan = build_plan(request)
        except PlanRefusedError as exc:
            refusals = plan_refusals(exc)
            self.state.refusals = (*self.state.refusals, *refusals)
            first = refusals[0]
            raise StepFailed(
                f"plan --check refused ({len(refusals)} problem{'s' if len(refusals) > 1 else ''}; nothing was "
                f"executed). First: {first.message}"
            ) from None
        write_plan(plan, self.paths.plan)
        est = plan.estimates
        self.state.plan = PlanSummary(
            plan.plan_id,
            str(self.paths.plan),
            est.partitions,
            est.segments,
            est.bytes,
            est.estimated_output_bytes,
            plan.warnings,
        )
        return est.bytes, (
            f"plan {plan.plan_id}: {est.partitions} partitions, {est.segments} segments, {human_bytes(est.bytes)}, "
            "every entry read and every CRC checked"
        )

    def _readers(
        self, stage: str
    ) -> tuple[list[ReaderVerdict], dict[str, PartitionDigest], dict[str, PartitionDigest]]:
        """Run the oracle and kafka-python over every partition dir; (verdicts so far, oracle view, kafka-python
        view). A reader that cannot run is "not available", never a failure."""
        c = self.state.config
        dirs = partition_dirs(self.state.targets)
        verdicts: list[ReaderVerdict] = []
        oracle_view: dict[str, PartitionDigest] = {}
        kp_view: dict[str, PartitionDigest] = {}
        problem = oracle_problem(c.oracle)
        name = "Apache Kafka (oracle, kafka-clients FileRecords)"
        clock = time.perf_counter()
        if problem:
            verdicts.append(ReaderVerdict(name, stage, False, None, 0.0, 0, problem))
        else:
            try:
                oracle_view = oracle_digests(c.oracle, dirs)
            except ReaderUnavailable as exc:
                if stage == "baseline":
                    verdicts.append(ReaderVerdict(name, stage, False, None, 0.0, 0, f"not available: {exc}"))
                else:
                    verdicts.append(ReaderVerdict(name, stage, True, False, 0.0, 0, str(exc), (str(exc),)))
            else:
                verdicts.append(
                    ReaderVerdict(name, stage, True, True, round(time.perf_counter() - clock, 3), len(dirs), "")
                )
        clock = time.perf_counter()
        if c.independent_reader == "none":
            verdicts.append(
                ReaderVerdict("kafka-python", stage, False, None, 0.0, 0, "not available: --independent-reader none")
            )
        else:
            try:
                kp_name = kafka_python_version()
            except ReaderUnavailable as exc:
                verdicts.append(ReaderVerdict("kafka-python", stage, False, None, 0.0, 0, str(exc)))
            else:
                kp_view = {str(d): kafka_python_digest(d) for d in dirs}
                verdicts.append(
                    ReaderVerdict(kp_name, stage, True, True, round(time.perf_counter() - clock, 3), len(dirs), "")
                )
        return verdicts, oracle_view, kp_view

    def _step_baseline(self) -> tuple[int, str]:
        verdicts, oracle_view, kp_view = self._readers("baseline")
        self.state.baseline_oracle = oracle_view
        self.state.baseline_independent = kp_view
        problems = []
        if oracle_view and kp_view:  # two independent readers must agree on the originals before they judge anything
            for path, o in sorted(oracle_view.items()):
                k = kp_view.get(path)
                if k is not None and (k.sha256 != o.sha256 or k.records != o.records):
                    problems.append(
                        f"{path}: Kafka reads {o.records} records (sha256 {o.sha256[:16]}), kafka-python {k.records} "
                        f"(sha256 {k.sha256[:16]})"
                    )
        verdicts = [
            dataclasses.replace(
                v,
                ok=not problems,
                detail=f"read {v.partitions} partitions of the originals in {v.seconds} s",
                problems=tuple(problems[:50]),
            )
            if v.available
            else v
            for v in verdicts
        ]
        self.state.readers = (*[r for r in self.state.readers if r.stage != "baseline"], *verdicts)
        if problems:
            raise StepFailed(
                f"Kafka's reader and kafka-python disagree on the originals of {len(problems)} partition(s), e.g. "
                f"{problems[0]}. Nothing was executed; inspect with `kafka-log-migrate dump --deep-iteration`."
            )
        available = [v.reader for v in verdicts if v.available]
        return (self.state.plan.bytes if self.state.plan else 0), (
            f"originals read by {', '.join(available)}" if available else "no independent reader available here"
        )

    def _step_execute(self) -> tuple[int, str]:
        plan = self._plan()
        engine = self._engine_now()
        report = pipeline.execute(plan, engine, accelerator=self._accelerator)
        t = report.totals
        unmigrated = tuple(report.unmigrated)
        self.state.execute = ExecuteSummary(
            plan_id=report.plan_id,
            engine=report.engine,
            ok=report.ok,
            totals=t,
            stage_seconds=report.stage_seconds,
            partitions=sum(len(d.partitions) for d in plan.log_dirs),
            migrated=sum(1 for d in report.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED),
            unmigrated=unmigrated[:200],
            errors=report.errors,
            accelerator=report.accelerator,
        )
        if t.bytes_in:
            self.state.growth = Growth(
                bytes_in=t.bytes_in,
                bytes_out=t.bytes_out,
                growth_bytes=t.bytes_out - t.bytes_in,
                growth_ratio=round((t.bytes_out - t.bytes_in) / t.bytes_in, 4),
                estimated_output_bytes=plan.estimates.estimated_output_bytes,
                held_until_finalize_bytes=t.bytes_out,
            )
        refusals = [
            Refusal("execute", o.problem.message, o.problem.path, o.problem.position, o.problem.offset)
            for o in report.problems
            if o.problem is not None
        ]
        refusals += [Refusal("execute", f"{e.stage} of {e.log_dir}: {e.message}") for e in report.errors]
        self.state.refusals = (*[r for r in self.state.refusals if r.step != "execute"], *refusals)
        if not report.ok:
            first = refusals[0].message if refusals else f"{len(unmigrated)} partition(s) not migrated"
            raise StepFailed(
                f"execute migrated {self.state.execute.migrated} of {self.state.execute.partitions} partitions "
                f"({t.refused} segments refused, {t.failed} failed). First: {first}"
            )
        growth = f" ({(t.bytes_out - t.bytes_in) / t.bytes_in:+.1%})" if t.bytes_in else ""
        return plan.estimates.bytes, (
            f"{t.verified} segments converted and verified, {t.records} records, {human_bytes(t.bytes_in)} -> "
            f"{human_bytes(t.bytes_out)}{growth}; every planned partition migrated"
        )

    def _step_verify(self) -> tuple[int, str]:
        plan = self._plan()
        engine = self._engine_now()
        verdicts: list[ReaderVerdict] = []
        clock = time.perf_counter()
        ours = pipeline.verify_live(plan, engine)
        self.state.verify_seconds = round(time.perf_counter() - clock, 3)
        problems = [p for c in ours.log_dirs for p in c.problems]
        problems += [f"{e.log_dir}: {e.message}" for e in ours.errors]
        problems += [f"{c.log_dir}: {p} is not migrated" for c in ours.log_dirs for p in c.unmigrated]
        checked = sum(c.checked_segments for c in ours.log_dirs)
        verdicts.append(
            ReaderVerdict(
                "kafka-log-migrate verify",
                "verify",
                True,
                ours.ok,
                self.state.verify_seconds,
                sum(len(d.partitions) for d in plan.log_dirs),
                f"{checked} live segments re-read: identity, content digest, CRCs, indexes",
                tuple(problems[:50]),
            )
        )
        clock = time.perf_counter()
        planned = {p.dir for d in plan.log_dirs for p in d.partitions}
        scan = scan_log_dirs(list(self.state.targets))
        scan_problems = []
        for broker in scan["brokers"]:
            for d in broker["logDirs"]:
                if d["error"]:
                    scan_problems.append(f"{d['logDir']}: {d['error']}")
                for p in d["partitions"]:
                    where = f"{d['logDir']}/{p['dir']}"
                    if p["error"]:
                        scan_problems.append(f"{where}: {p['error']}")
                    below = [m for m in p["batchesByMagic"] if int(m) < plan.options.target_magic]
                    if where in planned and below:
                        scan_problems.append(f"{where}: scan still finds v{', v'.join(sorted(below))} batches")
        verdicts.append(
            ReaderVerdict(
                "scan",
                "verify",
                True,
                not scan_problems,
                round(time.perf_counter() - clock, 3),
                len(planned),
                "every planned partition in the target format" if not scan_problems else "",
                tuple(scan_problems[:50]),
            )
        )
        readers, oracle_view, kp_view = self._readers("verify")
        for v in readers:
            if not v.available or v.ok is False:
                verdicts.append(v)
                continue
            before = (
                self.state.baseline_oracle if v.reader.startswith("Apache Kafka") else self.state.baseline_independent
            )
            after = oracle_view if v.reader.startswith("Apache Kafka") else kp_view
            if not before:
                verdicts.append(
                    dataclasses.replace(
                        v, available=False, ok=None, detail="not available: it could not read the originals"
                    )
                )
                continue
            found = judge_after(v.reader, before, after, planned, plan.options)
            detail = (
                f"{len(after)} partitions read in {v.seconds} s: the same records (sha256 per partition) as before "
                "execute, planned partitions all in the target format and valid"
                if not found
                else f"{len(found)} problem(s)"
            )
            verdicts.append(dataclasses.replace(v, ok=not found, detail=detail, problems=tuple(found[:50])))
        self.state.readers = (*[r for r in self.state.readers if r.stage != "verify"], *verdicts)
        failed = [v for v in verdicts if v.available and not v.ok]
        if failed:
            first = failed[0]
            raise StepFailed(
                f"{first.reader} found {len(first.problems) or 'a'} problem(s) in the migrated data, e.g. "
                f"{first.problems[0] if first.problems else first.detail}. The rollback puts the originals back."
            )
        used = ", ".join(v.reader for v in verdicts if v.available)
        return plan.estimates.bytes, f"{checked} segments; agreed by {used}"

    def _step_rollback(self) -> tuple[int, str]:
        plan = self._plan()
        engine = self._engine_now()
        report = pipeline.rollback(plan, engine, self.paths.plan, force=self.state.config.force)
        self.state.rollback = report
        if report.refused:
            self.state.refusals = (
                *[r for r in self.state.refusals if r.step != "rollback"],
                *(refusal_from_text("rollback", x) for x in report.refused),
            )
            raise StepFailed(
                f"rollback refused: {len(report.refused)} live file(s) changed after the swap, so something (a "
                f"broker?) wrote to them; nothing was put back. First: {report.refused[0]}. Stop whatever wrote them; "
                "`rehearse --resume --force` (or `rollback --force`) puts the originals back and loses those writes."
            )
        # a rollback that finished before a crash left no state in the log dir, only its archive beside the plan
        done = all(
            r.phase == LogDirPhase.ROLLED_BACK
            or (r.phase == LogDirPhase.NEW and pipeline.archive_path(self.paths.plan, r.log_dir).exists())
            for r in report.rollbacks
        )
        if report.errors or not done or len(report.rollbacks) != len(plan.log_dirs):
            why = report.errors[0].message if report.errors else "a log dir did not end rolled back"
            raise StepFailed(f"rollback did not finish: {why}. Fix the cause and run `rehearse --resume`.")
        restored = sum(len(r.restored) for r in report.rollbacks)
        forced = " (forced over changed live files)" if any(r.forced and r.changed for r in report.rollbacks) else ""
        return plan.estimates.bytes, f"{restored} partitions restored{forced}"

    def _step_compare(self) -> tuple[int, str]:
        comparisons = []
        for t in self.state.targets:
            after = fingerprint_tree(t)
            what = "rehearsed copy" if self.state.config.on_copy else "rehearsed log dir"
            comparisons.append(compare_fingerprints(what, self.state.target_before[t], after))
        if self.state.config.on_copy:
            for d in self.state.config.log_dirs:
                after = fingerprint_tree(d)
                comparisons.append(
                    compare_fingerprints("canary log dir (source of the copy)", self.state.source_before[d], after)
                )
        self.state.comparisons = tuple(comparisons)
        differing = [c for c in comparisons if not c.identical]
        if differing:
            c = differing[0]
            first = c.changes[0]
            raise StepFailed(
                f"the {c.what} {c.after_root} is not as it was: {c.total_changes} difference(s), first {first.path} "
                f"({first.change}: {first.before or '-'} -> {first.after or '-'})"
            )
        entries = sum(c.entries_after for c in comparisons)
        return 0, f"{entries} entries identical (paths, sizes, sha256, mtimes, modes, inodes)"


def start(
    config: RehearsalConfig,
    paths: RehearsalPaths,
    engine_factory: EngineFactory,
    after_step: AfterStep | None = None,
) -> RehearsalReport:
    """A new rehearsal; refused while an unfinished one is recorded at ``paths``."""
    if paths.state.exists():
        old = load_state(paths.state)
        if not finished(old):
            report = build_report(old, paths)
            raise MigrateError(
                f"an unfinished rehearsal is recorded in {paths.state} ({report.verdict}). Finish it with "
                f"`kafka-log-migrate rehearse --resume -o {paths.report}`; or, if you have rolled its data back "
                f"yourself (`kafka-log-migrate rollback --plan {paths.plan}`), delete {paths.state} and start again."
            )
    state = new_state(config, paths)
    paths.report.parent.mkdir(parents=True, exist_ok=True)
    state.event(f"rehearsal {state.id} started on {state.host}: log dirs {', '.join(config.log_dirs)}")
    return Rehearsal(state, paths, engine_factory, after_step).run()


def resume(
    paths: RehearsalPaths,
    engine_factory: EngineFactory,
    force: bool = False,
    after_step: AfterStep | None = None,
) -> RehearsalReport:
    """Continue the rehearsal recorded at ``paths`` from where it stopped (a finished one is only reported)."""
    if not paths.state.exists():
        raise MigrateError(
            f"no rehearsal state at {paths.state}: nothing to resume. Give the -o of the rehearsal to resume, or start "
            "one with `kafka-log-migrate rehearse --log-dirs ...`."
        )
    state = load_state(paths.state)
    if finished(state):
        with RehearsalLock(paths.lock):
            return write_report(state, paths, html=True)
    if force and not state.config.force:
        state.config = dataclasses.replace(state.config, force=True)
    state.event(f"resumed on {socket.gethostname()}" + (" with --force" if force else ""))
    return Rehearsal(state, paths, engine_factory, after_step).run()
