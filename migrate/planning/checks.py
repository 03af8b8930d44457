"""The plan's checks as one table, as pg_upgrade keeps its own: each row a kind of refusal, the scope it looks at, the
test that finds it, and the advice for the operator.

A test looks at one subject of its scope (the request, a log dir, a partition, a segment's profile, ...) and yields a
``Finding`` per problem: the operator's whole line, and the file, byte position and offset where there are some.
``judge`` runs the rows of a scope and makes each finding a ``PlanProblem`` record with the row's kind and advice;
``migrate.planning.plan`` and ``migrate.planning.cluster`` gather the subjects and raise one refusal carrying every
record. Time passes between ``plan`` and ``execute``, so ``prepare`` runs the rows marked ``at_prepare`` again
through ``recheck_log_dir`` before a new run fences a log dir.

Scopes, in the order ``plan`` meets them: the request, the cluster (the brokers' surveys), a log dir's path, the log
dir, a partition, a segment, compaction's pass one over a partition, a filesystem's staging space. A segment is
refused for its first problem only: each of its rows reads what the rows before it found valid.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from migrate.errors import ExecuteRefusedError, LocatedError, LogDirLockedError, PlanProblem, ProblemKind
from migrate.kafka.layout import Partition, inspect_log_dir, validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown
from migrate.model.plan_tree import FilesystemSpace, LogDirPlan, TailDrop
from migrate.planning.request import BrokerSurvey, PlanRequest
from migrate.run.workspace import fence_path, other_states
from migrate.segment.profile import SegmentProfile, check_segment, valid_entry_after
from migrate.units import human_bytes

# A torn write leaves a prefix of one entry; a "tail" longer than any entry Kafka would have accepted is damage.
TORN_TAIL_SCAN_BYTES = 4 << 20


class Scope(str, enum.Enum):
    REQUEST = "request"
    CLUSTER = "cluster"
    LOG_DIR_PATH = "log dir path"
    LOG_DIR = "log dir"
    PARTITION = "partition"
    SEGMENT = "segment"
    COMPACTION = "compaction"
    FILESYSTEM = "filesystem"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Finding:
    """What a test found: the operator's whole line and the place; ``kind`` and ``advice`` only where a located
    error brings its own (an unsupported magic byte found by the row that reads the entries)."""

    message: str
    path: str | None = None
    position: int | None = None
    offset: int | None = None
    kind: ProblemKind | None = None
    advice: str | None = None

    @classmethod
    def of(cls, exc: LocatedError) -> Finding:
        return cls(str(exc), exc.path, exc.position, exc.offset, exc.kind, exc.hint)


@dataclass(frozen=True)
class Check:
    kind: ProblemKind
    scope: Scope
    test: Callable[[Any], Iterable[Finding]]
    advice: str
    at_prepare: bool = False  # prepare runs it again before a new run fences the log dir
    while_running: bool = False  # means the same while the broker runs: a rolling run asks it before the stop

    def run(self, subject: object) -> list[PlanProblem]:
        return [
            PlanProblem(f.kind or self.kind, f.message, f.advice or self.advice, f.path, f.position, f.offset)
            for f in self.test(subject)
        ]


# --- subjects -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogDirSubject:
    path: str  # as given on the command line (the path check), then resolved
    allow_unclean: bool = False
    plan_id: str | None = None  # prepare: the run's own plan, whose state is not another migration's


@dataclass(frozen=True)
class TailVerdict:
    """A partial entry at the end of a segment: a torn write to drop (``drop``), or damage (``damage`` says why)."""

    drop: TailDrop | None = None
    damage: str | None = None


@dataclass
class SegmentSubject:
    """One segment as ``plan`` read it: its profile (or the error reading it raised), and what it has to convert."""

    path: Path
    base_offset: int
    is_last: bool  # a crash can tear only the segment being appended to: the partition's last
    request: PlanRequest
    compacted: bool
    profile: SegmentProfile | None = None
    read_error: LocatedError | OSError | None = None

    @property
    def converts(self) -> bool:
        """Something to convert: a torn tail elsewhere is Kafka's recovery's business, not ours."""
        assert self.profile is not None
        return self.compacted or self.profile.has_magic_below(self.request.options.target_magic)

    @cached_property
    def tail(self) -> TailVerdict:
        """A torn tail is a partial entry running to the end of the partition's last segment, with no valid entry
        after it; anything else is damage, reported with the failed check and never with advice to truncate."""
        profile = self.profile
        assert profile is not None
        if not profile.tail_bytes:
            return TailVerdict()
        position = profile.tail_position
        assert position is not None
        limit = max(self.request.options.max_message_bytes, profile.largest_entry) + 12
        after = valid_entry_after(self.path, position + 1, min(profile.tail_bytes - 1, TORN_TAIL_SCAN_BYTES))
        if not self.is_last:
            return TailVerdict(damage="it is not the partition's last segment, so a crash cannot have torn it")
        if after is not None:
            why = f"a valid entry follows at byte position {after}, so the entry header here is damaged"
            return TailVerdict(damage=why)
        if profile.tail_bytes > limit:
            return TailVerdict(
                damage=f"the partial entry would be {profile.tail_bytes} bytes, larger than any entry in the partition"
            )
        drop = TailDrop(position, profile.tail_bytes, profile.last_offset, profile.tail_claimed_offset)
        return TailVerdict(drop=drop)

    @cached_property
    def deep_error(self) -> LocatedError | None:
        """``plan --check``: the first problem of a deep read (every entry decompressed, every inner checksum and
        offset), unless it lies in a torn tail that will be dropped."""
        try:
            check_segment(self.path, self.base_offset, self.request.options.chunk_bytes)
        except LocatedError as exc:
            drop = self.tail.drop
            if drop is None or exc.position is None or exc.position < drop.position:
                return exc
        return None


@dataclass(frozen=True)
class CompactionAttempt:
    """Pass one of compaction over a partition, as ``plan`` ran it: the error that stopped it, if any."""

    partition_dir: Path
    error: LocatedError | OSError | None


@dataclass(frozen=True)
class ClusterSubject:
    surveys: tuple[BrokerSurvey, ...]
    expected_brokers: tuple[int, ...]
    scheduler: str


# --- the tests ----------------------------------------------------------------------------------------------------

COMPACT_NEEDS_V2_ADVICE = "drop --target v1, or plan the compacted topics separately without --compact"
COMPACT_OPTIONS_ADVICE = "add --compact TOPIC_REGEX=STRATEGY for the topics to compact, or leave them out"
LOG_DIR_PATH_ADVICE = "Check the path against log.dirs in the broker's server.properties."
LOCKED_ADVICE = (
    "Stop the broker cleanly (kafka-server-stop.sh or your service manager) and wait until it has exited, or let the "
    "other kafka-log-migrate finish, then try again."
)
UNCLEAN_ADVICE = (
    "Start the broker once, let it recover, stop it cleanly, and plan again (or pass --allow-unclean if you have "
    "checked the segments yourself)."
)
IN_PROGRESS_ADVICE = "Finish it with `execute --plan` or undo it with `rollback --plan` using its plan file."
UNFINISHED_ADVICE = "run `execute`, `finalize` or `rollback` with its plan file first."
STRAY_ADVICE = "start the broker once so it completes or discards them, stop it cleanly, and plan again."
NOT_WHOLE_ADVICE = "move them out of the partition dir (after checking what they are), then plan again."
UNREADABLE_ADVICE = "check its permissions and the disk"
DAMAGED_TAIL_ADVICE = (
    "restore the partition from a replica (or leave its topic out with --topics). Inspect it with `kafka-log-migrate "
    "dump --deep-iteration`."
)
TORN_TAIL_ADVICE = (
    "Plan with --truncate-tail to drop them (the original is kept until finalize), or restore the segment from a "
    "replica."
)
NO_SPACE_ADVICE = "Free space, or migrate fewer topics at a time (--topics)."
SEGMENT_ADVICE = "Restore the partition from a replica, or leave its topic out with --topics."
COMPACTION_ADVICE = "Leave this topic out of --compact, or fix what the message names."
CLAIMED_TWICE_ADVICE = "one worker per broker host, each seeing only its own broker's log dirs"
BROKER_REFUSED_ADVICE = "Fix what the broker's own refusal names, then plan again."
CLUSTERS_DIFFER_ADVICE = "plan one cluster at a time"
NO_WORKER_ADVICE = "On its host run `dask worker SCHEDULER --name broker-ID --nthreads 1`, then plan again."
NO_WORKERS_ADVICE = "start one `dask worker` on each broker host"


def _compact_needs_v2(request: PlanRequest) -> Iterator[Finding]:
    if request.compact and request.options.target_magic != 2:
        yield Finding(
            "--compact writes v2 batches (compaction by header reads v2 headers, deletes may carry the KIP-87 flag of "
            f"v2 records): {COMPACT_NEEDS_V2_ADVICE}"
        )


def _compact_options_alone(request: PlanRequest) -> Iterator[Finding]:
    if not request.compact and (request.drop_tombstones_older_than_ms is not None or request.compact_memory_limit):
        yield Finding(
            "--drop-tombstones-older-than and --compact-memory-limit apply to compacted partitions only: "
            + COMPACT_OPTIONS_ADVICE
        )


def _broker_claimed_twice(cluster: ClusterSubject) -> Iterator[Finding]:
    by_id: dict[int | None, list[BrokerSurvey]] = {}
    for s in cluster.surveys:
        by_id.setdefault(s.broker_id, []).append(s)
    for broker_id, claims in sorted(by_id.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        if broker_id is not None and len(claims) > 1:
            yield Finding(
                f"broker {broker_id} is claimed by {len(claims)} workers ({', '.join(c.worker for c in claims)}): "
                + CLAIMED_TWICE_ADVICE
            )


def _broker_refused(cluster: ClusterSubject) -> Iterator[Finding]:
    for s in cluster.surveys:
        if s.refusal:
            who = f"broker {s.broker_id}" if s.broker_id is not None else f"the worker on {s.host}"
            yield Finding(f"{who} ({s.worker}): {s.refusal}")


def _clusters_differ(cluster: ClusterSubject) -> Iterator[Finding]:
    surveys = cluster.surveys
    clusters = {s.cluster_id for s in surveys if s.refusal is None}
    if len(clusters) > 1:
        members = "; ".join(
            f"cluster {c}: brokers {', '.join(str(s.broker_id) for s in surveys if s.cluster_id == c)}"
            for c in sorted(clusters, key=str)
        )
        yield Finding(f"the workers' brokers belong to different clusters ({members}): {CLUSTERS_DIFFER_ADVICE}")


def _broker_without_worker(cluster: ClusterSubject) -> Iterator[Finding]:
    for broker_id in sorted(set(cluster.expected_brokers) - {s.broker_id for s in cluster.surveys}):
        yield Finding(
            f"broker {broker_id} has no worker. On its host run: dask worker {cluster.scheduler} --name "
            f"broker-{broker_id} --nthreads 1 (with --tls-ca-file/--tls-cert/--tls-key on a TLS cluster), then plan "
            "again"
        )


def _no_workers(cluster: ClusterSubject) -> Iterator[Finding]:
    if not cluster.surveys:
        yield Finding(f"the scheduler {cluster.scheduler} has no workers: {NO_WORKERS_ADVICE}")


def _not_a_log_dir(log_dir: LogDirSubject) -> Iterator[Finding]:
    problem = validate_log_dir_path(log_dir.path)
    if problem:
        yield Finding(problem, log_dir.path or None)


def _locked(log_dir: LogDirSubject) -> Iterator[Finding]:
    holder = lock_holder(log_dir.path)
    if holder is not None:
        yield Finding(str(LogDirLockedError(log_dir.path, holder or None)), log_dir.path)


def _unclean(log_dir: LogDirSubject) -> Iterator[Finding]:
    if not has_clean_shutdown(log_dir.path) and not log_dir.allow_unclean:
        yield Finding(
            f"{log_dir.path}: no .kafka_cleanshutdown marker, so the broker did not shut down cleanly and the last "
            f"segments may hold unrecovered data. {UNCLEAN_ADVICE}",
            log_dir.path,
        )


def _in_progress(log_dir: LogDirSubject) -> Iterator[Finding]:
    fence = fence_path(log_dir.path)
    if fence.exists():
        yield Finding(
            f"{log_dir.path}: {fence.name} exists: a migration is in progress here. {IN_PROGRESS_ADVICE}", log_dir.path
        )


def _unfinished(log_dir: LogDirSubject) -> Iterator[Finding]:
    # a plan id no state file can have: at plan time every state in the log dir is another migration's
    for state in other_states(log_dir.path, log_dir.plan_id or "-"):
        yield Finding(
            f"{log_dir.path}: {state.name} holds the state of a migration that was not finalized or rolled back; "
            + UNFINISHED_ADVICE,
            log_dir.path,
        )


def _stray(part: Partition) -> Iterator[Finding]:
    if part.stray_files:
        yield Finding(
            f"{part.path}: {', '.join(part.stray_files)} left by an interrupted broker operation; {STRAY_ADVICE}",
            str(part.path),
        )


def _not_whole(part: Partition) -> Iterator[Finding]:
    if part.other_entries:
        yield Finding(
            f"{part.path}: {', '.join(part.other_entries)}: not regular files. The swap exchanges a partition's "
            f"directory whole and carries only its regular files (Kafka reads nothing else there); {NOT_WHOLE_ADVICE}",
            str(part.path),
        )


def _unreadable(segment: SegmentSubject) -> Iterator[Finding]:
    if isinstance(segment.read_error, OSError):
        yield Finding(
            f"{segment.path}: cannot read ({segment.read_error.strerror}); {UNREADABLE_ADVICE}", str(segment.path)
        )


def _bad_entry(segment: SegmentSubject) -> Iterator[Finding]:
    if isinstance(segment.read_error, LocatedError):
        yield Finding.of(segment.read_error)
    elif segment.profile is not None and segment.profile.corruption is not None:
        yield Finding.of(segment.profile.corruption)


def _damaged_tail(segment: SegmentSubject) -> Iterator[Finding]:
    if not segment.converts or segment.tail.damage is None:
        return
    profile = segment.profile
    assert profile is not None
    yield Finding(
        f"{segment.path}: the entry at byte position {profile.tail_position} runs past the end of the file "
        f"({profile.tail_bytes} bytes left), and {segment.tail.damage}. This is damage, not a torn tail: "
        + DAMAGED_TAIL_ADVICE,
        str(segment.path),
        profile.tail_position,
    )


def _torn_tail(segment: SegmentSubject) -> Iterator[Finding]:
    if not segment.converts or segment.tail.drop is None or segment.request.options.truncate_tail:
        return
    drop = segment.tail.drop
    yield Finding(
        f"{segment.path}: {drop.bytes} bytes of a partial entry at byte position {drop.position} after offset "
        f"{drop.last_kept_offset} (a crash tore the last write; Kafka's recovery would truncate it). "
        + TORN_TAIL_ADVICE,
        str(segment.path),
        drop.position,
    )


def _deep_read(segment: SegmentSubject) -> Iterator[Finding]:
    if segment.request.check and segment.converts and segment.deep_error is not None:
        yield Finding.of(segment.deep_error)


def _pass_one_unreadable(attempt: CompactionAttempt) -> Iterator[Finding]:
    if isinstance(attempt.error, OSError):
        path = attempt.partition_dir
        yield Finding(f"{path}: cannot read ({attempt.error.strerror}); {UNREADABLE_ADVICE}", str(path))


def _pass_one_refused(attempt: CompactionAttempt) -> Iterator[Finding]:
    if isinstance(attempt.error, LocatedError):
        yield Finding.of(attempt.error)


def _no_space(space: FilesystemSpace) -> Iterator[Finding]:
    if space.needed_bytes > space.free_bytes:
        yield Finding(
            f"{space.example_dir}: the converted segments of {space.partitions} partitions on this filesystem need "
            f"about {human_bytes(space.needed_bytes)} of staging space (originals are kept as hard links until "
            f"finalize), but only {human_bytes(space.free_bytes)} is free. {NO_SPACE_ADVICE}",
            space.example_dir,
        )


K = ProblemKind
CHECKS: tuple[Check, ...] = (
    Check(K.COMPACT_NEEDS_V2, Scope.REQUEST, _compact_needs_v2, COMPACT_NEEDS_V2_ADVICE),
    Check(K.COMPACT_OPTIONS_ALONE, Scope.REQUEST, _compact_options_alone, COMPACT_OPTIONS_ADVICE),
    Check(K.BROKER_CLAIMED_TWICE, Scope.CLUSTER, _broker_claimed_twice, CLAIMED_TWICE_ADVICE),
    Check(K.BROKER_REFUSED, Scope.CLUSTER, _broker_refused, BROKER_REFUSED_ADVICE),
    Check(K.CLUSTERS_DIFFER, Scope.CLUSTER, _clusters_differ, CLUSTERS_DIFFER_ADVICE),
    Check(K.BROKER_WITHOUT_WORKER, Scope.CLUSTER, _broker_without_worker, NO_WORKER_ADVICE),
    Check(K.NO_WORKERS, Scope.CLUSTER, _no_workers, NO_WORKERS_ADVICE),
    Check(
        K.NOT_A_LOG_DIR, Scope.LOG_DIR_PATH, _not_a_log_dir, LOG_DIR_PATH_ADVICE, at_prepare=True, while_running=True
    ),
    Check(K.LOG_DIR_LOCKED, Scope.LOG_DIR, _locked, LOCKED_ADVICE, at_prepare=True),
    Check(K.UNCLEAN_SHUTDOWN, Scope.LOG_DIR, _unclean, UNCLEAN_ADVICE),
    Check(
        K.MIGRATION_IN_PROGRESS, Scope.LOG_DIR, _in_progress, IN_PROGRESS_ADVICE, at_prepare=True, while_running=True
    ),
    Check(K.UNFINISHED_MIGRATION, Scope.LOG_DIR, _unfinished, UNFINISHED_ADVICE, at_prepare=True, while_running=True),
    Check(K.STRAY_FILES, Scope.PARTITION, _stray, STRAY_ADVICE, at_prepare=True),
    Check(K.NOT_WHOLE, Scope.PARTITION, _not_whole, NOT_WHOLE_ADVICE, at_prepare=True),
    Check(K.IO_ERROR, Scope.SEGMENT, _unreadable, UNREADABLE_ADVICE),
    Check(K.CORRUPT, Scope.SEGMENT, _bad_entry, SEGMENT_ADVICE),
    Check(K.DAMAGED_TAIL, Scope.SEGMENT, _damaged_tail, DAMAGED_TAIL_ADVICE),
    Check(K.TRUNCATED_TAIL, Scope.SEGMENT, _torn_tail, TORN_TAIL_ADVICE),
    Check(K.CORRUPT, Scope.SEGMENT, _deep_read, SEGMENT_ADVICE),
    Check(K.IO_ERROR, Scope.COMPACTION, _pass_one_unreadable, UNREADABLE_ADVICE),
    Check(K.REFUSED, Scope.COMPACTION, _pass_one_refused, COMPACTION_ADVICE),
    Check(K.NO_SPACE, Scope.FILESYSTEM, _no_space, NO_SPACE_ADVICE),
)


def judge(
    scope: Scope,
    subject: object,
    *,
    first_only: bool = False,
    at_prepare: bool = False,
    while_running: bool = False,
) -> list[PlanProblem]:
    """The problems the rows of ``scope`` find in ``subject``, in table order; ``first_only``: stop at the first row
    that finds any (later rows read what earlier ones found valid); ``at_prepare``: only the rows prepare re-runs;
    ``while_running``: only the rows that mean the same while the broker runs."""
    problems: list[PlanProblem] = []
    for check in CHECKS:
        if check.scope != scope or (at_prepare and not check.at_prepare):
            continue
        if while_running and not check.while_running:
            continue
        problems += check.run(subject)
        if first_only and problems:
            break
    return problems


def before_stop(log_dir: str) -> list[PlanProblem]:
    """The refusals a plan of ``log_dir`` would meet that can be told while its broker still runs (an earlier
    migration's state or fence, a path that is no log dir): a rolling run asks them before it stops the broker,
    so a certain refusal never takes a broker out of its in-sync replicas for nothing. Only reads."""
    subject = LogDirSubject(log_dir)
    return judge(Scope.LOG_DIR_PATH, subject, while_running=True) or judge(Scope.LOG_DIR, subject, while_running=True)


def recheck_log_dir(entry: LogDirPlan, plan_id: str) -> None:
    """For ``prepare``, before a new run of ``plan_id`` fences ``entry``: the rows marked ``at_prepare`` again, on
    the log dir as it is now (a broker may have been started, or have died mid-operation, since planning). Raises
    ExecuteRefusedError with every problem; changes nothing."""
    subject = LogDirSubject(entry.log_dir, plan_id=plan_id)
    problems = judge(Scope.LOG_DIR_PATH, subject, at_prepare=True)
    if not problems:
        problems = judge(Scope.LOG_DIR, subject, at_prepare=True)
        planned = {p.name for p in entry.partitions}

        def recheck(part: Partition) -> None:
            if part.kind != "future" and part.name in planned:
                problems.extend(judge(Scope.PARTITION, part, at_prepare=True))

        # a partition at a time: the whole layout is a record and a path per segment, 1 GB at 10^6 segments
        inspect_log_dir(entry.log_dir, each=recheck)
    if problems:
        raise ExecuteRefusedError(problems)
