"""A read-only inventory of a broker's log dirs, shaped like ``kafka-log-dirs --describe`` output.

Per partition it adds the bytes and entries in each magic, and certifies it ``v2Only`` when no legacy entry is
left: the check KIP-724 says Kafka itself lacks ("we don't have a good mechanism to ensure data with the old formats
doesn't exist on disk"). Nothing is written, not even Kafka's .lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from migrate.logdir import has_clean_shutdown, is_locked, list_partitions
from migrate.segment.profile import profile_segment


def _broker_id(log_dir: Path) -> int | None:
    meta = log_dir / "meta.properties"
    if not meta.exists():
        return None
    for line in meta.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("broker.id", "node.id") and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def scan_partition(path: Path, segments: list) -> dict[str, Any]:
    bytes_by_magic: dict[str, int] = {}
    batches_by_magic: dict[str, int] = {}
    compressions: dict[str, int] = {}
    tail = None
    for seg in segments:
        profile = profile_segment(seg.path)
        for into, part in (
            (bytes_by_magic, profile.bytes_by_magic),
            (batches_by_magic, profile.entries_by_magic),
            (compressions, profile.compressions),
        ):
            for k, v in part.items():
                into[k] = into.get(k, 0) + v
        if profile.tail_bytes:
            tail = {"file": str(seg.path), "position": profile.tail_position, "bytes": profile.tail_bytes}
    legacy_left = any(int(m) < 2 for m in batches_by_magic)
    return {
        "partition": path.name,
        "size": sum(s.size for s in segments),
        "offsetLag": 0,
        "isFuture": False,
        "segments": len(segments),
        "bytesByMagic": bytes_by_magic,
        "batchesByMagic": batches_by_magic,
        "compressions": compressions,
        "legacy": legacy_left,
        "v2Only": not legacy_left,
        "truncatedTail": tail,
    }


def scan_log_dirs(log_dirs: list[str]) -> dict[str, Any]:
    brokers: dict[int | None, list[dict[str, Any]]] = {}
    for raw in log_dirs:
        log_dir = Path(raw).resolve()
        entry: dict[str, Any] = {"logDir": str(log_dir), "error": None, "partitions": [], "warnings": []}
        if not log_dir.is_dir():
            entry["error"] = "not a directory"
            brokers.setdefault(None, []).append(entry)
            continue
        entry["cleanShutdown"] = has_clean_shutdown(log_dir)
        entry["locked"] = is_locked(log_dir)
        partitions, warnings = list_partitions(log_dir)
        entry["warnings"] = warnings
        entry["partitions"] = [scan_partition(p.path, p.segments) for p in partitions]
        brokers.setdefault(_broker_id(log_dir), []).append(entry)
    all_parts = [p for dirs in brokers.values() for d in dirs for p in d["partitions"]]
    legacy_parts = [p for p in all_parts if p["legacy"]]
    return {
        "version": 1,
        "brokers": [{"broker": b, "logDirs": dirs} for b, dirs in brokers.items()],
        "summary": {
            "partitions": len(all_parts),
            "legacyPartitions": len(legacy_parts),
            "legacyBytes": sum(v for p in all_parts for m, v in p["bytesByMagic"].items() if int(m) < 2),
            "v2Only": not legacy_parts,
        },
    }
