"""Replicas compared on their staged outputs, across brokers, before the first cut-over: every staged segment of a
partition held by several brokers against the staged segments of its peers that cover exactly the same offsets.

Each pass records per staged segment the digest of its source's records (offsets, keys, values, headers: what must
survive any conversion) and of its output's records with the timestamps they read back as. Equal sources must give
equal outputs: the conversion depends only on the source's bytes, the options and the leader epoch, except under
``--timestamps mtime``, where a v0 record takes its own replica's segment mtime, and each broker wrote its segment
at its own time. So a difference is one of two kinds: the records differ (a replica diverged: find out which is right
before any broker is cut over), or only the timestamps do (replicas would serve the same offsets with different
timestamps while the cluster runs both formats: plan with ``--timestamps none``, or accept it knowingly).

Brokers roll their segments independently, so a staged segment whose peers staged other boundaries cannot be
compared here: it is counted, not hidden; execute's own replica check (offset-range digests) covers it after the
conversion.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from migrate.model.run_state import SegmentResult
from migrate.prestage.record import staged_segments


@dataclass(frozen=True)
class StagedDigest:
    """One staged segment of one broker, as replicas are compared."""

    partition: str
    base_offset: int
    first_offset: int | None
    last_offset: int | None
    records: int
    source_digest: str
    output_digest: str  # the records with the timestamps they read back as


def digest_of(partition: str, base_offset: int, r: SegmentResult) -> StagedDigest:
    """A conversion's digests, staged or converted at a cut-over, as replicas are compared."""
    return StagedDigest(
        partition, base_offset, r.first_offset, r.last_offset, r.records, r.source_digest, r.output_digest_ts
    )


def staged_digests(log_dir: str | Path, staging_dir: str | Path | None = None) -> list[StagedDigest]:
    """The digests a log dir's staging tree records, one per staged segment with staged files."""
    return [
        digest_of(s.record.partition, s.record.base_offset, s.record.result)
        for s in staged_segments(log_dir, staging_dir)
        if s.record.staged
    ]


def differences_with(broker: int, check: StagedReplicaCheck) -> tuple[StagedDifference, ...]:
    """The differences that set ``broker`` apart from a peer (its peers' own were told before the first cut-over)."""
    return tuple(d for d in check.differences if any(broker in g for g in d.groups))


class DifferenceKind(str, enum.Enum):
    RECORDS = "records"  # the replicas hold different records at the same offsets
    TIMESTAMPS = "timestamps"  # the same records, converted with different timestamps (--timestamps mtime)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StagedDifference:
    partition: str
    base_offset: int
    first_offset: int | None
    last_offset: int | None
    kind: DifferenceKind
    groups: tuple[tuple[int, ...], ...]  # the brokers that agree with each other, one group per distinct digest


@dataclass(frozen=True)
class StagedReplicaCheck:
    compared: int  # staged segments that a peer staged with the same offsets: compared
    uncompared: int  # staged segments of replicated partitions whose peers staged other boundaries (or none)
    differences: tuple[StagedDifference, ...]

    @property
    def diverged(self) -> tuple[StagedDifference, ...]:
        return tuple(d for d in self.differences if d.kind == DifferenceKind.RECORDS)


def compare_staged(by_broker: dict[int, list[StagedDigest]]) -> StagedReplicaCheck:
    """Every staged segment of a partition staged on several brokers, against its peers' with the same offsets."""
    holders: dict[str, set[int]] = defaultdict(set)
    spans: dict[tuple[str, int, int | None, int | None], dict[int, StagedDigest]] = defaultdict(dict)
    for broker, digests in by_broker.items():
        for d in digests:
            holders[d.partition].add(broker)
            spans[(d.partition, d.base_offset, d.first_offset, d.last_offset)][broker] = d
    compared = uncompared = 0
    differences = []
    for (partition, base, first, last), found in sorted(spans.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if len(holders[partition]) < 2:
            continue  # not replicated on the brokers staged: nothing to compare with
        if len(found) < 2:
            uncompared += 1
            continue
        compared += len(found)
        for kind, digest_of in (
            (DifferenceKind.RECORDS, lambda d: d.source_digest),
            (DifferenceKind.TIMESTAMPS, lambda d: d.output_digest),
        ):
            groups: dict[str, list[int]] = defaultdict(list)
            for broker, d in sorted(found.items()):
                groups[digest_of(d)].append(broker)
            if len(groups) > 1:
                agreeing = tuple(sorted((tuple(g) for g in groups.values()), key=lambda g: (-len(g), g)))
                differences.append(StagedDifference(partition, base, first, last, kind, agreeing))
                break  # records that differ differ in their timestamped digest too: one finding
    return StagedReplicaCheck(compared, uncompared, tuple(differences))
