"""The run's vocabulary: states of segments, partitions and log dirs, the stages, events, a task and its outcome."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from migrate.errors import LocatedError, ProblemKind
from migrate.model.plan_tree import (
    OMIT_IF_NONE,
    ConvertOptions,
    DigestAlgorithm,
    ExchangeMethod,
    SegmentSplit,
    TailDrop,
)
from migrate.model.segment_files import NO_FILES, SegmentFiles

# --- the run's state -------------------------------------------------------------------------------------------


class SegmentState(str, enum.Enum):
    PLANNED = "planned"
    VERIFIED = "verified"  # converted into staging and re-read from disk: ready to swap
    UNCHANGED = "unchanged"  # nothing to rewrite (already in the target format, or no entries): nothing to swap
    REFUSED = "refused"  # bad input or a Kafka limit: fails its partition only
    FAILED = "failed"  # the environment failed (disk full, I/O error, permission): the run stops
    SWAPPED = "swapped"
    ROLLED_BACK = "rolled-back"

    def __str__(self) -> str:
        return self.value


class PartitionState(str, enum.Enum):
    PLANNED = "planned"
    CONVERTING = "converting"  # some segments verified, others not yet
    READY = "ready"  # every segment verified: waiting for the swap
    FAILED = "failed"  # a segment was refused or failed, or a live file changed; the partition is untouched
    SWAPPING = "swapping"  # live files may be mixed: the fence must stay up
    MIGRATED = "migrated"
    ROLLING_BACK = "rolling-back"  # live files may be mixed: the fence must stay up
    ROLLED_BACK = "rolled-back"

    def __str__(self) -> str:
        return self.value

    @property
    def mixed(self) -> bool:
        """Live files may be partly old and partly new."""
        return self in (PartitionState.SWAPPING, PartitionState.ROLLING_BACK)


class Standing(str, enum.Enum):
    """Where a partition stands by its directories alone (``migrate.run.partition.standing``): which directory is at
    its path, and where the other one is. The swap goes down this list and rollback back up it."""

    ORIGINAL = "original"  # the original directory at its path; nothing of a swap anywhere
    BUILT = "built"  # the original at its path; the new directory complete beside it, not yet moved
    IN_FENCE = "in-fence"  # the original at its path; the new directory in the fence, about to be exchanged
    OUT = "out"  # nothing at its path: both directories in the fence (two renames, between them)
    EXCHANGED = "exchanged"  # the new directory at its path; the original in the fence
    CONVERTED = "converted"  # the new directory at its path, the original kept inside it until finalize
    FINALIZED = "finalized"  # the new directory at its path, the original deleted
    GONE = "gone"  # neither directory at its path nor anywhere of ours (the broker deleted the partition)
    UNKNOWN = "unknown"  # something else at its path, or a directory of ours where it cannot be

    def __str__(self) -> str:
        return self.value

    @property
    def mixed(self) -> bool:
        """A directory of the partition is in the fence: the fence must stay up (a broker must not start)."""
        return self in (Standing.IN_FENCE, Standing.OUT, Standing.EXCHANGED)


class Fate(str, enum.Enum):
    """What became of a file of a converted partition after its swap, judged as Kafka's own operations would explain
    it (``migrate.run.partition.after``)."""

    UNCHANGED = "unchanged"  # the bytes the swap put there (an mtime moved: an index resized and trimmed back)
    APPENDED = "appended"  # the swapped bytes are still its start: the broker appended
    TRUNCATED = "truncated"  # at the log's end and shorter, or refilled since: a follower's truncation
    REPLACED = "replaced"  # another segment under its name: the log cleaner's merge (a compacted partition)
    DELETED = "deleted"  # gone: retention (before the log's start), the cleaner, or a truncation (past the log's end)
    NEW = "new"  # a file the broker made since: a roll, a snapshot, a checkpoint, an index rebuilt
    REWRITTEN = "rewritten"  # converted bytes changed where no operation of a broker explains it
    DAMAGED = "damaged"  # bytes that no longer read as Kafka reads them (a checksum fails): damage, not a write

    def __str__(self) -> str:
        return self.value

    @property
    def brokers(self) -> bool:
        """What a broker running on the converted data does: not a fault, and not the tool's to undo silently."""
        return self in (Fate.APPENDED, Fate.TRUNCATED, Fate.REPLACED, Fate.DELETED, Fate.NEW)


@dataclass(frozen=True)
class FileAfter:
    """One file of a converted partition: its fate since the swap, and what was seen, for an operator."""

    name: str
    fate: Fate
    detail: str = ""
    metadata_only: bool = False  # unchanged bytes, another mtime or inode
    # what a rollback would lose with it: records the broker wrote since the swap (appended, fetched again, rolled
    # into new segments, merged by the cleaner) that the original directory does not hold; a rewrite by an unknown
    # writer counts as such, damage to the swapped bytes does not (the original holds those records whole)
    lost_by_rollback: bool = False


@dataclass(frozen=True)
class LiveVerdict:
    """One call of a ``verify`` of the live files, as the state records it (a ``LIVE_VERIFIED`` event): its run's
    token (shared by the calls of one verify), whether it passed, and its problems' count and first line."""

    run: str
    ok: bool
    problems: int = 0
    first: str = ""


@dataclass(frozen=True)
class PartitionAfter:
    """What became of a converted partition's files after its swap."""

    partition: str
    files: tuple[FileAfter, ...]

    def of(self, *fates: Fate) -> list[FileAfter]:
        return [f for f in self.files if f.fate in fates]

    @property
    def rewritten(self) -> list[FileAfter]:
        """What stops finalize and fails verify: bytes no broker operation explains, readable or damaged."""
        return self.of(Fate.REWRITTEN, Fate.DAMAGED)

    @property
    def by_broker(self) -> list[FileAfter]:
        return [f for f in self.files if f.fate.brokers]

    @property
    def lost_by_rollback(self) -> list[FileAfter]:
        return [f for f in self.files if f.lost_by_rollback or f.fate == Fate.REWRITTEN]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.files:
            key = "metadata only" if f.metadata_only else f.fate.value
            out[key] = out.get(key, 0) + 1
        return out


@dataclass(frozen=True)
class DirIdentity:
    """A directory by what names it on its filesystem, with what a rollback puts back (its owner, mode and mtime)."""

    device: int
    inode: int
    mode: int = 0
    uid: int = 0
    gid: int = 0
    mtime_ns: int = 0

    @classmethod
    def of(cls, st: Any) -> DirIdentity:
        return cls(
            int(st.st_dev), int(st.st_ino), int(st.st_mode & 0o7777), int(st.st_uid), int(st.st_gid), st.st_mtime_ns
        )

    def names(self, st: Any) -> bool:
        """``st`` is this directory (device and inode; the rest may have changed since)."""
        return (int(st.st_dev), int(st.st_ino)) == (self.device, self.inode)


@dataclass(frozen=True)
class PartitionExchange:
    """A partition's swap as the state database keeps it: its two directories and how one replaces the other."""

    method: ExchangeMethod
    original: DirIdentity
    new: DirIdentity


class LogDirPhase(str, enum.Enum):
    """Where a log dir's migration stands, as a whole."""

    NEW = "new"  # no run has touched it
    EXECUTING = "executing"  # started; not every partition migrated yet
    MIGRATED = "migrated"  # every planned partition migrated; originals kept for rollback
    ROLLING_BACK = "rolling-back"
    ROLLED_BACK = "rolled-back"
    FINALIZED = "finalized"  # originals deleted

    def __str__(self) -> str:
        return self.value

    @property
    def description(self) -> str:
        """The phase in words, for a sentence that begins "the log dir is ..." or "<log dir>: ..."."""
        return _PHASE_WORDS[self]


_PHASE_WORDS = {
    LogDirPhase.NEW: "not executed yet",
    LogDirPhase.EXECUTING: "partly migrated (its originals kept)",
    LogDirPhase.MIGRATED: "migrated, its originals kept until finalize",
    LogDirPhase.ROLLING_BACK: "being rolled back",
    LogDirPhase.ROLLED_BACK: "rolled back",
    LogDirPhase.FINALIZED: "finalized (its originals deleted)",
}


class EventKind(str, enum.Enum):
    """One line of a log dir's history (the ``events`` table)."""

    RUN_STARTED = "run-started"
    RUN_ENDED = "run-ended"
    PREPARED = "prepared"
    FENCE_UP = "fence-up"
    FENCE_DOWN = "fence-down"
    SEGMENT_VERIFIED = "segment-verified"
    SEGMENT_UNCHANGED = "segment-unchanged"
    SEGMENT_REFUSED = "segment-refused"
    SEGMENT_FAILED = "segment-failed"
    SWAP_BEGUN = "swap-begun"
    EXCHANGE_REFUSED = "exchange-refused"  # the filesystem refused renameat2's exchange: two renames instead
    PARTITION_MIGRATED = "partition-migrated"
    PARTITION_FAILED = "partition-failed"
    ROLLBACK_BEGUN = "rollback-begun"
    PARTITION_ROLLED_BACK = "partition-rolled-back"
    ROLLED_BACK = "rolled-back"
    FINALIZED = "finalized"
    LIVE_VERIFIED = "live-verified"  # a verify of the live files (one call of its run): ok or not, and its problems
    STATE_REBUILT = "state-rebuilt"  # the state database was missing or unusable: rebuilt from the files
    STATE_CORRECTED = "state-corrected"  # a partition's recorded state disagreed with its files: the files won

    def __str__(self) -> str:
        return self.value


class Stage(str, enum.Enum):
    """Every stage an engine runs, by the name its Dask task keys, the dashboard and Prometheus count it under.

    The dashboard and the collector walk this enum, so a stage added here is counted everywhere at once."""

    SURVEY = "survey"  # a broker's log dirs looked at for a cluster plan, on that broker
    PRESTAGE = "prestage"  # a running broker's pre-stage passes, on that broker
    PART = "part"  # a broker's run of a verb over its part of a cluster manifest, on that broker
    PREPARE = "prepare"
    COMPACT = "compact"
    CONVERT = "convert"
    JOIN = "join"
    REPLICAS = "replicas"  # the swap refused where replicas diverged (--require-consistent-replicas)
    REPLICA_RANGES = "replica-ranges"
    REPLICA_DIGESTS = "replica-digests"
    SWAP = "swap"
    VERIFY = "verify"
    STATUS = "status"
    ROLLBACK_CHECK = "rollback-check"
    ROLLBACK = "rollback"
    ARCHIVE = "archive"
    FINALIZE = "finalize"
    FORGET = "forget"
    MTIME = "mtime"
    REPORT = "report"

    def __str__(self) -> str:
        return self.value


# --- a segment's conversion and its outcome --------------------------------------------------------------------


@dataclass(frozen=True)
class FileStat:
    """What identifies a live file: a broker writing to it changes size or mtime; a rename changes the inode."""

    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: Any) -> FileStat:
        return cls(int(st.st_ino), int(st.st_size), int(st.st_mtime_ns))


@dataclass(frozen=True)
class SegmentTask:
    """Convert one segment: the source, where its outputs go, and what the source must still be."""

    source: str  # path of <base>.log
    staging_dir: str  # where <base>.log/.index/.timeindex are written
    base_offset: int
    options: ConvertOptions = field(default_factory=ConvertOptions)
    expected_size: int | None = None  # refuse if the source changed since planning
    expected_mtime_ns: int | None = None
    expected_inode: int | None = None
    tail_drop: TailDrop | None = None  # the only tail the plan allows to be dropped
    survivors: str | None = None  # compacted partition: .npy of the offsets to keep (migrate.stages.compact)
    split: SegmentSplit | None = None  # the plan cuts the converted source into several segments


class ConversionStatus(str, enum.Enum):
    CONVERTED = "converted"
    UNCHANGED = "unchanged"  # already in the target format: nothing written
    EMPTY = "empty"  # no complete entry

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SplitPart:
    """One output segment of a split source after the first (which keeps the source's name and ``SegmentResult``'s
    own ``outputs``): its base offset (its name), its staged files, and the offsets it holds."""

    base_offset: int
    outputs: SegmentFiles[str]  # the staged paths
    output_stats: SegmentFiles[FileStat]
    last_offset: int
    batches: int
    output_digests: SegmentFiles[str] = NO_FILES  # the edges digest of each file written


@dataclass
class SegmentResult:
    """What converting one segment produced: staged files and the digests the verifier must find again."""

    source: str
    base_offset: int
    status: ConversionStatus
    outputs: SegmentFiles[str] = NO_FILES  # the staged paths
    output_stats: SegmentFiles[FileStat] = NO_FILES
    # the edges digest of each file written (``migrate.segment.identity.edges_digest``): after the swap, what tells
    # a file that is still these bytes (whatever its mtime) from one a broker or a person rewrote
    output_digests: SegmentFiles[str] = NO_FILES
    live_before: SegmentFiles[FileStat] = NO_FILES  # the live files this output will replace
    source_bytes: int = 0
    output_bytes: int = 0
    entries_in: int = 0
    batches_out: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp: int = -1
    magics_in: dict[str, int] = field(default_factory=dict)
    mtime_timestamped_records: int = 0  # v0 records that received the segment's mtime (--timestamps mtime)
    digest: DigestAlgorithm = DigestAlgorithm.SHA256
    source_digest: str = ""  # offsets, keys, values, headers: must survive any conversion
    output_digest_ts: str = ""  # the same plus the timestamps the output must read back as
    # converted in ranges: the first offset of every range after the first; both digests are then composite (the
    # digest of the ranges' digests, migrate.format.digest), so a reader cuts the records at these offsets
    digest_splits: tuple[int, ...] = ()
    mtime_ns: int = 0
    truncated_tail_bytes: int = 0
    seconds: float = 0.0
    records_dropped: int = 0  # compaction: source records left out (their offsets become gaps); ``records`` kept
    # the source as it was read (migrate.segment.identity): the swap renames nothing over a source whose ctime or edges
    # changed since, though its size, mtime and inode did not (a same-size rewrite)
    source_ctime_ns: int = 0
    source_edges: str = ""
    # a split source (SegmentTask.split): the outputs after the first, in offset order; left out of the JSON when None
    parts: tuple[SplitPart, ...] | None = field(default=None, metadata=OMIT_IF_NONE)

    @property
    def output_count(self) -> int:
        """How many segments the source became (0 when nothing was written)."""
        return (1 if self.outputs else 0) + len(self.parts or ())

    @property
    def output_sizes(self) -> SegmentFiles[int]:
        return self.output_stats.map(lambda _, st: st.size)


@dataclass(frozen=True)
class Problem:
    """Why a segment or a partition did not migrate: what (``kind``, one vocabulary with plan's refusals), the
    operator's whole line (``message``), where, and what to do (``advice``, where the error named it apart)."""

    kind: ProblemKind
    message: str
    path: str | None = None
    position: int | None = None
    offset: int | None = None
    advice: str = ""

    @classmethod
    def of(cls, exc: BaseException) -> Problem:
        if isinstance(exc, LocatedError):
            return cls(exc.kind, str(exc), exc.path, exc.position, exc.offset, exc.hint)
        if isinstance(exc, OSError):
            return cls(ProblemKind.IO_ERROR, _os_error_text(exc), exc.filename)
        return cls(ProblemKind.BUG, f"{type(exc).__name__}: {exc}")

    @classmethod
    def bug(cls, exc: BaseException, path: str | None = None) -> Problem:
        """An exception the tool did not expect, with its traceback (call it in the ``except`` that caught it)."""
        import traceback

        return cls(
            ProblemKind.BUG,
            f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}",
            path,
            advice="This is a bug in kafka-log-migrate: keep the files named and report it with this message.",
        )


def _os_error_text(exc: OSError) -> str:
    import errno

    what = exc.strerror or str(exc)
    where = f" on {exc.filename}" if exc.filename else ""
    advice = {
        errno.ENOSPC: "Free space on that filesystem, then run `execute` again to resume (or `rollback`).",
        errno.EDQUOT: "Raise the quota or free space, then run `execute` again to resume (or `rollback`).",
        errno.EIO: "The disk reported an I/O error: check it (dmesg, SMART) before anything else.",
        errno.EPERM: "The file or directory refuses changes (immutable attribute? run `lsattr`); fix that, then run "
        "`execute` again to resume (or `rollback`).",
        errno.EACCES: "Run kafka-log-migrate as the user that owns the log dir (the broker's user) or as root.",
        errno.EROFS: "The filesystem is read-only: remount it read-write, then run `execute` again.",
    }.get(exc.errno or 0, "Fix the cause, then run `execute` again to resume (or `rollback`).")
    return f"{what}{where}. {advice}"


class Outcome(str, enum.Enum):
    VERIFIED = "verified"
    UNCHANGED = "unchanged"
    REFUSED = "refused"
    FAILED = "failed"
    SKIPPED = "skipped"  # done already (resumed), or not attempted after its partition failed or the run stopped

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SegmentOutcome:
    """What a convert task did with one segment: the record a task returns, the state store keeps and progress
    reports carry."""

    log_dir: str
    partition: str
    base_offset: int
    outcome: Outcome
    source_bytes: int = 0
    output_bytes: int = 0
    records: int = 0
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0
    problem: Problem | None = None
    result: SegmentResult | None = None
    finished_at: float = 0.0
    # taken from a pre-stage pass's outputs: the seconds that pass spent converting and verifying it (a cold run's cost)
    staged_seconds: float | None = None
    # the plan named staged outputs, but they could not be used (a source or staged file changed since): why
    staged_fallback: str = ""
    # the result as the state database stores it, where the take had it so already (a staged index's row): kept
    # as text, neither decoded nor encoded again
    result_text: str | None = None
    mtime_timestamped_records: int = 0  # of a result taken as text: its count, which events carry


@dataclass(frozen=True)
class RangeProgress:
    """A range of a large segment converted and verified by its own task: progress only, the bytes of the source
    range it covers. The segment's outcome, the one the state keeps, comes with its join."""

    log_dir: str
    partition: str
    base_offset: int
    index: int
    count: int
    source_bytes: int


@dataclass(frozen=True)
class PartitionRange:
    """The partitions named from ``first`` (inclusive) up to ``end`` (exclusive), in name order; None: unbounded.
    A log dir's read-only verbs cut its partitions into such runs, one per call, so that every core checks a part:
    bounds rather than a list of names, so that every name the state holds falls in exactly one run."""

    first: str | None = None
    end: str | None = None

    def __contains__(self, name: str) -> bool:
        return (self.first is None or self.first <= name) and (self.end is None or name < self.end)

    @property
    def whole(self) -> bool:
        return self.first is None and self.end is None


EVERY_PARTITION = PartitionRange()


@dataclass(frozen=True)
class PartitionStatus:
    log_dir: str
    partition: str
    state: PartitionState
    segments: dict[str, int]  # segment state -> count
    problem: Problem | None = None
    updated_at: float = 0.0


@dataclass(frozen=True)
class LogDirStatus:
    log_dir: str
    phase: LogDirPhase
    fence_up: bool
    partitions: tuple[PartitionStatus, ...]
    history: tuple[str, ...] = ()  # "finalized at ..., N partitions migrated"
    # where the files say otherwise than the state database (status changes nothing: the next execute or rollback
    # corrects the state), and the run holding the state now, if any ("execute, pid 123 on host h, since ...")
    reconciled: tuple[str, ...] = ()
    running: str | None = None

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.partitions:
            out[p.state.value] = out.get(p.state.value, 0) + 1
        return out

    @property
    def unmigrated(self) -> list[PartitionStatus]:
        return [p for p in self.partitions if p.state != PartitionState.MIGRATED]
