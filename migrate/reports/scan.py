"""A read-only inventory of a broker's log dirs, shaped like ``kafka-log-dirs --describe`` output.

Per partition it adds the bytes and entries in each magic, and certifies it ``v2Only`` when no legacy entry is
left: the check KIP-724 says Kafka itself lacks ("we don't have a good mechanism to ensure data with the old formats
doesn't exist on disk"). Every ``.log`` is streamed through ``walk_entries`` (entry positions, sizes and magic
bytes; nothing is decoded). Nothing is written, not even Kafka's ``.lock``: the lock is probed with ``F_GETLK``.

A problem in one partition (a corrupt entry header, an unreadable file) is reported on that partition and the scan
goes on; such a partition is not certified.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from migrate.errors import MigrateError
from migrate.kafka.layout import LogDirLayout, Partition, inspect_log_dir, validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown, read_clean_shutdown, read_meta_properties
from migrate.model.scan_report import (
    SCAN_VERSION,
    BrokerScan,
    LogDirScan,
    PartitionScan,
    ScanReport,
    ScanSummary,
    TruncatedTail,
)
from migrate.segment.profile import profile_segment


def scan_partition(part: Partition) -> PartitionScan:
    """One partition's segments, streamed: kafka-log-dirs' fields, then the per-format counts."""
    bytes_by_magic: Counter[int] = Counter()
    batches_by_magic: Counter[int] = Counter()
    compressions: Counter[str] = Counter()
    tail = None
    error = None
    for seg in part.segments:
        if seg.size == 0:
            continue
        try:
            profile = profile_segment(seg.path)
        except (MigrateError, OSError) as exc:
            error = str(exc) if isinstance(exc, MigrateError) else f"{seg.path}: cannot read ({exc.strerror})"
            break
        bytes_by_magic.update(profile.bytes_by_magic)
        batches_by_magic.update(profile.entries_by_magic)
        compressions.update(profile.compressions)
        if profile.tail_bytes:
            tail = TruncatedTail(str(seg.path), profile.tail_position or 0, profile.tail_bytes)
    legacy = any(m < 2 for m in batches_by_magic)
    return PartitionScan(
        partition=part.topic_partition,
        size=part.size,
        offset_lag=0,
        is_future=part.kind == "future",
        dir=part.name,
        segments=len(part.segments),
        bytes_by_magic=dict(sorted(bytes_by_magic.items())),
        batches_by_magic=dict(sorted(batches_by_magic.items())),
        compressions=dict(sorted(compressions.items())),
        legacy=legacy,
        v2_only=not legacy and error is None and not part.stray_files,
        truncated_tail=tail,
        stray_files=tuple(part.stray_files),
        error=error,
    )


def _unreadable(path: Path, error: str) -> LogDirScan:
    return LogDirScan(str(path), error, (), clean_shutdown=False, broker_epoch=None, locked=False, warnings=())


def scan_log_dir(log_dir: str | Path) -> tuple[int | None, LogDirScan]:
    """(broker id from meta.properties or None, the ``logDirs`` entry) of one log dir."""
    path = Path(log_dir).resolve()
    warnings: list[str] = []
    problem = validate_log_dir_path(str(log_dir))
    if problem:
        return None, _unreadable(path, problem)
    live: list[PartitionScan] = []
    future: list[PartitionScan] = []

    def scanned(part: Partition) -> None:  # one partition's segments held at a time, not the log dir's
        (future if part.kind == "future" else live).append(scan_partition(part))

    try:
        layout: LogDirLayout = inspect_log_dir(path, scanned)
    except MigrateError as exc:
        return None, _unreadable(path, str(exc))
    broker = None
    try:
        meta = read_meta_properties(path)
        broker = meta.broker_id if meta else None
    except (MigrateError, OSError) as exc:
        warnings.append(str(exc))
    clean_shutdown = has_clean_shutdown(path)
    broker_epoch = None
    try:
        marker = read_clean_shutdown(path)
        broker_epoch = marker.broker_epoch if marker else None
    except (MigrateError, OSError) as exc:
        warnings.append(str(exc))
    try:
        holder = lock_holder(path)
    except (MigrateError, OSError) as exc:
        holder = None
        warnings.append(f"{path}: could not check Kafka's .lock: {exc}")
    if holder is not None:
        who = f" (process {holder})" if holder else ""
        warnings.append(
            f"{path}: Kafka's .lock is held{who}: a broker or a kafka-log-migrate run is using this log dir, so "
            "these counts may already be out of date. Stop the broker before planning a migration."
        )
    elif not clean_shutdown:
        warnings.append(
            f"{path}: no .kafka_cleanshutdown marker: the broker did not stop cleanly (or never ran), so its last "
            "segments may hold data that log recovery would truncate. Start the broker, let it recover, and stop it "
            "cleanly before migrating."
        )
    warnings.extend(layout.warnings)
    entry = LogDirScan(
        log_dir=str(path),
        error=None,
        partitions=(*live, *future),
        clean_shutdown=clean_shutdown,
        broker_epoch=broker_epoch,
        locked=holder is not None,
        warnings=tuple(warnings),
    )
    return broker, entry


def scan_log_dirs(log_dirs: list[str]) -> ScanReport:
    """A read-only inventory of ``log_dirs``: ``kafka-log-dirs --describe`` JSON plus per-format counts and a
    summary saying whether any legacy (v0/v1) data is left."""
    brokers: dict[int | None, list[LogDirScan]] = {}
    for raw in log_dirs:
        broker, entry = scan_log_dir(raw)
        brokers.setdefault(broker, []).append(entry)
    scans = tuple(BrokerScan(b, _warn_duplicates(dirs)) for b, dirs in brokers.items())
    all_parts = [p for b in scans for d in b.log_dirs for p in d.partitions]
    dir_errors = [d.error for b in scans for d in b.log_dirs if d.error]
    summary = ScanSummary(
        partitions=len(all_parts),
        legacy_partitions=sum(1 for p in all_parts if p.legacy),
        legacy_bytes=sum(p.legacy_bytes for p in all_parts),
        partitions_with_errors=sum(1 for p in all_parts if p.error),
        log_dirs_with_errors=len(dir_errors),
        v2_only=all(p.v2_only for p in all_parts) and not dir_errors and bool(log_dirs),
    )
    return ScanReport(SCAN_VERSION, scans, summary)


def _warn_duplicates(dirs: list[LogDirScan]) -> tuple[LogDirScan, ...]:
    """One broker's log dirs, each warned of a partition it shares live with another: a partition live in two log
    dirs of one broker stops it at start-up ("Duplicate log directories")."""
    where: dict[str, list[str]] = {}
    for d in dirs:
        for p in d.partitions:
            if not p.is_future:
                where.setdefault(p.partition, []).append(d.log_dir)
    shared = {name: places for name, places in where.items() if len(places) > 1}
    if not shared:
        return tuple(dirs)
    return tuple(
        replace(
            d,
            warnings=(
                *d.warnings,
                *(
                    f"{name} is live in more than one log dir ({', '.join(places)}): a Kafka broker refuses "
                    "to start with duplicate log directories. Remove the stale copy."
                    for name, places in shared.items()
                    if d.log_dir in places
                ),
            ),
        )
        for d in dirs
    )
