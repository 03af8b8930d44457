"""The rehearsal's records: the configuration, the state it saves after every step (``rehearse --resume`` reads it
back), and the report it writes, every one a frozen dataclass serialised by ``migrate.codec``. The report's JSON keys
are these records' field names."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from migrate.compaction.rules import CompactionRule
from migrate.consumers.records import ClientVerdict
from migrate.errors import PlanProblem
from migrate.model.plan_tree import DEFAULT_RANGE_BYTES, DEFAULT_TASK_SEGMENTS, ConvertOptions
from migrate.model.run_state import PartitionStatus, Problem
from migrate.model.stage_reports import LeaveReport, SegmentTotals, StageError

REHEARSAL_VERSION = 1


class StepStatus(str, enum.Enum):
    RUNNING = "running"  # only ever seen in the state file of a process that died during the step
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"  # Ctrl-C

    def __str__(self) -> str:
        return self.value


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

    @classmethod
    def of(cls, step: str, problem: PlanProblem | Problem) -> Refusal:
        return cls(step, problem.message, problem.path, problem.position, problem.offset)


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
class ClientsReport:
    """The consumers of this host over the rehearsed data at one stage (before or after the conversion)."""

    reference: str  # Kafka's reader the records were judged against
    verdicts: tuple[ClientVerdict, ...]
    missing: tuple[str, ...] = ()  # clients that could not run here, each with what is missing


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
    # after pre-staging (``prestage`` while the broker runs): plan and execute of what changed since the last pass
    # only, at CUTOVER_CHANGED_FRACTION of the bytes; verify as in the cold window
    cutover_seconds: float | None = None


@dataclass(frozen=True)
class Projection:
    basis: str
    window_steps: tuple[str, ...]
    rates: tuple[StepRate, ...]
    brokers: tuple[BrokerWindow, ...]
    cluster_parallel_seconds: float | None  # every broker at once: the slowest broker's window
    cluster_serial_seconds: float | None  # one broker after the other
    caveats: tuple[str, ...] = ()
    cluster_rolling_cutover_seconds: float | None = None  # every broker pre-staged, then cut over one after the other
    cutover_changed_fraction: float | None = None  # of each broker's bytes, changed after its last pre-stage pass


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
    task_segments: int = DEFAULT_TASK_SEGMENTS
    free_bytes_cap: int | None = None
    compact: tuple[CompactionRule, ...] = ()  # plan --compact, as for `plan`
    drop_tombstones_older_than_ms: int | None = None
    compact_memory_limit: int | None = None
    range_bytes: int | None = DEFAULT_RANGE_BYTES  # plan --range-bytes
    oracle: str = ""  # path of shared/oracle/oracle; "" for none
    independent_reader: str = "kafka-python"  # or "none"
    cluster: tuple[BrokerBytes, ...] = ()
    force: bool = False
    clients: bool = False  # --clients: this host's consumers read the data before and after
    kafka_home: str = ""  # --kafka-home: the Kafka installation whose Java client reads it
    client_pythons: tuple[str, ...] = ()  # --client-python: more interpreters whose client libraries read it
    clients_idle_ms: int = 10_000  # --clients-idle: a consumer that makes no progress this long has stopped


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
    clients_before: ClientsReport | None = None
    clients_after: ClientsReport | None = None

    def step(self, name: str) -> StepRecord | None:
        return next((s for s in self.steps if s.name == name), None)

    def set_step(self, record: StepRecord) -> None:
        self.steps = (*(s for s in self.steps if s.name != record.name), record)
        order = step_names(self.config)
        self.steps = tuple(sorted(self.steps, key=lambda s: order.index(s.name)))

    def event(self, text: str) -> None:
        self.events = (*self.events, f"{now()} {text}")


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
    clients_before: ClientsReport | None = None
    clients_after: ClientsReport | None = None


# every step, in the order they run (``copy`` only with --on-copy, ``clients`` only with --clients):
# migrate.rehearse.driver.STEPS is their table
STEP_ORDER = ("fingerprint", "copy", "plan-check", "baseline", "execute", "verify", "clients", "rollback", "compare")


def step_names(config: RehearsalConfig) -> list[str]:
    return [name for name in STEP_ORDER if (name != "copy" or config.on_copy) and (name != "clients" or config.clients)]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
