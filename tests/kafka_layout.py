"""Broker-shaped log dirs for tests: fixture partitions plus every file a real Kafka broker keeps beside them.

``make_broker_logdir(tmp_path, partitions=[...])`` copies fixture partition dirs (Kafka-written bytes, with the fixture
mtimes) into ``tmp_path/kafka-logs`` and adds what a cleanly stopped broker leaves, written by the project's one
log-dir writer (``migrate.demo.legacy_logdir``): ``meta.properties``, ``.kafka_cleanshutdown`` (3.7+ JSON form), the
four offset checkpoints of the log dir root, and per partition ``partition.metadata`` (one topic id per topic) and
``leader-epoch-checkpoint``. A cleanly stopped broker has no ``.lock`` (it deletes it on shutdown);
``stale_lock=True`` leaves an unheld one, as a killed broker does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import EXPECTED, FIXTURES, LEGACY_LOGDIR, REAL_BROKER, apply_mtimes

from migrate.demo.legacy_logdir import BrokerFiles, PartitionFiles, checkpoint_text, topic_id, write_broker_files

__all__ = [
    "BROKER_EPOCH",
    "CLUSTER_ID",
    "checkpoint_text",
    "lock_held_by_other_process",
    "make_broker_logdir",
    "topic_id",
]

# (segments dir, mtimes manifest, Kafka's summaries) of each fixture source
SOURCES = {
    "legacy": (LEGACY_LOGDIR, FIXTURES / "mtimes.json", EXPECTED / "summary.jsonl"),
    "real-broker": (REAL_BROKER / "logdir", REAL_BROKER / "mtimes.json", REAL_BROKER / "expected" / "summary.jsonl"),
}
CLUSTER_ID = "kLm1gRaTeTeStClUsTeR0A"
BROKER_EPOCH = 7


def _summaries(source: str) -> dict[str, dict]:
    lines = SOURCES[source][2].read_text().splitlines()
    return {d["path"]: d for d in map(json.loads, lines) if "/" not in d["path"]}


def log_end_offset(partition_dir: Path, summary: dict | None) -> int:
    """Next offset after the last record (Kafka's view), or the last segment's base offset if there is none."""
    if summary and summary.get("lastOffset") is not None:
        return int(summary["lastOffset"]) + 1
    return max((int(p.stem) for p in partition_dir.glob("*.log")), default=0)


def make_broker_logdir(
    tmp_path: Path,
    partitions: list[str],
    broker_id: int = 1,
    clean_shutdown: bool = True,
    name: str = "kafka-logs",
    *,
    source: str = "legacy",
    kraft: bool = False,
    stale_lock: bool = False,
) -> Path:
    """Copy ``partitions`` (fixture partition dir names) of ``source`` ("legacy" or "real-broker") into
    ``tmp_path/name`` with their fixture mtimes, and add a broker's other files. ``kraft`` writes a version 1
    meta.properties (node.id, directory.id) instead of version 0 (broker.id)."""
    src, manifest, _ = SOURCES[source]
    summaries = _summaries(source)
    log_dir = tmp_path / name
    log_dir.mkdir(parents=True)
    files: list[PartitionFiles] = []
    for part in partitions:
        dst = log_dir / part
        shutil.copytree(src / part, dst)
        for p in [dst, *dst.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        topic, _, number = part.rpartition("-")
        # first dirty offset of a compacted topic: the cleaner never cleans the active segment
        dirty = max(int(p.stem) for p in dst.glob("*.log")) if topic.startswith("compacted") else None
        files.append(
            PartitionFiles(topic, int(number), log_end_offset(dst, summaries.get(part)), first_dirty_offset=dirty)
        )
    apply_mtimes(log_dir, manifest)
    broker = BrokerFiles(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        broker_epoch=BROKER_EPOCH,
        clean_shutdown=clean_shutdown,
        kraft=kraft,
        stale_lock=stale_lock,
    )
    write_broker_files(log_dir, files, broker)
    return log_dir


_HOLDER = """
import fcntl, os, sys
path, kind = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # FileChannel.open(CREATE, READ, WRITE)
if kind == "fcntl":
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # FileChannel.tryLock(): fcntl(F_SETLK, F_WRLCK, whole file)
else:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BSD flock(2): not what Kafka uses
print("locked", flush=True)
sys.stdin.read()  # hold until the test closes our stdin
"""


@contextmanager
def lock_held_by_other_process(log_dir: Path, kind: str = "fcntl") -> Iterator[subprocess.Popen]:
    """Hold ``<log dir>/.lock`` from another process while the block runs: ``kind="fcntl"`` locks it as a running
    broker's JVM does (``FileChannel.tryLock``), ``kind="flock"`` with flock(2), which Kafka does not use. The
    .lock file is created if missing (as Kafka's FileLock does) and left behind."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(log_dir / ".lock"), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked", "lock holder did not start"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=30)
