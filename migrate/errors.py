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
