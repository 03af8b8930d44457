"""The unit of work and its outcome: small, serializable records (plain dataclasses, JSON round-trippable)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from migrate.segment.indexes import DEFAULT_INDEX_INTERVAL_BYTES

DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's max.message.bytes default: 1 MiB + 12 bytes of log overhead
MAX_SEGMENT_BYTES = 2**31 - 1  # FileRecords cannot open a larger .log
TIMESTAMP_POLICIES = ("mtime", "none")


@dataclass(frozen=True)
class ConvertOptions:
    """How a segment is converted; the same options must give the same bytes on every replica."""

    target_magic: int = 2
    # v0 records: "mtime" = LogAppendTime at the segment's mtime (KIP-32/33 fallback), "none" = CreateTime -1
    # (exactly what Kafka 4's cleaner writes). v1 records always keep their timestamps and timestamp type.
    timestamps: str = "mtime"
    partition_leader_epoch: int = 0
    compression: str | None = None  # None keeps each wrapper's codec (Kafka's cleaner); else recompress all
    pack_bytes: int | None = None  # opt-in: group uncompressed legacy messages into v2 batches up to N bytes
    tombstone_flag: bool = False  # KIP-87: bit 5 of the v2 record attributes on null-value records
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    truncate_tail: bool = False  # drop a partial last entry (the original stays in the backup) instead of refusing
    chunk_bytes: int = 8 << 20  # read size: peak memory is about this plus the largest batch

    def __post_init__(self) -> None:
        if self.target_magic not in (1, 2):
            raise ValueError(f"target magic must be 1 or 2, not {self.target_magic}")
        if self.timestamps not in TIMESTAMP_POLICIES:
            raise ValueError(f"timestamp policy must be one of {TIMESTAMP_POLICIES}, not {self.timestamps!r}")
        if self.compression == "zstd" and self.target_magic < 2:
            raise ValueError("zstd compression needs target magic 2")
        if self.pack_bytes is not None and self.target_magic != 2:
            raise ValueError("--pack-bytes needs target magic 2")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConvertOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class SegmentTask:
    source: str  # path of <base>.log
    staging_dir: str  # where <base>.log/.index/.timeindex are written
    base_offset: int
    options: ConvertOptions = field(default_factory=ConvertOptions)
    expected_size: int | None = None  # refuse if the source changed since planning
    expected_mtime_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = self.options.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SegmentTask:
        d = dict(data)
        d["options"] = ConvertOptions.from_dict(d.get("options", {}))
        return cls(**d)


@dataclass
class SegmentResult:
    source: str
    base_offset: int
    status: str  # "converted" | "unchanged" (already at the target format) | "empty"
    outputs: dict[str, str] = field(default_factory=dict)  # suffix (".log", ".index", ".timeindex") -> staged path
    output_sizes: dict[str, int] = field(default_factory=dict)
    source_bytes: int = 0
    output_bytes: int = 0
    entries_in: int = 0
    batches_out: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    max_timestamp: int = -1
    magics_in: dict[str, int] = field(default_factory=dict)
    source_sha256: str = ""  # offsets, keys, values, headers: must survive any conversion
    output_sha256_ts: str = ""  # the timestamps the output must read back as
    mtime_ns: int = 0
    truncated_tail_bytes: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SegmentResult:
        return cls(**data)
