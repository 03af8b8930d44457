"""A cluster plan of 10^7 segments across 50 brokers, by simulation: the client holds a manifest, never a segment.

Fifty brokers cannot run here, so their surveys are simulated: a pool of processes (the "brokers") each makes its
part the way ``survey_part`` does on a real broker (a columnar plan of its own partitions, written on its own
disk, ``<broker dir>/.kafka-log-migrate-plans/<id>.parquet``) from a generated segment table (P partitions x S tiny
segments, each with its own inode, size and mtime), and returns what a worker returns over the wire: its
``BrokerSurvey`` with the ``BrokerPart``. The client (a process of its own, measured apart) builds the manifest from
the fifty surveys with the project's own ``manifest_of`` and writes it. Then every broker reads back its own part
(``load_part``: sha256 and plan id checked) in a process of its own. Reported: the client's peak RSS, the bytes
that crossed to it (the pickled surveys), the manifest's size, the bytes the client read (from /proc/self/io: the
parts never pass through it), and each broker's part size, load time and peak RSS.

    python benchmarks/bench_cluster_manifest.py [--brokers 50] [--partitions 20000] [--segments 10] [--dir /dev/shm/sim]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pickle
import resource
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from migrate import __version__
from migrate.model.cluster_manifest import BrokerPart
from migrate.model.plan_columns import PlanHead, SegmentColumns, columnar_content_id, plan_of, task_number
from migrate.model.plan_tree import PLAN_VERSION, ConvertOptions, Estimates, FilesystemSpace, LogDirPlan
from migrate.planning.manifest import parts_dir
from migrate.planning.plan import write_plan
from migrate.planning.request import BrokerSurvey

SEGMENT_BYTES = 112  # two tiny v0 messages
OUTPUT_BYTES = 196
TASK_SEGMENTS = 256


def broker_part(args: tuple[int, Path, int, int]) -> tuple[bytes, float, float]:
    """One simulated broker: its generated table as a columnar plan, written on its "disk"; the pickled survey."""
    broker, root, partitions, segments = args
    started = time.perf_counter()
    log_dir = root / f"broker-{broker}" / "kafka-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    n = partitions * segments
    rng = np.random.default_rng(broker)
    part_index = np.repeat(np.arange(partitions, dtype=np.int32), segments)
    ints = {
        "partition_id": part_index,
        "dir_mtime_ns": np.full(n, 1_700_000_000 * 10**9, np.int64),
        "leader_epoch": np.zeros(n, np.int32),
        "partition_bytes": np.full(n, SEGMENT_BYTES * segments, np.int64),
        "partition_output_bytes": np.full(n, OUTPUT_BYTES * segments, np.int64),
        "base_offset": np.tile(np.arange(segments, dtype=np.int64) * 2, partitions),
        "size": np.full(n, SEGMENT_BYTES, np.int64),
        "mtime_ns": 1_500_000_000 * 10**9 + rng.integers(0, 10**15, n, dtype=np.int64),
        "inode": np.arange(n, dtype=np.uint64) + 1000 + broker * 10**8,
        "entries_v0": np.full(n, 2, np.int64),
        "entries_v1": np.full(n, -1, np.int64),
        "entries_v2": np.full(n, -1, np.int64),
        "output_bytes": np.full(n, OUTPUT_BYTES, np.int64),
        "task": (np.arange(n) // TASK_SEGMENTS).astype(np.int32),
        "staged": np.full(n, -1, np.int8),
    }
    names = {
        "log_dir": ([str(log_dir)], np.zeros(n, np.int32)),
        "partition": ([f"topic-{p}" for p in range(partitions)], part_index),
        "topic": (["topic"], np.zeros(n, np.int32)),
    }
    columns = SegmentColumns(names, ints, {})
    tasks = int(ints["task"][-1]) + 1
    head = PlanHead(
        version=PLAN_VERSION,
        plan_id="",
        tool=f"kafka-log-migrate {__version__}",
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        planned_on=f"broker-{broker}",
        options=ConvertOptions(),
        log_dirs=(
            LogDirPlan(
                key=str(log_dir),
                log_dir=str(log_dir),
                mtime_ns=0,
                host=None,
                broker_id=broker,
                cluster_id="sim",
                partitions=(),
                filesystems=(FilesystemSpace(0, str(log_dir), partitions, n * OUTPUT_BYTES, 10**12),),
            ),
        ),
        range_tasks=(),
        task_bytes=tuple(TASK_SEGMENTS * SEGMENT_BYTES for _ in range(tasks)),
        estimates=Estimates(partitions, n, n * SEGMENT_BYTES, n * OUTPUT_BYTES),
        warnings=(),
        compactions=(),
        segment_digest=columns.digest,
        segments=n,
    )
    head = replace(head, plan_id=columnar_content_id(head))
    assert task_number("t00000") == 0
    plan = plan_of(head, columns)
    folder = parts_dir((str(log_dir),))
    folder.mkdir(exist_ok=True)
    path = folder / f"{plan.plan_id}.parquet"
    write_plan(plan, path)
    data = path.read_bytes()
    import hashlib

    part = BrokerPart(
        broker_id=broker,
        host=f"10.0.{broker // 250}.{broker % 250 + 1}",
        worker=f"tls://10.0.{broker // 250}.{broker % 250 + 1}:40000",
        log_dirs=(str(log_dir),),
        path=str(path),
        plan_id=plan.plan_id,
        sha256=hashlib.sha256(data).hexdigest(),
        file_bytes=len(data),
        estimates=plan.estimates,
    )
    survey = BrokerSurvey(part.worker, part.host, broker, "sim", part.log_dirs, part=part)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return pickle.dumps(survey), time.perf_counter() - started, peak


def client(surveys_file: Path, manifest_file: Path, out: Path) -> None:
    """The client: the fifty surveys in, the manifest out (run as a process of its own)."""
    from migrate.model.cluster_manifest import dump_manifest_json
    from migrate.planning.manifest import manifest_of
    from migrate.planning.request import PlanRequest

    started = time.perf_counter()
    surveys = pickle.loads(surveys_file.read_bytes())
    brokers = tuple(s.broker_id for s in surveys)
    manifest = manifest_of(surveys, PlanRequest(log_dirs=()), brokers, "tls://scheduler:8786")
    manifest_file.write_text(dump_manifest_json(manifest))
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    out.write_text(
        json.dumps(
            {
                "seconds": round(time.perf_counter() - started, 3),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "read_bytes": int(io["rchar"]),
                "segments": manifest.estimates.segments,
                "brokers": len(manifest.brokers),
            }
        )
    )


def broker_load(args: tuple[str, str]) -> tuple[int, float, float]:
    from migrate.cluster.parts import load_part
    from migrate.model.cluster_manifest import load_manifest_json

    manifest_path, broker = args
    manifest = load_manifest_json(Path(manifest_path).read_text())
    part = manifest.part(int(broker))
    started = time.perf_counter()
    plan = load_part(part)
    seconds = time.perf_counter() - started
    return plan.estimates.segments, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--brokers", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=20_000)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm/kafka-log-migrate-sim"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.dir.exists():
        shutil.rmtree(args.dir)
    args.dir.mkdir(parents=True)
    jobs = [(b, args.dir, args.partitions, args.segments) for b in range(1, args.brokers + 1)]
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:
        made = pool.map(broker_part, jobs)
    survey_seconds = time.perf_counter() - started
    surveys = [pickle.loads(blob) for blob, _, _ in made]
    crossed = sum(len(blob) for blob, _, _ in made)
    surveys_file = args.dir / "surveys.pickle"
    surveys_file.write_bytes(pickle.dumps(surveys))
    manifest_file = args.dir / "cluster.manifest.json"
    client_out = args.dir / "client.json"
    code = os.spawnv(
        os.P_WAIT,
        sys.executable,
        [sys.executable, __file__, "--client", str(surveys_file), str(manifest_file), str(client_out)],
    )
    assert code == 0, code
    measured = json.loads(client_out.read_text())
    with multiprocessing.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:
        loads = pool.map(broker_load, [(str(manifest_file), str(b)) for b in range(1, args.brokers + 1)])
    parts = [s.part.file_bytes for s in surveys]
    figures = {
        "brokers": args.brokers,
        "segments": measured["segments"],
        "segments_per_broker": args.partitions * args.segments,
        "client_peak_rss_mb": measured["peak_rss_mb"],
        "client_seconds": measured["seconds"],
        "client_read_bytes": measured["read_bytes"],
        "surveys_bytes_to_client": crossed,
        "manifest_bytes": manifest_file.stat().st_size,
        "part_bytes_each": [min(parts), max(parts)],
        "part_bytes_per_segment": round(sum(parts) / measured["segments"], 2),
        "parts_total_bytes": sum(parts),
        "survey_seconds_all_brokers": round(survey_seconds, 1),
        "broker_part_seconds": [round(min(t for _, t, _ in made), 2), round(max(t for _, t, _ in made), 2)],
        "broker_part_peak_rss_mb": round(max(m for _, _, m in made), 1),
        "broker_load_seconds": [round(min(t for _, t, _ in loads), 3), round(max(t for _, t, _ in loads), 3)],
        "broker_load_peak_rss_mb": round(max(m for _, _, m in loads), 1),
    }
    assert all(n == args.partitions * args.segments for n, _, _ in loads)
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    shutil.rmtree(args.dir)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        client(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        raise SystemExit(0)
    raise SystemExit(main())
