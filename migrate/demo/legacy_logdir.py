"""One writer of broker-shaped log dirs, for the demo, the benchmarks and the tests.

A log dir as a cleanly stopped broker leaves it: partition dirs of segment files, with the mtimes that time retention
of untimestamped data depends on, and around them the files the broker keeps: ``meta.properties`` (version 0 with
``broker.id``, or KRaft's version 1 with ``node.id`` and ``directory.id``), ``.kafka_cleanshutdown`` (the 3.7+ JSON
form), the four offset checkpoints of the log dir root, and per partition ``partition.metadata`` and
``leader-epoch-checkpoint``. Callers decide what the segments hold (records encoded by ``migrate.format``, the fast
generator of ``benchmarks/gen_legacy.py``, or Kafka-written fixture bytes copied as they are); the files around them
come from here, so every log dir the project makes passes the same checks ``plan`` applies to a real one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from migrate.kafka.names import FileKind, segment_name

# java.util.Properties.store() writes a comment line and the date; a fixed date keeps generated log dirs identical
PROPERTIES_HEADER = "#\n#Thu Jan 01 00:00:00 UTC 2025\n"


@dataclass(frozen=True)
class PartitionFiles:
    """What a broker records about one partition outside its segments."""

    topic: str
    partition: int
    log_end_offset: int  # the recovery point and high watermark a clean shutdown checkpoints
    leader_epochs: tuple[tuple[int, int], ...] = ((0, 0),)  # (epoch, start offset); () for a pre-0.11 partition
    topic_id: str | None = None  # None: a stable id derived from the topic name
    first_dirty_offset: int | None = None  # compacted topics: the cleaner-offset-checkpoint entry

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class BrokerFiles:
    """What a broker records about itself in the log dir root."""

    broker_id: int = 1
    cluster_id: str | None = None  # brokers before 0.10.1 wrote none
    broker_epoch: int = 1
    clean_shutdown: bool = True
    kraft: bool = False  # meta.properties version 1 (node.id, directory.id) instead of version 0 (broker.id)
    stale_lock: bool = False  # an unheld .lock, as a killed broker leaves it (a clean stop deletes it)


def topic_id(topic: str) -> str:
    """A stable Kafka topic id for ``topic`` (base64url without padding, as ``Uuid.toString``; like
    ``Uuid.randomUuid`` it never starts with '-', and it is never the zero/metadata id)."""
    salt = 0
    while True:
        raw = hashlib.sha256(f"{topic}/{salt}".encode()).digest()[:16]
        text = base64.urlsafe_b64encode(uuid.UUID(bytes=raw, version=4).bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
        salt += 1


def checkpoint_text(entries: Iterable[tuple[str, int, int]]) -> str:
    """An OffsetCheckpointFile body: version 0, count, ``topic partition offset`` lines."""
    rows = list(entries)
    return "".join(["0\n", f"{len(rows)}\n", *(f"{t} {p} {o}\n" for t, p, o in rows)])


def leader_epoch_text(entries: Sequence[tuple[int, int]]) -> str:
    """A LeaderEpochCheckpointFile body: version 0, count, ``epoch startOffset`` lines."""
    return "".join(["0\n", f"{len(entries)}\n", *(f"{e} {o}\n" for e, o in entries)])


def write_segment(
    partition_dir: Path, base_offset: int, data: bytes | Iterable[bytes], mtime_ns: int | None = None
) -> Path:
    """``<partition dir>/<base offset>.log`` from bytes or from chunks (a segment of gigabytes never sits in memory
    whole), with ``mtime_ns`` as its mtime when given."""
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / segment_name(base_offset, FileKind.LOG)
    with path.open("wb") as f:
        for chunk in [data] if isinstance(data, (bytes, bytearray, memoryview)) else data:
            f.write(chunk)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def write_broker_files(log_dir: Path, partitions: Sequence[PartitionFiles], broker: BrokerFiles | None = None) -> None:
    """Every file a cleanly stopped broker keeps beside the segments of ``partitions`` (whose dirs may already hold
    segments). The checkpoints list exactly ``partitions``."""
    broker = broker or BrokerFiles()
    log_dir.mkdir(parents=True, exist_ok=True)
    for p in partitions:
        part = log_dir / p.dir_name
        part.mkdir(exist_ok=True)
        # PartitionMetadataFile: two lines, no newline after the last (what Kafka writes)
        (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {p.topic_id or topic_id(p.topic)}")
        (part / "leader-epoch-checkpoint").write_text(leader_epoch_text(p.leader_epochs))
    ends = [(p.topic, p.partition, p.log_end_offset) for p in partitions]
    # a clean shutdown checkpoints recovery point = high watermark = log end offset for every partition; log start
    # offsets only where they are above the first segment's base offset (never, here)
    (log_dir / "recovery-point-offset-checkpoint").write_text(checkpoint_text(ends))
    (log_dir / "replication-offset-checkpoint").write_text(checkpoint_text(ends))
    (log_dir / "log-start-offset-checkpoint").write_text(checkpoint_text([]))
    cleaner = [(p.topic, p.partition, p.first_dirty_offset) for p in partitions if p.first_dirty_offset is not None]
    (log_dir / "cleaner-offset-checkpoint").write_text(checkpoint_text(cleaner))
    cluster = f"cluster.id={broker.cluster_id}\n" if broker.cluster_id else ""
    if broker.kraft:
        directory_id = topic_id(f"directory:{log_dir.name}")
        meta = f"version=1\nnode.id={broker.broker_id}\n{cluster}directory.id={directory_id}\n"
    else:
        meta = f"version=0\nbroker.id={broker.broker_id}\n{cluster}"
    (log_dir / "meta.properties").write_text(PROPERTIES_HEADER + meta)
    if broker.clean_shutdown:
        (log_dir / ".kafka_cleanshutdown").write_text(f'{{"version":0,"brokerEpoch":{broker.broker_epoch}}}')
    if broker.stale_lock:
        (log_dir / ".lock").touch()
