"""Broker-shaped log dirs for tests: fixture partitions plus every file a real Kafka broker keeps beside them.

``make_broker_logdir(tmp_path, partitions=[...])`` copies fixture partition dirs (with the fixture mtimes) into
``tmp_path/kafka-logs`` and adds what a cleanly stopped broker leaves: ``meta.properties``,
``.kafka_cleanshutdown`` (3.7+ JSON form), the four offset checkpoints of the log dir root, and per partition
``partition.metadata`` (one topic id per topic) and ``leader-epoch-checkpoint``. A cleanly stopped broker has no
``.lock`` (it deletes it on shutdown); ``stale_lock=True`` leaves an unheld one, as a killed broker does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import EXPECTED, FIXTURES, LEGACY_LOGDIR, REAL_BROKER, apply_mtimes

# (segments dir, mtimes manifest, Kafka's summaries) of each fixture source
SOURCES = {
    "legacy": (LEGACY_LOGDIR, FIXTURES / "mtimes.json", EXPECTED / "summary.jsonl"),
    "real-broker": (REAL_BROKER / "logdir", REAL_BROKER / "mtimes.json", REAL_BROKER / "expected" / "summary.jsonl"),
}
CLUSTER_ID = "kLm1gRaTeTeStClUsTeR0A"
BROKER_EPOCH = 7


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


def _summaries(source: str) -> dict[str, dict]:
    lines = SOURCES[source][2].read_text().splitlines()
    return {d["path"]: d for d in map(json.loads, lines) if "/" not in d["path"]}


def log_end_offset(partition_dir: Path, summary: dict | None) -> int:
    """Next offset after the last record (Kafka's view), or the last segment's base offset if there is none."""
    if summary and summary.get("lastOffset") is not None:
        return int(summary["lastOffset"]) + 1
    return max((int(p.stem) for p in partition_dir.glob("*.log")), default=0)


def checkpoint_text(entries: list[tuple[str, int, int]]) -> str:
    """An OffsetCheckpointFile body: version 0, count, ``topic partition offset`` lines."""
    return "".join(["0\n", f"{len(entries)}\n", *(f"{t} {p} {o}\n" for t, p, o in entries)])


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
    ends: list[tuple[str, int, int]] = []
    cleaner: list[tuple[str, int, int]] = []
    for part in partitions:
        dst = log_dir / part
        shutil.copytree(src / part, dst)
        for p in [dst, *dst.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        topic, _, number = part.rpartition("-")
        (dst / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id(topic)}")
        (dst / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        end = log_end_offset(dst, summaries.get(part))
        ends.append((topic, int(number), end))
        if topic.startswith("compacted"):  # first dirty offset: the cleaner never cleans the active segment
            cleaner.append((topic, int(number), max(int(p.stem) for p in dst.glob("*.log"))))
    apply_mtimes(log_dir, manifest)
    # a cleanly stopped broker checkpoints recovery point = high watermark = log end offset for every partition;
    # log start offsets only where they are above the first segment's base offset (none here)
    (log_dir / "recovery-point-offset-checkpoint").write_text(checkpoint_text(ends))
    (log_dir / "replication-offset-checkpoint").write_text(checkpoint_text(ends))
    (log_dir / "log-start-offset-checkpoint").write_text(checkpoint_text([]))
    (log_dir / "cleaner-offset-checkpoint").write_text(checkpoint_text(cleaner))
    if kraft:
        directory_id = topic_id(f"directory:{log_dir.name}")
        meta = f"version=1\nnode.id={broker_id}\ncluster.id={CLUSTER_ID}\ndirectory.id={directory_id}\n"
    else:
        meta = f"version=0\nbroker.id={broker_id}\ncluster.id={CLUSTER_ID}\n"
    (log_dir / "meta.properties").write_text("#\n#Thu Jan 01 00:00:00 UTC 2025\n" + meta)
    if clean_shutdown:
        (log_dir / ".kafka_cleanshutdown").write_text(f'{{"version":0,"brokerEpoch":{BROKER_EPOCH}}}')  # Kafka's JSON
    if stale_lock:
        (log_dir / ".lock").touch()
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
