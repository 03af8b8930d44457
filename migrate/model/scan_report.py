"""The scan report: a read-only inventory of a broker's log dirs, shaped like ``kafka-log-dirs --describe`` output.

Built by ``migrate.reports.scan`` and read by attribute; written and read back by the codec under kafka-log-dirs'
camelCase keys (each field's ``json_key``), in field order: ``to_json(report)`` is the JSON ``scan --json`` prints,
``from_json(ScanReport, data)`` the one way back, refusing a wrong key or type with the path of the value.
Magics are ints here and decimal strings in the JSON ("0", "1", "2"), as in the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCAN_VERSION = 1


@dataclass(frozen=True)
class TruncatedTail:
    """The partial entry a segment ends with: where it starts and how many bytes it holds."""

    file: str
    position: int
    bytes: int


@dataclass(frozen=True)
class PartitionScan:
    """One ``partitions`` entry: kafka-log-dirs' fields, then the per-format counts."""

    partition: str
    size: int
    offset_lag: int = field(metadata={"json_key": "offsetLag"})
    is_future: bool = field(metadata={"json_key": "isFuture"})
    dir: str
    segments: int
    bytes_by_magic: dict[int, int] = field(metadata={"json_key": "bytesByMagic"})
    batches_by_magic: dict[int, int] = field(metadata={"json_key": "batchesByMagic"})
    compressions: dict[str, int]
    legacy: bool
    # certified only if every segment was read and no broker operation is pending (a .swap becomes live data)
    v2_only: bool = field(metadata={"json_key": "v2Only"})
    truncated_tail: TruncatedTail | None = field(metadata={"json_key": "truncatedTail"})
    stray_files: tuple[str, ...] = field(metadata={"json_key": "strayFiles"})
    error: str | None

    @property
    def legacy_bytes(self) -> int:
        return sum(n for magic, n in self.bytes_by_magic.items() if magic < 2)


@dataclass(frozen=True)
class LogDirScan:
    """One ``logDirs`` entry: the log dir's partitions (live, then future replicas) and what its files say."""

    log_dir: str = field(metadata={"json_key": "logDir"})
    error: str | None
    partitions: tuple[PartitionScan, ...]
    clean_shutdown: bool = field(metadata={"json_key": "cleanShutdown"})
    broker_epoch: int | None = field(metadata={"json_key": "brokerEpoch"})
    locked: bool
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class BrokerScan:
    broker: int | None
    log_dirs: tuple[LogDirScan, ...] = field(metadata={"json_key": "logDirs"})


@dataclass(frozen=True)
class ScanSummary:
    partitions: int
    legacy_partitions: int = field(metadata={"json_key": "legacyPartitions"})
    legacy_bytes: int = field(metadata={"json_key": "legacyBytes"})
    partitions_with_errors: int = field(metadata={"json_key": "partitionsWithErrors"})
    log_dirs_with_errors: int = field(metadata={"json_key": "logDirsWithErrors"})
    # a certificate covers only what was read: any unreadable log dir or partition withholds it
    v2_only: bool = field(metadata={"json_key": "v2Only"})


@dataclass(frozen=True)
class ScanReport:
    """``kafka-log-dirs --describe`` JSON plus per-format counts and a summary saying whether any legacy (v0/v1)
    data is left."""

    version: int
    brokers: tuple[BrokerScan, ...]
    summary: ScanSummary

    def partitions(self) -> list[tuple[LogDirScan, PartitionScan]]:
        """Every partition scanned, with its log dir, in report order."""
        return [(d, p) for b in self.brokers for d in b.log_dirs for p in d.partitions]
