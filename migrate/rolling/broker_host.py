"""What a rolling run asks on a broker's own host, through that broker's worker: which broker this worker serves,
what would refuse its cut-over while it still runs, whether the broker has let go of its log dirs after a clean
shutdown, and at the end what legacy data its log dirs hold. All only read."""

from __future__ import annotations

from dataclasses import dataclass

from migrate.errors import MigrateError, PlanProblem
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown, log_dirs_of, read_meta_properties
from migrate.planning.checks import before_stop
from migrate.reports.scan import scan_log_dir


@dataclass(frozen=True)
class WorkerBroker:
    """The broker a worker serves, found in its log dirs' meta.properties, or why it could not be told."""

    worker: str
    broker_id: int | None
    log_dirs: tuple[str, ...]
    problem: str = ""


@dataclass(frozen=True)
class LogDirRelease:
    """One log dir after a stop: who still holds Kafka's ``.lock`` (a pid, 0 if unknown) and the clean-shutdown
    marker, which Kafka writes on a clean stop only (a killed broker leaves none)."""

    log_dir: str
    lock_holder: int | None
    clean_shutdown: bool

    @property
    def released(self) -> bool:
        return self.lock_holder is None and self.clean_shutdown


def identify(log_dirs: tuple[str, ...], broker_config: str | None, worker: str) -> WorkerBroker:
    """Run on a worker: the broker whose log dirs (given, or ``log.dirs`` of ``broker_config``) it sees."""
    try:
        dirs = log_dirs_of(broker_config) if broker_config else log_dirs
        ids = {meta.broker_id for d in dirs if (meta := read_meta_properties(d)) is not None}
    except (MigrateError, OSError) as exc:
        return WorkerBroker(worker, None, tuple(log_dirs), str(exc))
    if len(ids) != 1 or None in ids:
        why = f"broker ids {sorted(map(str, ids))}" if ids else "no meta.properties with a broker.id or node.id"
        return WorkerBroker(worker, None, tuple(dirs), f"log dirs {', '.join(dirs)}: {why}")
    return WorkerBroker(worker, ids.pop(), tuple(dirs))


def release_state(log_dirs: tuple[str, ...]) -> tuple[LogDirRelease, ...]:
    """Run on a worker: each log dir's lock holder and clean-shutdown marker, now."""
    return tuple(LogDirRelease(d, lock_holder(d), has_clean_shutdown(d)) for d in log_dirs)


def cut_over_refusals(log_dirs: tuple[str, ...]) -> tuple[PlanProblem, ...]:
    """Run on a worker, its broker running: what would refuse the plan of its log dirs after the stop and can be told
    now (an earlier migration not finalized or rolled back, a fence, a path that is no log dir)."""
    return tuple(problem for d in log_dirs for problem in before_stop(d))


@dataclass(frozen=True)
class LegacyPartition:
    log_dir: str
    partition: str
    legacy_bytes: int


@dataclass(frozen=True)
class LegacyLeft:
    """One broker's log dirs as ``scan`` reads them: the partitions that hold v0/v1 batches, and what could not be
    read (which withholds the certificate)."""

    worker: str
    partitions: tuple[LegacyPartition, ...]
    unreadable: tuple[str, ...]

    @property
    def v2_only(self) -> bool:
        return not self.partitions and not self.unreadable


def legacy_left(log_dirs: tuple[str, ...], worker: str) -> LegacyLeft:
    """Run on a worker, its broker running again: ``scan`` of its log dirs (read-only, the lock only probed)."""
    legacy: list[LegacyPartition] = []
    unreadable: list[str] = []
    for d in log_dirs:
        _, entry = scan_log_dir(d)
        if entry.error:
            unreadable.append(entry.error)
        for p in entry.partitions:
            if p.legacy:
                legacy.append(LegacyPartition(entry.log_dir, p.partition, p.legacy_bytes))
            elif p.error:
                unreadable.append(p.error)
    return LegacyLeft(worker, tuple(legacy), tuple(unreadable))
