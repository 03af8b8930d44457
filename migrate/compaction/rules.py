"""Compaction's vocabulary: the ``--compact`` rule, a partition's settings, and the refusal.

Compacted topics are the ones that keep v0/v1 data forever, so the one-shot migration is the natural moment to
compact them with the strategy their producers need (``plan --compact TOPIC_REGEX=offset|timestamp|header:NAME``).
The strategies are KIP-280's:

- ``offset``: the highest offset wins (Kafka's own cleaner);
- ``timestamp``: the highest timestamp wins, ties to the highest offset. A v0 record compares by the timestamp the
  conversion gives it (the segment's mtime under ``--timestamps mtime``, -1 under ``none``);
- ``header``: the last occurrence of the named header in a record, read as a big-endian signed 8-byte long, wins
  when highest, ties to the highest offset; a record with the header beats one without; a value that is not 8 bytes
  counts as missing; neither having it falls back to offset; a blank header name falls back to offset.

The record at the log end offset always survives (KIP-280's replica-consistency case). A delete is a record with a
null value or with the KIP-87 flag (bit 5 of a v2 record's attributes); deletes that win their key are kept, as the
cleaner keeps them until delete.retention.ms, unless ``--drop-tombstones-older-than`` drops those whose timestamp
(a v0 record's: its segment's mtime) is older than that much before the partition's newest timestamp. A keyless
record (Kafka refuses them on compacted topics), a transactional or control batch (which records an abort makes
invisible is the cleaner's business) and a state over the memory limit refuse the partition.

Memory is what KIP-280 estimates per distinct key: a 16-byte key digest (xxh3-128; Kafka's cleaner uses MD5) and the
8-byte offset, plus the 8-byte comparison value for timestamp and header, plus one flags byte for header (has the
header) or with a tombstone horizon (is a delete), plus an 8-byte timestamp with a horizon when the compared value
is not already it (``Settings.bytes_per_key``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from migrate.errors import SegmentRefusedError
from migrate.model.plan_tree import CompactionPlan, CompactionStrategy, ConvertOptions, TimestampPolicy

KEY_DIGEST_BYTES = 16


class CompactionRefusedError(SegmentRefusedError):
    """A partition planned for compaction that cannot be compacted as asked (keyless records, transactions, the
    memory limit): it is left as it was."""

    default_hint = (
        "Nothing was changed. Leave the topic out of --compact (it is then converted without compaction) or fix the "
        "cause, and plan again."
    )


# --- the plan command's vocabulary -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionRule:
    """One ``--compact TOPIC_REGEX=offset|timestamp|header:NAME``: topics whose whole name matches, and how."""

    topics: str
    strategy: CompactionStrategy
    header: str = ""

    @classmethod
    def parse(cls, text: str) -> CompactionRule:
        # the last '=' that is followed by a strategy separates them: topic regexes may hold '=' and header names too
        m = re.fullmatch(r"(?P<topics>.+)=(?P<strategy>offset|timestamp|header:(?P<header>.*))", text, re.DOTALL)
        if m is None:
            raise ValueError(
                f"--compact {text!r}: expected TOPIC_REGEX=offset, TOPIC_REGEX=timestamp or TOPIC_REGEX=header:NAME"
            )
        try:
            re.compile(m["topics"])
        except re.error as exc:
            raise ValueError(f"--compact {text!r}: {m['topics']!r} is not a regular expression ({exc})") from None
        if m["header"] is not None:
            return cls(m["topics"], CompactionStrategy.HEADER, m["header"])
        return cls(m["topics"], CompactionStrategy(m["strategy"]))

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topics, topic) is not None

    def __str__(self) -> str:
        strategy = f"header:{self.header}" if self.strategy == CompactionStrategy.HEADER else self.strategy.value
        return f"{self.topics}={strategy}"


# --- how one partition is compacted ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How one partition is compacted: its plan entry's rule and the conversion's timestamp policy."""

    strategy: CompactionStrategy  # effective: a blank header name is offset already
    header: str = ""
    timestamps: TimestampPolicy = TimestampPolicy.MTIME
    drop_tombstones_older_than_ms: int | None = None
    memory_limit_bytes: int | None = None

    @classmethod
    def of(cls, plan: CompactionPlan, options: ConvertOptions) -> Settings:
        return cls(
            plan.effective_strategy,
            plan.header if plan.effective_strategy == CompactionStrategy.HEADER else "",
            options.timestamps,
            plan.drop_tombstones_older_than_ms,
            plan.memory_limit_bytes,
        )

    @property
    def compares(self) -> bool:
        return self.strategy != CompactionStrategy.OFFSET

    @property
    def tracks_flags(self) -> bool:
        return self.strategy == CompactionStrategy.HEADER or self.drop_tombstones_older_than_ms is not None

    @property
    def tracks_clock(self) -> bool:
        """The tombstone horizon needs each winner's timestamp; under the timestamp strategy with the mtime policy
        it is the compared value already (a v0 record's clock is its segment's mtime either way)."""
        if self.drop_tombstones_older_than_ms is None:
            return False
        return not (self.strategy == CompactionStrategy.TIMESTAMP and self.timestamps == TimestampPolicy.MTIME)

    @property
    def bytes_per_key(self) -> int:
        return (
            KEY_DIGEST_BYTES
            + 8
            + (8 if self.compares else 0)
            + (1 if self.tracks_flags else 0)
            + (8 if self.tracks_clock else 0)
        )
