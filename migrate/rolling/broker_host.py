"""What a rolling run asks on a broker's own host, through that broker's worker: which broker this worker serves,
and whether the broker has let go of its log dirs after a clean shutdown. Both only read."""

from __future__ import annotations

from dataclasses import dataclass

from migrate.errors import MigrateError
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown, log_dirs_of, read_meta_properties


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
