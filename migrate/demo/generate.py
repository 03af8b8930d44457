"""A self-contained demonstration: write a broker log dir full of legacy segments, then migrate it.

The log dir looks like one a Kafka 0.10 broker left behind: magic 0 and 1 data, uncompressed and in gzip, snappy and
lz4 wrappers, LogAppendTime and CreateTime topics, compaction gaps, a partition already in v2, and the files a
broker keeps (meta.properties, checkpoints, .kafka_cleanshutdown, partition.metadata, leader-epoch-checkpoint), written
by the project's one log-dir writer, ``migrate.demo.legacy_logdir``.
"""

from __future__ import annotations

import random
from pathlib import Path

from migrate.demo.legacy_logdir import BrokerFiles, PartitionFiles, write_broker_files, write_segment
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.records import Compression, Record, TimestampType

DEMO_START_MS = 1_483_228_800_000  # 2017-01-01T00:00:00Z
DEMO_CLUSTER_ID = "demo-cluster-kafka-log-migrate"
TOPICS = [
    # name, magic, codec, records per wrapper (1 = uncompressed), timestamp type
    ("orders-v0", 0, Compression.NONE, 1, None),
    ("clicks-v0-gzip", 0, Compression.GZIP, 50, None),
    ("payments-v1-lz4", 1, Compression.LZ4, 20, TimestampType.CREATE_TIME),
    ("audit-v1-append-time", 1, Compression.SNAPPY, 10, TimestampType.LOG_APPEND_TIME),
    ("profiles-compacted-v0", 0, Compression.NONE, 1, None),
    ("events-v2", 2, Compression.ZSTD, 25, TimestampType.CREATE_TIME),
]


def _records(rng: random.Random, first: int, count: int, magic: int, gaps: bool) -> list[Record]:
    out = []
    offset = first
    for i in range(count):
        key = None if i % 13 == 0 else f"key-{rng.randrange(200)}".encode()
        value = None if (gaps and i % 9 == 0) else rng.randbytes(rng.randrange(20, 300))
        ts = DEMO_START_MS + offset * 1000 if magic >= 1 else -1
        out.append(Record(offset, ts, key, value))
        offset += 1 + (rng.randrange(3) if gaps else 0)
    return out


def _segment_bytes(
    records: list[Record], magic: int, codec: Compression, per: int, tstype: TimestampType | None
) -> bytes:
    parts = []
    for i in range(0, len(records), per):
        chunk = records[i : i + per]
        if magic == 2:
            parts.append(v2.encode_batch(chunk, compression=codec, partition_leader_epoch=0))
        elif codec == Compression.NONE:
            parts.append(legacy.encode_messages(chunk, magic, tstype or TimestampType.CREATE_TIME))
        else:
            append_time = chunk[-1].timestamp if tstype == TimestampType.LOG_APPEND_TIME else None
            parts.append(legacy.encode_wrapper(chunk, magic, codec, tstype or TimestampType.CREATE_TIME, append_time))
    return b"".join(parts)


def write_demo_logdir(root: str | Path, records_per_partition: int = 3000, partitions: int = 2, seed: int = 42) -> Path:
    """Write the demo log dir under ``root`` and return its path."""
    log_dir = Path(root)
    rng = random.Random(seed)
    written: list[PartitionFiles] = []
    for name, magic, codec, per, tstype in TOPICS:
        for p in range(partitions):
            part = log_dir / f"{name}-{p}"
            records = _records(rng, 0, records_per_partition, magic, gaps="compacted" in name)
            segment_size = max(1, len(records) // 3)
            for s in range(0, len(records), segment_size):
                chunk = records[s : s + segment_size]
                mtime_ns = (DEMO_START_MS + chunk[-1].offset * 1000 + 500) * 1_000_000
                write_segment(part, chunk[0].offset, _segment_bytes(chunk, magic, codec, per, tstype), mtime_ns)
            # a partition first written in v0/v1 has no leader epochs: the broker of that time kept none
            epochs = ((0, 0),) if magic == 2 else ()
            written.append(PartitionFiles(name, p, records[-1].offset + 1, leader_epochs=epochs))
    write_broker_files(log_dir, written, BrokerFiles(broker_id=1, cluster_id=DEMO_CLUSTER_ID, broker_epoch=7))
    return log_dir
