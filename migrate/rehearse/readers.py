"""The readers that judge the rehearsed data besides our own verifier: Apache Kafka's own (the oracle, kafka-clients'
FileRecords through ``shared/oracle/oracle``), kafka-python, and an independent ``scan``. Each reads every partition
before execute and after; a reader that cannot run here is "not available", never a failure."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import struct
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from migrate.kafka.layout import inspect_log_dir
from migrate.model.plan_tree import ConvertOptions, Plan
from migrate.rehearse.records import PartitionDigest, ReaderVerdict, RehearsalConfig
from migrate.reports.scan import scan_log_dirs

READER_CHUNK = 200  # partition dirs per oracle call: a broker's 10^5 partitions would overflow ARG_MAX in one
# shared/oracle/oracle beside this checkout: parents[2] of migrate/rehearse/readers.py is the checkout itself
DEFAULT_ORACLE = Path(__file__).resolve().parents[3] / "shared" / "oracle" / "oracle"
ORACLE_READER = "Apache Kafka (oracle, kafka-clients FileRecords)"


class ReaderUnavailable(Exception):
    """The reader cannot run here (no Java, no oracle, no kafka-python): reported as "not available"."""


def partition_dirs(log_dirs: Iterable[str]) -> list[Path]:
    out = []
    for d in log_dirs:
        layout = inspect_log_dir(d)
        out += [p.path for p in (*layout.partitions, *layout.future)]
    return sorted(out)


def oracle_problem(oracle: str) -> str | None:
    """Why the oracle cannot run here, or None."""
    if not oracle:
        return "not available: no oracle given (--oracle none)"
    if not os.access(oracle, os.X_OK):
        return f"not available: {oracle} is missing or not executable (give --oracle PATH to ../shared/oracle/oracle)"
    missing = [tool for tool in ("java", "javac") if shutil.which(tool) is None]
    if missing:
        return f"not available: {' and '.join(missing)} not on the PATH (the oracle needs Java 17+)"
    return None


def oracle_digests(oracle: str, dirs: list[Path]) -> dict[str, PartitionDigest]:
    """``oracle dump --summary`` of every partition dir: Apache Kafka's FileRecords reading each one."""
    out: dict[str, PartitionDigest] = {}
    for i in range(0, len(dirs), READER_CHUNK):
        chunk = [str(d) for d in dirs[i : i + READER_CHUNK]]
        proc = subprocess.run(
            [oracle, "dump", "--summary", *chunk], capture_output=True, text=True, encoding="utf-8", errors="replace"
        )
        if proc.returncode not in (0, 1):
            raise ReaderUnavailable(f"the oracle failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            out[d["path"]] = PartitionDigest(
                path=d["path"],
                records=int(d["records"]),
                sha256=d["sha256"],
                sha256_ts=d["sha256_ts"],
                magics={str(k): int(v) for k, v in d["magics"].items()},
                valid=bool(d["valid"]),
                error="; ".join(d.get("errors") or [])[:1000],
            )
    missing = [d for d in map(str, dirs) if d not in out]
    if missing:
        raise ReaderUnavailable(f"the oracle printed no summary for {missing[0]}")
    return out


def kafka_python_version() -> str:
    try:
        import kafka
    except ImportError:
        raise ReaderUnavailable("not available: kafka-python is not installed (pip install kafka-python)") from None
    return f"kafka-python {getattr(kafka, '__version__', '?')}"


def _nullable(b: Any) -> bytes:
    return b"\x01" if b is None else b"\x00" + struct.pack(">i", len(b)) + bytes(b)


def kafka_python_digest(partition: Path) -> PartitionDigest:
    """kafka-python's view of a partition, hashed the oracle's way (offset, key, value, headers; ``_ts`` with the
    timestamp), every batch CRC and every legacy inner message CRC checked."""
    view = _KafkaPythonView()
    for log in sorted(partition.glob("*.log")):  # 20-digit names: name order is offset order
        if log.stat().st_size == 0:
            continue
        with open(log, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view.read(log, data)  # returns with no view of ``data`` left, so the map can close
    return PartitionDigest(
        path=str(partition),
        records=view.records,
        sha256=view.h.hexdigest(),
        sha256_ts=view.hts.hexdigest(),
        magics=dict(sorted(view.magics.items())),
        valid=not view.problems,
        error="; ".join(view.problems[:5]),
    )


class _KafkaPythonView:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.hts = hashlib.sha256()
        self.records = 0
        self.magics: Counter[str] = Counter()
        self.problems: list[str] = []

    def read(self, log: Path, data: mmap.mmap) -> None:
        from kafka.record import MemoryRecords
        from kafka.record.legacy_records import LegacyRecordBatch

        memory = MemoryRecords(data)
        position = 0
        problem = ""
        try:
            while memory.has_next():
                batch = memory.next_batch()
                self.magics[str(batch.magic)] += 1
                if not batch.validate_crc():
                    self.problems.append(f"{log}: the batch at byte position {position} fails its CRC")
                legacy = isinstance(batch, LegacyRecordBatch)
                for r in batch:
                    if legacy and not r.validate_crc():
                        self.problems.append(f"{log}: offset {r.offset} fails its CRC (byte position {position})")
                    head = struct.pack(">q", r.offset)
                    ts = struct.pack(">q", -1 if r.timestamp is None else r.timestamp)
                    body = _nullable(r.key) + _nullable(r.value) + struct.pack(">i", len(r.headers))
                    for name, value in r.headers:
                        raw = name.encode()
                        body += struct.pack(">i", len(raw)) + raw + _nullable(value)
                    self.h.update(head + body)
                    self.hts.update(head + ts + body)
                    self.records += 1
                position += 12 + struct.unpack_from(">i", data, position + 8)[0]
            trailing = len(data) - memory.valid_bytes()
            if trailing:
                problem = f"{log}: {trailing} bytes after the last complete batch (byte position {position})"
        except Exception as exc:  # kafka-python's errors share no base class: any of them is a failed read
            problem = f"{log}: kafka-python cannot read on at byte position {position}: {exc}"
        if problem:
            self.problems.append(problem)


def judge_after(
    reader: str,
    before: dict[str, PartitionDigest],
    after: dict[str, PartitionDigest],
    planned: set[str],
    options: ConvertOptions,
) -> list[str]:
    """What a reader found wrong with the live data after execute, against its view of the originals: planned
    partitions hold the same records, all in the target format and valid; the others are exactly as they were."""
    problems = []
    for path, old in sorted(before.items()):
        new = after.get(path)
        if new is None:
            problems.append(f"{path}: {reader} could not read it after execute")
            continue
        if new.sha256 != old.sha256 or new.records != old.records:
            problems.append(
                f"{path}: {reader} reads different records after execute ({new.records} records, sha256 "
                f"{new.sha256[:16]}, originally {old.records} records, sha256 {old.sha256[:16]})"
            )
        # v0 records have no timestamp; --timestamps mtime gives them one, so only partitions without v0 keep sha256_ts
        keeps_times = options.timestamps.value == "none" or not old.magics.get("0")
        if keeps_times and new.sha256_ts != old.sha256_ts:
            problems.append(f"{path}: {reader} reads different timestamps after execute")
        if path in planned:
            if not new.valid:
                problems.append(f"{path}: {reader} finds it invalid after execute: {new.error}")
            below = sorted(m for m in new.magics if int(m) < options.target_magic)
            if below:
                problems.append(f"{path}: {reader} still sees message format(s) v{', v'.join(below)} after execute")
        elif new.valid != old.valid:
            problems.append(f"{path}: was not planned, yet {reader} judges it differently after execute")
    return problems


def read_partitions(
    config: RehearsalConfig, targets: Iterable[str], stage: str
) -> tuple[list[ReaderVerdict], dict[str, PartitionDigest], dict[str, PartitionDigest]]:
    """Run the oracle and kafka-python over every partition dir; (verdicts so far, oracle view, kafka-python
    view). A reader that cannot run is "not available", never a failure."""
    dirs = partition_dirs(targets)
    verdicts: list[ReaderVerdict] = []
    oracle_view: dict[str, PartitionDigest] = {}
    kp_view: dict[str, PartitionDigest] = {}
    problem = oracle_problem(config.oracle)
    name = ORACLE_READER
    clock = time.perf_counter()
    if problem:
        verdicts.append(ReaderVerdict(name, stage, False, None, 0.0, 0, problem))
    else:
        try:
            oracle_view = oracle_digests(config.oracle, dirs)
        except ReaderUnavailable as exc:
            if stage == "baseline":
                verdicts.append(ReaderVerdict(name, stage, False, None, 0.0, 0, f"not available: {exc}"))
            else:
                verdicts.append(ReaderVerdict(name, stage, True, False, 0.0, 0, str(exc), (str(exc),)))
        else:
            verdicts.append(
                ReaderVerdict(name, stage, True, True, round(time.perf_counter() - clock, 3), len(dirs), "")
            )
    clock = time.perf_counter()
    if config.independent_reader == "none":
        verdicts.append(
            ReaderVerdict("kafka-python", stage, False, None, 0.0, 0, "not available: --independent-reader none")
        )
    else:
        try:
            kp_name = kafka_python_version()
        except ReaderUnavailable as exc:
            verdicts.append(ReaderVerdict("kafka-python", stage, False, None, 0.0, 0, str(exc)))
        else:
            kp_view = {str(d): kafka_python_digest(d) for d in dirs}
            verdicts.append(
                ReaderVerdict(kp_name, stage, True, True, round(time.perf_counter() - clock, 3), len(dirs), "")
            )
    return verdicts, oracle_view, kp_view


def disagreements(oracle_view: dict[str, PartitionDigest], kp_view: dict[str, PartitionDigest]) -> list[str]:
    """Partitions the two independent readers read differently: they must agree on the originals before they judge
    anything."""
    problems = []
    for path, o in sorted(oracle_view.items()):
        k = kp_view.get(path)
        if k is not None and (k.sha256 != o.sha256 or k.records != o.records):
            problems.append(
                f"{path}: Kafka reads {o.records} records (sha256 {o.sha256[:16]}), kafka-python {k.records} "
                f"(sha256 {k.sha256[:16]})"
            )
    return problems


def scan_verdict(targets: Iterable[str], plan: Plan) -> ReaderVerdict:
    """``scan`` of the live files after execute: no errors, and every planned partition in the target format."""
    clock = time.perf_counter()
    planned = {p.dir for d in plan.log_dirs for p in d.partitions}
    scan = scan_log_dirs(list(targets))
    scan_problems = []
    for broker in scan.brokers:
        for d in broker.log_dirs:
            if d.error:
                scan_problems.append(f"{d.log_dir}: {d.error}")
            for p in d.partitions:
                where = f"{d.log_dir}/{p.dir}"
                if p.error:
                    scan_problems.append(f"{where}: {p.error}")
                below = sorted(m for m in p.batches_by_magic if m < plan.options.target_magic)
                if where in planned and below:
                    scan_problems.append(f"{where}: scan still finds v{', v'.join(map(str, below))} batches")
    return ReaderVerdict(
        "scan",
        "verify",
        True,
        not scan_problems,
        round(time.perf_counter() - clock, 3),
        len(planned),
        "every planned partition in the target format" if not scan_problems else "",
        tuple(scan_problems[:50]),
    )
