"""Broker-shaped log dirs for tests: fixture partitions plus every file a real Kafka broker keeps beside them."""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from pathlib import Path

from conftest import FIXTURES, LEGACY_LOGDIR, apply_mtimes


def make_broker_logdir(
    tmp_path: Path, partitions: list[str], broker_id: int = 1, clean_shutdown: bool = True, name: str = "kafka-logs"
) -> Path:
    """Copy ``partitions`` of the fixture log dir into ``tmp_path/name`` and add a broker's other files."""
    log_dir = tmp_path / name
    log_dir.mkdir(parents=True)
    lines = []
    for i, part in enumerate(partitions):
        dst = log_dir / part
        shutil.copytree(LEGACY_LOGDIR / part, dst)
        for p in [dst, *dst.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        topic_id = base64.urlsafe_b64encode(uuid.UUID(int=1000 + i).bytes).decode().rstrip("=")
        (dst / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
        (dst / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        topic, _, number = part.rpartition("-")
        last = max(int(p.stem) for p in dst.glob("*.log"))
        lines.append(f"{topic} {number} {last}")
    apply_mtimes(log_dir, FIXTURES / "mtimes.json")
    body = f"0\n{len(lines)}\n" + "\n".join(lines) + "\n"
    for checkpoint in (
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        "log-start-offset-checkpoint",
    ):
        (log_dir / checkpoint).write_text(body)
    (log_dir / "cleaner-offset-checkpoint").write_text("0\n0\n")
    (log_dir / "meta.properties").write_text(f"version=0\nbroker.id={broker_id}\ncluster.id=test-cluster\n")
    if clean_shutdown:
        (log_dir / ".kafka_cleanshutdown").write_text(json.dumps({"version": 0, "brokerEpoch": 7}))
    return log_dir
