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
from pathlib import Path
from typing import Any

from migrate.errors import MigrateError
from migrate.kafka.layout import LogDirLayout, Partition, inspect_log_dir, validate_log_dir_path
from migrate.kafka.lock import lock_holder
from migrate.kafka.properties import has_clean_shutdown, read_clean_shutdown, read_meta_properties
from migrate.segment.profile import profile_segment

SCAN_VERSION = 1


def scan_partition(part: Partition) -> dict[str, Any]:
    """One ``partitions`` entry: kafka-log-dirs' fields, then the per-format counts."""
    bytes_by_magic: Counter[str] = Counter()
    batches_by_magic: Counter[str] = Counter()
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
            tail = {"file": str(seg.path), "position": profile.tail_position, "bytes": profile.tail_bytes}
    legacy = any(int(m) < 2 for m in batches_by_magic)
    return {
        "partition": part.topic_partition,
        "size": part.size,
        "offsetLag": 0,
        "isFuture": part.kind == "future",
        "dir": part.name,
        "segments": len(part.segments),
        "bytesByMagic": dict(sorted(bytes_by_magic.items())),
        "batchesByMagic": dict(sorted(batches_by_magic.items())),
        "compressions": dict(sorted(compressions.items())),
        "legacy": legacy,
        # certified only if every segment was read and no broker operation is pending (a .swap becomes live data)
        "v2Only": not legacy and error is None and not part.stray_files,
        "truncatedTail": tail,
        "strayFiles": list(part.stray_files),
        "error": error,
    }


def scan_log_dir(log_dir: str | Path) -> tuple[int | None, dict[str, Any]]:
    """(broker id from meta.properties or None, the ``logDirs`` entry) of one log dir."""
    path = Path(log_dir).resolve()
    entry: dict[str, Any] = {
        "logDir": str(path),
        "error": None,
        "partitions": [],
        "cleanShutdown": False,
        "brokerEpoch": None,
        "locked": False,
        "warnings": [],
    }
    warnings: list[str] = entry["warnings"]
    problem = validate_log_dir_path(str(log_dir))
    if problem:
        entry["error"] = problem
        return None, entry
    live: list[dict[str, Any]] = []
    future: list[dict[str, Any]] = []

    def scanned(part: Partition) -> None:  # one partition's segments held at a time, not the log dir's
        (future if part.kind == "future" else live).append(scan_partition(part))

    try:
        layout: LogDirLayout = inspect_log_dir(path, scanned)
    except MigrateError as exc:
        entry["error"] = str(exc)
        return None, entry
    broker = None
    try:
        meta = read_meta_properties(path)
        broker = meta.broker_id if meta else None
    except (MigrateError, OSError) as exc:
        warnings.append(str(exc))
    entry["cleanShutdown"] = has_clean_shutdown(path)
    try:
        marker = read_clean_shutdown(path)
        entry["brokerEpoch"] = marker.broker_epoch if marker else None
    except (MigrateError, OSError) as exc:
        warnings.append(str(exc))
    try:
        holder = lock_holder(path)
    except (MigrateError, OSError) as exc:
        holder = None
        warnings.append(f"{path}: could not check Kafka's .lock: {exc}")
    entry["locked"] = holder is not None
    if holder is not None:
        who = f" (process {holder})" if holder else ""
        warnings.append(
            f"{path}: Kafka's .lock is held{who}: a broker or a kafka-log-migrate run is using this log dir, so "
            "these counts may already be out of date. Stop the broker before planning a migration."
        )
    elif not entry["cleanShutdown"]:
        warnings.append(
            f"{path}: no .kafka_cleanshutdown marker: the broker did not stop cleanly (or never ran), so its last "
            "segments may hold data that log recovery would truncate. Start the broker, let it recover, and stop it "
            "cleanly before migrating."
        )
    warnings.extend(layout.warnings)
    entry["partitions"] = [*live, *future]
    return broker, entry


def scan_log_dirs(log_dirs: list[str]) -> dict[str, Any]:
    """A read-only inventory of ``log_dirs``: ``kafka-log-dirs --describe`` JSON plus per-format counts and a
    summary saying whether any legacy (v0/v1) data is left."""
    brokers: dict[int | None, list[dict[str, Any]]] = {}
    for raw in log_dirs:
        broker, entry = scan_log_dir(raw)
        brokers.setdefault(broker, []).append(entry)
    _warn_duplicates(brokers)
    all_parts = [p for dirs in brokers.values() for d in dirs for p in d["partitions"]]
    legacy_parts = [p for p in all_parts if p["legacy"]]
    dir_errors = [d["error"] for dirs in brokers.values() for d in dirs if d["error"]]
    return {
        "version": SCAN_VERSION,
        "brokers": [{"broker": b, "logDirs": dirs} for b, dirs in brokers.items()],
        "summary": {
            "partitions": len(all_parts),
            "legacyPartitions": len(legacy_parts),
            "legacyBytes": sum(v for p in all_parts for m, v in p["bytesByMagic"].items() if int(m) < 2),
            "partitionsWithErrors": sum(1 for p in all_parts if p["error"]),
            "logDirsWithErrors": len(dir_errors),
            # a certificate covers only what was read: any unreadable log dir or partition withholds it
            "v2Only": all(p["v2Only"] for p in all_parts) and not dir_errors and bool(log_dirs),
        },
    }


def _warn_duplicates(brokers: dict[int | None, list[dict[str, Any]]]) -> None:
    """A partition live in two log dirs of one broker stops it at start-up ("Duplicate log directories")."""
    for dirs in brokers.values():
        where: dict[str, list[str]] = {}
        for d in dirs:
            for p in d["partitions"]:
                if not p["isFuture"]:
                    where.setdefault(p["partition"], []).append(d["logDir"])
        for name, places in where.items():
            if len(places) > 1:
                for d in dirs:
                    if d["logDir"] in places:
                        d["warnings"].append(
                            f"{name} is live in more than one log dir ({', '.join(places)}): a Kafka broker refuses "
                            "to start with duplicate log directories. Remove the stale copy."
                        )
