"""replicas: do the copies of one partition on different brokers hold the same records?

Old Kafka versions (before leader epochs) let replicas diverge after an unclean leader election or a truncation
race, and the one-shot migration reads every replica anyway: the cheapest moment to catch it. Each broker digests its
replica over fixed offset buckets (``[k*B, (k+1)*B)``) of the range it holds, with the format-independent content
digest (offset, key, value, headers: the same whatever the format, codec or batching, and without timestamps, which
``--timestamps mtime`` takes from each broker's own segment mtimes). The client compares buckets that every replica
holds completely, and names the first that differs.

The stage functions (``replica_ranges``, ``replica_digests``, ``fail_divergent``) run after conversion and before
the swap, pinned to each broker's host: a replica's records are read from the files that will be live after the
swap (a converted segment's staged output where there is one, the live file otherwise; segments already in v2 are
not converted). ``common_range`` and ``compare`` run in the client, on what the brokers returned.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from migrate.errors import MigrateError, ProblemKind
from migrate.format.digest import LogDigest
from migrate.format.records import RecordColumns
from migrate.kafka.names import SEGMENT_RE
from migrate.model.plan_tree import DigestAlgorithm, LogDirPlan, Plan
from migrate.model.run_state import Problem
from migrate.model.stage_reports import Divergence, ReplicaDigest, ReplicaRange
from migrate.prestage.replicas import StagedDigest, digest_of, staged_digests
from migrate.run.state import StateStore
from migrate.run.workspace import output_dir
from migrate.segment.reader import read_file
from migrate.stages.common import locate

DEFAULT_BUCKET_OFFSETS = 10_000


def _records(path: str) -> Iterator[RecordColumns]:
    for chunk in read_file(path):
        for item in chunk.entries.items:
            if len(item.records):
                yield item.records


def offset_range(segment_files: list[str], partition: str, broker_id: int | None) -> ReplicaRange:
    """First and last record offsets: the first segment's first records and the last segment's last ones."""
    files = [f for f in segment_files if os.path.getsize(f)]
    if not files:
        return ReplicaRange(broker_id, partition, None, None)
    first = next((int(cols.offsets[0]) for cols in _records(files[0])), None)
    last = None
    for cols in _records(files[-1]):
        last = int(cols.offsets[-1])
    return ReplicaRange(broker_id, partition, first, last)


def common_range(ranges: list[ReplicaRange]) -> tuple[int, int] | None:
    """The offsets every replica holds, or None when they share none."""
    firsts = [r.first_offset for r in ranges if r.first_offset is not None]
    lasts = [r.last_offset for r in ranges if r.last_offset is not None]
    if len(firsts) < len(ranges) or len(lasts) < len(ranges):
        return None  # a replica that holds no records shares none
    lo, hi = max(firsts), min(lasts)
    return (lo, hi) if lo <= hi else None


def digest_replica(
    segment_files: list[str],
    partition: str,
    broker_id: int | None,
    lo: int,
    hi: int,
    bucket: int,
    algorithm: DigestAlgorithm = DigestAlgorithm.SHA256,
) -> ReplicaDigest:
    """Digest the records with offsets in ``[lo, hi]`` per bucket of ``bucket`` offsets counted from ``lo``, with the
    run's digest algorithm (every broker runs the same plan, so their digests compare)."""
    count = (hi - lo) // bucket + 1
    digests = [LogDigest(timed=False, algorithm=algorithm) for _ in range(count)]
    for path in segment_files:
        if not os.path.getsize(path):
            continue
        for cols in _records(path):
            offsets = cols.offsets
            keep = np.flatnonzero((offsets >= lo) & (offsets <= hi))
            if not len(keep):
                continue
            a0, b0 = int(keep[0]), int(keep[-1]) + 1  # offsets increase: the kept records are one run
            index = (offsets[a0:b0] - lo) // bucket
            cuts = np.flatnonzero(np.diff(index)) + 1
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), b0 - a0]):
                digests[int(index[a])].update(cols.slice(a0 + a, a0 + b))
    return ReplicaDigest(broker_id, partition, lo, hi, bucket, tuple(d.hexdigests()[0] for d in digests))


def compare(replicas: list[ReplicaDigest]) -> Divergence | None:
    """The first offset bucket of the common range in which the replicas' records differ."""
    if len(replicas) < 2:
        return None
    first = replicas[0]
    for k in range(len(first.buckets)):
        seen = {str(r.broker_id): r.buckets[k] for r in replicas}
        if len(set(seen.values())) > 1:
            lo = first.first_offset + k * first.bucket_offsets
            return Divergence(
                first.partition,
                tuple(r.broker_id for r in replicas),
                lo,
                min(lo + first.bucket_offsets - 1, first.last_offset),
                seen,
            )
    return None


# --- the stage, on each broker's host ---------------------------------------------------------------------------


def _files_after_swap(plan: Plan, key: str, partition: str) -> list[str]:
    return _files_after_swap_in(plan.partition(key, partition).dir, plan.plan_id)


def _files_after_swap_in(partition_dir: str, plan_id: str) -> list[str]:
    staged = output_dir(partition_dir, plan_id)
    out = []
    names = {n for n in os.listdir(partition_dir) if SEGMENT_RE.match(n)}
    if staged.is_dir():  # a split source's later outputs exist only staged until the swap
        names |= {n for n in os.listdir(staged) if SEGMENT_RE.match(n)}
    for name in sorted(names):
        candidate = staged / name
        out.append(str(candidate if candidate.exists() else Path(partition_dir) / name))
    return out


def replica_ranges(plan: Plan, key: str, partitions: list[str]) -> list[ReplicaRange]:
    entry, _ = locate(plan, key)
    return [offset_range(_files_after_swap(plan, key, p), p, entry.broker_id) for p in partitions]


def replica_digests(plan: Plan, key: str, spans: list[tuple[str, int, int]], bucket: int) -> list[ReplicaDigest]:
    entry, _ = locate(plan, key)
    return [
        digest_replica(_files_after_swap(plan, key, p), p, entry.broker_id, lo, hi, bucket, plan.options.digest)
        for p, lo, hi in spans
    ]


# --- a peer's replica: a broker of the cluster plan outside this run (--brokers), read only ----------------------
# The run's plan is restricted to its brokers, so a peer's log dir travels as its own entry of the cluster plan; a
# peer already migrated is read from its live files, one not yet migrated from its originals (the content digest is
# the same for both formats).


def _require_peer(entry: LogDirPlan) -> None:
    if not os.path.isdir(entry.log_dir):
        raise MigrateError(
            f"log dir {entry.log_dir} of broker {entry.broker_id} is not there on its host ({socket.gethostname()}): "
            "a disk not mounted, or the log dir moved since the plan? Its replicas stay unchecked until it is back."
        )


def peer_replica_ranges(entry: LogDirPlan, plan_id: str, partitions: list[str]) -> list[ReplicaRange]:
    _require_peer(entry)
    dirs = {p.name: p.dir for p in entry.partitions}
    return [offset_range(_files_after_swap_in(dirs[p], plan_id), p, entry.broker_id) for p in partitions]


def peer_replica_digests(
    entry: LogDirPlan, plan_id: str, spans: list[tuple[str, int, int]], bucket: int, algorithm: DigestAlgorithm
) -> list[ReplicaDigest]:
    _require_peer(entry)
    dirs = {p.name: p.dir for p in entry.partitions}
    return [
        digest_replica(_files_after_swap_in(dirs[p], plan_id), p, entry.broker_id, lo, hi, bucket, algorithm)
        for p, lo, hi in spans
    ]


def fail_divergent(plan: Plan, key: str, divergences: list[Divergence]) -> list[str]:
    """--require-consistent-replicas: fail this log dir's divergent partitions, untouched, before the swap."""
    _, log_dir = locate(plan, key)
    names = {p.name for p in plan.log_dir(key).partitions}
    failed = []
    with StateStore.open(log_dir, plan.plan_id) as store:
        for d in divergences:
            if d.partition not in names:
                continue
            message = (
                f"replicas of {d.partition} differ across brokers {', '.join(map(str, d.brokers))} in offsets "
                f"{d.first_offset}..{d.last_offset}; with --require-consistent-replicas it is not swapped on any "
                "broker of this run (a broker migrated in an earlier run, e.g. the canary, keeps its swap: `rollback` "
                "it there if its copy is the wrong one). Find the right replica (compare with `kafka-log-migrate dump "
                "--print-data-log`), restore the others from it, re-plan and run again."
            )
            store.fail_partition(d.partition, Problem(ProblemKind.REPLICA_DIVERGENCE, message))
            failed.append(d.partition)
    return failed


def converted_digests(plan: Plan, key: str) -> list[StagedDigest]:
    """What this run converted in a log dir (taken from pre-staging or converted in the window), as staged digests:
    a rolling cut-over compares them with the staging its running peers recorded."""
    _, path = locate(plan, key)
    with StateStore.open(path, plan.plan_id) as store:
        return [digest_of(name, base, result) for name, base, result in store.converted_results()]


def peer_staged_digests(log_dir: str, partitions: list[str]) -> list[StagedDigest]:
    """A running peer's staged digests of ``partitions``, read from its default staging tree (read only)."""
    wanted = set(partitions)
    return [d for d in staged_digests(log_dir) if d.partition in wanted]
