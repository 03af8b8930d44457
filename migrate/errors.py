"""The typed errors of kafka-log-migrate.

Every error that bad input can cause is one of these, and each carries where it happened (file, byte position,
offset) so that the message alone tells an operator what is wrong, where, and what to do next.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class ProblemKind(str, enum.Enum):
    """What a problem is about, from plan to run: one member per check of the plan's table
    (``migrate.planning.checks``), one per ``LocatedError`` (its ``kind``: corrupt, unsupported, refused, ...), and
    those only a run meets (a conversion that did not verify, a live file changed, a bug)."""

    NOT_A_LOG_DIR = "not-a-log-dir"
    LOG_DIR_LOCKED = "log-dir-locked"
    UNCLEAN_SHUTDOWN = "unclean-shutdown"
    MIGRATION_IN_PROGRESS = "migration-in-progress"
    UNFINISHED_MIGRATION = "unfinished-migration"
    STRAY_FILES = "stray-files"
    NOT_WHOLE = "not-whole"  # a directory, link or special file in a partition dir: the swap carries files only
    IO_ERROR = "io-error"
    ERROR = "error"
    CORRUPT = "corrupt"
    UNSUPPORTED = "unsupported"
    REFUSED = "refused"
    TRUNCATED_TAIL = "truncated-tail"
    SOURCE_CHANGED = "source-changed"
    DAMAGED_TAIL = "damaged-tail"
    NO_SPACE = "no-space"
    COMPACT_NEEDS_V2 = "compact-needs-v2"
    COMPACT_OPTIONS_ALONE = "compact-options-alone"
    BROKER_CLAIMED_TWICE = "broker-claimed-twice"
    BROKER_REFUSED = "broker-refused"
    CLUSTERS_DIFFER = "clusters-differ"
    BROKER_WITHOUT_WORKER = "broker-without-worker"
    NO_WORKERS = "no-workers"
    # met by a run, not by plan's checks
    VERIFY = "verify"  # a conversion that did not verify against its source: nothing live was changed
    LIVE_CHANGED = "live-changed"  # a live file or directory not as the run left it or found it
    REPLICA_DIVERGENCE = "replica-divergence"
    UNSAFE_PATH = "unsafe-path"  # a path that leads out of where the tool may write (a link, another device)
    STATE = "state"  # the run's state database disagrees with the files
    BUG = "bug"  # an exception the tool did not expect: its traceback goes with it
    BROKER_OPTIONS_DIFFER = "broker-options-differ"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class PlanProblem:
    """One reason ``plan`` refuses: ``message`` is the operator's whole line (what, where, what to do), ``advice``
    the what-to-do part alone, and the place is given as fields where there is one."""

    kind: ProblemKind
    message: str
    advice: str = ""
    path: str | None = None
    position: int | None = None
    offset: int | None = None


class MigrateError(Exception):
    """Base class: something the operator must act on. The message says what is wrong, where, and what to do."""


class LocatedError(MigrateError):
    """A problem at a place in a segment file: the file, the byte position and the offset where it is known.

    The format layer knows only byte positions within the buffer it was given; the segment layer adds the file path
    (``with_path``) so the message names the file as well. Each subclass is one meaning, with the advice that fits
    it; ``kind`` names the meaning in reports and in the run's state.
    """

    kind: ProblemKind = ProblemKind.ERROR
    default_hint = "The segment was left untouched."

    def __init__(
        self,
        reason: str,
        *,
        position: int | None = None,
        offset: int | None = None,
        path: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.reason = reason
        self.position = position
        self.offset = offset
        self.path = path
        self.hint = hint if hint is not None else self.default_hint
        super().__init__(self._message())

    def where(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if self.position is not None:
            parts.append(f"byte position {self.position}")
        if self.offset is not None:
            parts.append(f"offset {self.offset}")
        return ", ".join(parts)

    def _message(self) -> str:
        where = self.where()
        text = f"{self.reason} ({where})" if where else self.reason
        return f"{text}. {self.hint}" if self.hint else text

    def with_path(self, path: str, base_position: int = 0) -> LocatedError:
        """The same error, located in ``path`` (positions shifted by ``base_position`` bytes)."""
        position = None if self.position is None else self.position + base_position
        return type(self)(self.reason, position=position, offset=self.offset, path=path, hint=self.hint)


class CorruptRecordError(LocatedError):
    """Bytes that are not a valid Kafka log entry: bad CRC, bad size, undecodable compressed data, offsets going
    backwards."""

    kind: ProblemKind = ProblemKind.CORRUPT
    default_hint = (
        "The segment was left untouched. Inspect it with `kafka-log-migrate dump --deep-iteration FILE`; if it is "
        "damaged, restore the partition from a replica before migrating it."
    )


class TruncatedTailError(LocatedError):
    """A partial entry running to the end of a partition's last segment, as a crash leaves it (Kafka's recovery would
    truncate it)."""

    kind: ProblemKind = ProblemKind.TRUNCATED_TAIL
    default_hint = (
        "A crash left a partial entry at the end of the partition; Kafka's recovery would truncate it. Re-plan with "
        "--truncate-tail to drop those bytes (the original file is kept until finalize), or restore the segment from "
        "a replica."
    )


class SegmentRefusedError(LocatedError):
    """A valid segment that cannot be converted as asked: the output would break a Kafka limit (2 GiB segment,
    max.message.bytes, the offset range of one segment) or hold a record Kafka's own builder refuses."""

    kind: ProblemKind = ProblemKind.REFUSED
    default_hint = "Nothing was changed. Leave this partition out of the plan (--topics) or change the options."


class UnencodableRecordError(ValueError):
    """A record the target format cannot hold, which Kafka's own builders refuse too (a timestamp below -1): bad
    input, not a bug. The format layer raises it with the record's index in the columns it was given; the segment
    layer turns it into a SegmentRefusedError at the record's file position. Any other ValueError from an encoder is
    a bug in its caller and is never reported as the data's fault."""

    def __init__(self, reason: str, record_index: int | None = None) -> None:
        self.reason = reason
        self.record_index = record_index
        super().__init__(reason)


class UnsupportedFormatError(LocatedError):
    """A well-formed entry this tool will not handle: an unknown magic byte or compression codec."""

    kind: ProblemKind = ProblemKind.UNSUPPORTED
    default_hint = (
        "The segment was left untouched. Check the file with `kafka-log-migrate dump`; Kafka itself cannot read such "
        "an entry either, so restore the partition from a replica."
    )


class SourceChangedError(LocatedError):
    """A live file is not the one that was planned or converted: a broker ran, or something else wrote to the log
    dir."""

    kind: ProblemKind = ProblemKind.SOURCE_CHANGED
    default_hint = (
        "The partition was left untouched. A broker may have run on this log dir: stop it and make a new plan with "
        "`kafka-log-migrate plan`."
    )


class StateWriteError(MigrateError):
    """The run's state or a staged file could not be written (disk full, I/O error, permission): the run stops at
    a point that `execute` (resume) and `rollback` both finish."""


class RunLockedError(MigrateError):
    """Another kafka-log-migrate run holds this plan's state."""


class LogDirLockedError(MigrateError):
    """Another process holds Kafka's ``.lock`` on a log dir: a running broker, or another kafka-log-migrate."""

    def __init__(self, log_dir: str, holder_pid: int | None = None, *, same_process: bool = False) -> None:
        self.log_dir = log_dir
        self.holder_pid = holder_pid
        self.same_process = same_process
        lock = f"{log_dir.rstrip('/')}/.lock"
        if same_process:
            text = (
                f"{log_dir}: this kafka-log-migrate process already holds the lock on {lock} (two tasks of one run "
                "were given the same log dir). Run one task per log dir at a time."
            )
        else:
            who = f"process {holder_pid}" if holder_pid else "another process"
            text = (
                f"{log_dir}: {who} holds the fcntl lock on {lock}, so a Kafka broker or another kafka-log-migrate is "
                f"using this log dir. Stop the broker cleanly (kafka-server-stop.sh or your service manager) and wait "
                f"until it has exited, or let the other kafka-log-migrate finish, then try again. "
                f"`fuser -v {lock}` shows the process holding it."
            )
        super().__init__(text)


class UnsafePathError(MigrateError):
    """A path the tool would write or delete under is a symbolic link or not a directory: following it could change
    files outside the log dir, so nothing is written there."""

    def __init__(self, path: str, found: str, advice: str = "") -> None:
        self.path = path
        super().__init__(
            f"{path}: {found}; kafka-log-migrate writes and deletes only in real directories of the log dir, so it "
            f"stopped before changing anything there. "
            + (
                advice
                or "Check who made it and remove or rename it (it is not Kafka's nor ours), then run the verb again."
            )
        )


class LogDirAccessError(MigrateError):
    """A log dir or one of Kafka's files in it cannot be opened as needed (missing, not a directory, permissions)."""


class MalformedLogDirFileError(MigrateError):
    """One of Kafka's own files in a log dir (a checkpoint, meta.properties, .kafka_cleanshutdown,
    leader-epoch-checkpoint) does not have the format Kafka writes."""

    def __init__(self, path: str, reason: str, *, line: int | None = None, hint: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.line = line
        self.hint = hint
        where = f"{path}, line {line}" if line is not None else path
        hint = hint or (
            "Kafka would fail to read it too (a malformed checkpoint takes the log dir offline at broker start). "
            "Nothing was changed. Restore the file from a backup or a replica broker, or move it aside if you know "
            "Kafka can rebuild it, then run again."
        )
        super().__init__(f"{where}: {reason}. {hint}")


class RefusedError(MigrateError):
    """A refusal to plan: ``problems`` holds every reason as a record (kind, place, advice), and the message lists
    them, one line each."""

    refusing_to = "plan"

    def __init__(self, problems: Sequence[PlanProblem]) -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        super().__init__(
            f"refusing to {self.refusing_to} ({count} problem{'s' if count > 1 else ''}):\n  - "
            + "\n  - ".join(p.message for p in self.problems)
        )

    def __reduce__(self) -> tuple[type, tuple[tuple[PlanProblem, ...]]]:
        return type(self), (self.problems,)  # the records, not the text: a pickled refusal stays one


class PlanRefusedError(RefusedError):
    """The log dirs are not in a state that can be migrated safely."""


class ExecuteRefusedError(RefusedError):
    """A planned log dir is no longer safe to migrate: prepare's re-run of the plan's checks found what ``plan``
    would now refuse (a broker started, a migration begun, files a broker left behind)."""

    refusing_to = "execute"


class PlannedElsewhereError(MigrateError):
    """A plan of one host's log dirs given to execute on another host: the same paths there are other files."""


class ClusterPlanRefusedError(RefusedError):
    """The brokers' surveys cannot make one safe plan; each problem names its broker and what to do."""

    refusing_to = "plan the cluster"


class ModelError(ValueError):
    """A record that does not fit the model: the message names the path of the offending value."""
