"""replicas: digests of each broker's replicas, for the client to compare across brokers (migrate.replicas).

Run after conversion and before the swap, pinned to each broker's host: a replica is read from the files that will
be live after the swap (a segment's staged output where it was converted, the live file otherwise).
"""

from __future__ import annotations

import os
from pathlib import Path

from migrate.kafka.names import SEGMENT_RE
from migrate.model import Divergence, Plan, Problem, ReplicaDigest, ReplicaRange
from migrate.replicas import digest_replica, offset_range
from migrate.run.state import StateStore
from migrate.run.workspace import staging_dir
from migrate.stages.common import locate


def _files_after_swap(plan: Plan, key: str, partition: str) -> list[str]:
    part = plan.partition(key, partition)
    staged = staging_dir(part.dir, plan.plan_id)
    out = []
    for name in sorted(os.listdir(part.dir)):
        if not SEGMENT_RE.match(name):
            continue
        candidate = staged / name
        out.append(str(candidate if candidate.exists() else Path(part.dir) / name))
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
                f"{d.first_offset}..{d.last_offset}; with --require-consistent-replicas it is not swapped on any of "
                "them. Find the right replica (compare with `kafka-log-migrate dump --print-data-log`), restore the "
                "others from it, re-plan and run again."
            )
            store.fail_partition(d.partition, Problem("replica-divergence", message))
            failed.append(d.partition)
    return failed
