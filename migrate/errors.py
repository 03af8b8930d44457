"""The typed errors of kafka-log-migrate.

Every error that bad input can cause is one of these, and each carries where it happened (file, byte position,
offset) so that the message alone tells an operator what is wrong, where, and what to do next.
"""

from __future__ import annotations


class MigrateError(Exception):
    """Base class: something the operator must act on."""


class CorruptRecordError(MigrateError):
    """Bytes that are not a valid Kafka log entry: bad CRC, bad size, undecodable compressed data, bad offsets.

    The format layer knows only byte positions within the buffer it was given; the segment layer adds the file path
    (``with_path``) so the message names the file as well.
    """

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
        self.hint = hint
        super().__init__(self._message())

    def _message(self) -> str:
        where = []
        if self.path is not None:
            where.append(self.path)
        if self.position is not None:
            where.append(f"byte position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        text = f"{self.reason} ({', '.join(where)})" if where else self.reason
        hint = self.hint or (
            "The segment was left untouched. Inspect it with `kafka-log-migrate dump --deep-iteration FILE`; "
            "if it is damaged, restore it from a replica before migrating."
        )
        return f"{text}. {hint}"

    def with_path(self, path: str, base_position: int = 0) -> CorruptRecordError:
        """The same error, located in ``path`` (positions shifted by ``base_position`` bytes)."""
        position = None if self.position is None else self.position + base_position
        return type(self)(self.reason, position=position, offset=self.offset, path=path, hint=self.hint)


class SegmentRefusedError(CorruptRecordError):
    """A valid segment that cannot be converted as asked: it would break a Kafka limit (2 GiB segment, batch size,
    offset range) or a record Kafka's own builder refuses."""


class SourceChangedError(MigrateError):
    """A segment changed since it was planned: a broker ran, or something else wrote to the log dir."""


class TruncatedTailError(CorruptRecordError):
    """A partial entry at the end of a segment, as a crash leaves it (Kafka's recovery would truncate it)."""


class UnsupportedFormatError(CorruptRecordError):
    """A well-formed entry this tool will not handle: an unknown magic byte or compression codec."""


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

    @classmethod
    def for_dir(cls, log_dir: object, holder_pid: int | None = None) -> LogDirLockedError:
        return cls(str(log_dir), holder_pid)


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
