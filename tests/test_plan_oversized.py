"""The plan names each partition where a legacy entry converts to a v2 batch over 1 MiB, the consumers' default
max.partition.fetch.bytes (a consumer fetching several partitions at once may stall on it), and no other."""

from __future__ import annotations

import hashlib
from pathlib import Path

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.format.legacy import encode_message
from migrate.kafka.names import segment_name
from migrate.planning.plan import CONSUMER_FETCH_BYTES, build_plan
from migrate.planning.request import PlanRequest


def _value(size: int) -> bytes:
    """Bytes that do not compress: the size of the entry is the size of the batch."""
    return b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(size // 32 + 1))[:size]


def _log_dir(tmp_path: Path, values: dict[str, list[int]]) -> Path:
    log_dir = tmp_path / "kafka-logs"
    for topic, sizes in values.items():
        part = log_dir / f"{topic}-0"
        part.mkdir(parents=True)
        entries = [encode_message(i, 0, 0, -1, b"k", _value(n)) for i, n in enumerate(sizes)]
        (part / segment_name(0, ".log")).write_bytes(b"".join(entries))
    write_broker_files(log_dir, [PartitionFiles(t, 0, len(v)) for t, v in values.items()])
    return log_dir


def test_the_plan_names_the_partitions_whose_converted_batches_pass_a_mebibyte(tmp_path):
    big = CONSUMER_FETCH_BYTES - 40  # about 26 bytes of v0 framing: this entry passes 1 MiB as a v2 batch
    log_dir = _log_dir(
        tmp_path, {"photos": [100, big, 200], "small": [100, 50_000], "edge": [CONSUMER_FETCH_BYTES // 2]}
    )
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    oversized = [w for w in plan.warnings if "max.partition.fetch.bytes" in w]
    assert len(oversized) == 1, plan.warnings
    assert oversized[0].startswith("photos-0: ") and "00000000000000000000.log at byte position 127 " in oversized[0]
    assert not any(w.startswith(("small-0", "edge-0")) for w in plan.warnings)
