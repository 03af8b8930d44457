"""What each stage and each command reports: small frozen records, returned by engines and printed by the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field

from migrate.errors import ProblemKind
from migrate.model.plan_tree import Plan
from migrate.model.run_state import (
    LogDirPhase,
    LogDirStatus,
    Outcome,
    PartitionState,
    PartitionStatus,
    Problem,
    SegmentOutcome,
    SegmentResult,
    Stage,
)

# --- what each stage reports -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrepareReport:
    log_dir: str
    phase: LogDirPhase
    resumed: bool
    reset_segments: int = 0  # failed, refused or lost-staging segments planned again
    restored_partitions: int = 0  # partitions a crashed rollback had begun, finished before migrating again
    reconciled: tuple[str, ...] = ()  # what the state said that the files did not: corrected from the files
    changed: tuple[str, ...] = ()  # live files that are neither the originals nor the outputs swapped in


@dataclass
class RangePart:
    """One range of a segment, converted and verified by its own task: where its entries are, its part file, and
    what the join needs. ``outcome`` VERIFIED: usable; REFUSED/FAILED with ``problem``; SKIPPED: not attempted."""

    index: int
    count: int
    nominal_start: int
    nominal_end: int
    log_dir: str = ""
    partition: str = ""
    outcome: Outcome = Outcome.VERIFIED
    problem: Problem | None = None
    start: int | None = None  # where its first entry starts; None: no entry start found near its nominal start
    stop: int = 0  # file position after its last entry: the next range must start exactly here
    at_end: bool = False  # it read to the end of the file (its last complete entry, and a listed tail)
    changed: bool = False  # some entry was rewritten
    result: SegmentResult | None = None  # of this range alone; outputs.log is the part file
    batches: str = ""  # its batches' (size, last offset, max timestamp) as native int64 triples
    head: bytes = b""  # the part file's first 12 bytes (offset and size of its first batch)
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0
    files: list[str] = field(default_factory=list)  # everything it wrote, for cleanup
    output: tuple[int, int] | None = None  # its place in the joined file, when the plan knew it (ByteRange.output)
    in_place: bool = False  # its converted bytes are at ``output`` in the joined file, exactly as the plan said


@dataclass(frozen=True)
class ConvertTaskResult:
    """What a convert task returns, and a join: the outcomes of the segments it recorded in the state store; or, for
    a task that converted one range of a large segment (``range_part``), no outcome: its segment's join records it."""

    outcomes: tuple[SegmentOutcome, ...] = ()
    range_part: RangePart | None = None


@dataclass(frozen=True)
class PartitionProblem:
    partition: str
    problem: Problem


@dataclass(frozen=True)
class SwapReport:
    log_dir: str
    migrated: tuple[str, ...]  # partitions migrated by this call
    failed: tuple[PartitionProblem, ...]  # partitions left untouched (a live file changed, a file refused a link)
    mixed: tuple[str, ...]  # partitions whose live files may be mixed: the fence stays up
    fence_up: bool
    stopped: Problem | None = None  # an error that stopped the stage


@dataclass(frozen=True)
class RollbackReport:
    log_dir: str
    phase: LogDirPhase
    restored: tuple[str, ...]  # partitions whose originals were put back by this call
    # what a rollback loses: what the broker appended, rolled, cleaned or deleted since the swap, and converted
    # bytes changed otherwise (refused without --force); files only resized or touched (same bytes) are not counted
    changed: tuple[str, ...] = ()
    forced: bool = False
    reconciled: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinalizeReport:
    log_dir: str
    phase: LogDirPhase
    finalized: tuple[str, ...]  # partitions whose originals were deleted
    left_legacy: tuple[str, ...] = ()  # --partial: partitions left as they were (not migrated)
    reconciled: tuple[str, ...] = ()
    # what the broker did to the converted partitions since their swap, a line each where it did anything
    # ("t-0: 4 unchanged, 1 appended (offsets 300..349, 4096 bytes), 2 new")
    found: tuple[str, ...] = ()


@dataclass(frozen=True)
class LiveCheck:
    """``verify``: the live files of migrated partitions re-read and checked against what was swapped in."""

    log_dir: str
    phase: LogDirPhase
    checked_segments: int
    problems: tuple[str, ...]  # bytes that differ from what was swapped in, where no broker operation explains it
    unmigrated: tuple[str, ...]
    history: tuple[str, ...] = ()  # the log dir's milestones ("... finalized migrated=12"), also after finalize
    # what the broker did since the swap (appended, rolled, truncated, cleaned, deleted), a line per file
    by_broker: tuple[str, ...] = ()
    metadata_only: tuple[str, ...] = ()  # files whose bytes are as swapped in, with another mtime or inode


# --- replicas of one partition on several brokers (migrate.stages.replicas) ---


@dataclass(frozen=True)
class ReplicaRange:
    """The offsets one broker's replica of a partition holds (phase one: a shallow read of its first and last
    segments)."""

    broker_id: int | None
    partition: str
    first_offset: int | None
    last_offset: int | None


@dataclass(frozen=True)
class ReplicaDigest:
    """One broker's digests of one partition over the range all its replicas hold (phase two)."""

    broker_id: int | None
    partition: str
    first_offset: int
    last_offset: int
    bucket_offsets: int
    buckets: tuple[str, ...]  # digest of bucket k: offsets [first + k*B, first + (k+1)*B) within the range


@dataclass(frozen=True)
class Divergence:
    partition: str
    brokers: tuple[int | None, ...]
    first_offset: int  # the first differing offset range: [first_offset, last_offset]
    last_offset: int
    digests: dict[str, str]  # broker id (as text) -> that range's digest


@dataclass(frozen=True)
class UncheckedReplica:
    """A partition whose replicas on some brokers were not compared with this run's (a peer outside ``--brokers``
    that could not be read, or replicas that share no offsets), and why."""

    partition: str
    brokers: tuple[int | None, ...]  # the brokers whose replica was not compared
    reason: str


@dataclass(frozen=True)
class StateChunk:
    """A piece of a log dir's state database on its way to the archive beside the plan (finalize, rollback): a
    database grows by about 1 KB per segment, so a broker's is sent in pieces, never whole in one message.

    ``data`` is bytes ``offset``.. of a file of ``size`` bytes whose identity (inode, size, mtime in ns) was
    ``stamp`` before and after the read; the archive takes pieces of one stamp only."""

    offset: int
    data: bytes
    size: int
    stamp: tuple[int, int, int]


@dataclass(frozen=True)
class ArchiveCopy:
    """An archived state database sent to the host of a worker that cannot read it where it is (verify through a
    remote scheduler), in pieces of at most ``ARCHIVE_CHUNK_BYTES``: ``token`` names the copy the pieces were written
    into on that host, ``size`` and ``sha256`` are what the pieces must add up to before the copy is read."""

    token: str
    size: int
    sha256: str


# --- what a command reports ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageError:
    """A stage call that could not run at all (a log dir on another host, a refused prepare, a full disk)."""

    stage: Stage
    log_dir: str
    message: str
    error_type: str = ""


@dataclass(frozen=True)
class SegmentTotals:
    verified: int = 0  # converted and verified by this run
    unchanged: int = 0
    refused: int = 0
    failed: int = 0
    skipped: int = 0  # done by an earlier run, or not attempted
    bytes_in: int = 0
    bytes_out: int = 0
    records: int = 0
    convert_seconds: float = 0.0
    verify_seconds: float = 0.0

    @classmethod
    def of(cls, outcomes: list[SegmentOutcome]) -> SegmentTotals:
        done = [o for o in outcomes if o.outcome in (Outcome.VERIFIED, Outcome.UNCHANGED)]
        count = {k: sum(1 for o in outcomes if o.outcome == k) for k in Outcome}
        return cls(
            verified=count[Outcome.VERIFIED],
            unchanged=count[Outcome.UNCHANGED],
            refused=count[Outcome.REFUSED],
            failed=count[Outcome.FAILED],
            skipped=count[Outcome.SKIPPED],
            bytes_in=sum(o.source_bytes for o in done),
            bytes_out=sum(o.output_bytes for o in done),
            records=sum(o.records for o in done),
            convert_seconds=round(sum(o.convert_seconds for o in outcomes), 3),
            verify_seconds=round(sum(o.verify_seconds for o in outcomes), 3),
        )


@dataclass
class SegmentFold:
    """execute's running figures of the segments a run's convert and join tasks return, folded as each task's result
    comes back so that the driver never holds a record per segment: the counts and sums ``SegmentTotals`` and the
    cut-over's figures are made of, the few outcomes the report names one by one (refused and failed segments, staged
    fallbacks), and the log dirs an I/O error stopped. ``add`` takes the outcomes in any order: each carries where
    it came from (``order``: stage, call, position), and the report lists its named outcomes in that order, as a list
    of every outcome in call order did."""

    counts: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    bytes_in: int = 0  # of verified and unchanged segments, as the totals count them
    bytes_out: int = 0
    records: int = 0
    convert_seconds: float = 0.0  # of every outcome
    verify_seconds: float = 0.0
    # the cut-over's: verified or unchanged segments taken from staging (``staged_seconds`` set) or converted now
    staged_segments: int = 0
    staged_bytes: int = 0
    staged_seconds: float = 0.0  # what the pre-stage passes spent on those taken
    window_segments: int = 0
    window_bytes: int = 0
    done_work_seconds: float = 0.0  # convert + verify seconds of the taken and the fresh alike
    io_stopped: set[str] = field(default_factory=set)  # log dirs where a segment failed with an I/O error
    # (order, outcome): refused and failed segments; (order, why): segments planned from staging, converted anew
    _problems: list[tuple[tuple[int, int, int], SegmentOutcome]] = field(default_factory=list)
    _fallbacks: list[tuple[tuple[int, int, int], str]] = field(default_factory=list)

    def add(self, o: SegmentOutcome, order: tuple[int, int, int]) -> None:
        kind = o.outcome
        self.counts[kind] += 1
        self.convert_seconds += o.convert_seconds
        self.verify_seconds += o.verify_seconds
        if kind in (Outcome.VERIFIED, Outcome.UNCHANGED):
            self.bytes_in += o.source_bytes
            self.bytes_out += o.output_bytes
            self.records += o.records
            self.done_work_seconds += o.convert_seconds + o.verify_seconds
            if o.staged_seconds is not None:
                self.staged_segments += 1
                self.staged_bytes += o.source_bytes
                self.staged_seconds += o.staged_seconds
            else:
                self.window_segments += 1
                self.window_bytes += o.source_bytes
        elif kind in (Outcome.REFUSED, Outcome.FAILED):
            self._problems.append((order, o))
            if kind == Outcome.FAILED and o.problem is not None and o.problem.kind == ProblemKind.IO_ERROR:
                self.io_stopped.add(o.log_dir)
        if o.staged_fallback:
            self._fallbacks.append((order, o.staged_fallback))

    @property
    def problems(self) -> tuple[SegmentOutcome, ...]:
        return tuple(o for _, o in sorted(self._problems, key=lambda item: item[0]))

    @property
    def fallbacks(self) -> tuple[str, ...]:
        return tuple(why for _, why in sorted(self._fallbacks, key=lambda item: item[0]))

    def totals(self) -> SegmentTotals:
        return SegmentTotals(
            verified=self.counts[Outcome.VERIFIED],
            unchanged=self.counts[Outcome.UNCHANGED],
            refused=self.counts[Outcome.REFUSED],
            failed=self.counts[Outcome.FAILED],
            skipped=self.counts[Outcome.SKIPPED],
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            records=self.records,
            convert_seconds=round(self.convert_seconds, 3),
            verify_seconds=round(self.verify_seconds, 3),
        )


@dataclass(frozen=True)
class CutoverReport:
    """A run of a plan that found pre-staged conversions: what staging saved, and the broker's window, from its stop
    (the clean-shutdown marker's mtime) to the end of the swap, beside what converting the same data cold costs."""

    staged_segments: int  # taken from staging: renamed into place, not converted
    staged_bytes: int  # their source bytes
    window_segments: int  # converted in the window: rolled since the last pass, the old active segment, changed
    window_bytes: int
    fallbacks: tuple[str, ...]  # planned from staging but converted anew: which segment, and why
    stopped_at: float | None  # the earliest clean-shutdown marker's mtime of the run's log dirs, seconds since 1970
    window_seconds: float | None  # stopped_at to the end of the swap (plan and the operator's pauses included)
    checks_seconds: float  # execute's re-checks under the lock (prepare)
    delta_seconds: float  # converting and verifying what staging did not cover
    swap_seconds: float
    cold_seconds: float  # estimated: this run plus the passes' own conversion seconds for what was taken


@dataclass(frozen=True)
class ExecuteReport:
    plan_id: str
    engine: str
    ok: bool  # every planned partition of every log dir is migrated
    totals: SegmentTotals
    log_dirs: tuple[LogDirStatus, ...]
    errors: tuple[StageError, ...] = ()
    stage_seconds: dict[str, float] = field(default_factory=dict)
    problems: tuple[SegmentOutcome, ...] = ()  # refused and failed segments of this run
    accelerator: str = ""  # the C accelerator's state: "active", or why the slow path runs
    divergent_replicas: tuple[Divergence, ...] = ()  # replicas of one partition whose records differ across brokers
    reconciled: tuple[str, ...] = ()  # where the state database disagreed with the files, and was corrected
    unchecked_replicas: tuple[UncheckedReplica, ...] = ()  # replicas on brokers outside the run, not compared
    cutover: CutoverReport | None = None  # a plan that found pre-staged conversions

    @property
    def unmigrated(self) -> list[PartitionStatus]:
        return [p for d in self.log_dirs for p in d.unmigrated]


@dataclass(frozen=True)
class LeaveReport:
    """rollback or finalize: what each log dir ended as, and where its state was archived."""

    verb: str
    ok: bool
    rollbacks: tuple[RollbackReport, ...] = ()
    finalizes: tuple[FinalizeReport, ...] = ()
    errors: tuple[StageError, ...] = ()
    archived: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # live files changed after the swap: nothing was rolled back


@dataclass(frozen=True)
class StatusReport:
    plan_id: str
    log_dirs: tuple[LogDirStatus, ...]
    not_started: tuple[str, ...] = ()  # log dirs with no state of this plan (never executed)
    errors: tuple[StageError, ...] = ()

    def every_planned_partition_migrated(self, plan: Plan) -> bool:
        """Judged against the plan, not against whatever the states happen to list."""
        migrated = {
            (d.log_dir, p.partition) for d in self.log_dirs for p in d.partitions if p.state == PartitionState.MIGRATED
        }
        return all((d.key, p.name) in migrated for d in plan.log_dirs for p in d.partitions)


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    log_dirs: tuple[LiveCheck, ...]
    errors: tuple[StageError, ...] = ()
