"""Pre-stage throughput on a live-looking broker, against a plain copy of the same bytes (the machine's floor).

    python benchmarks/bench_prestage.py [--dir DIR] [--gb 2] [--partitions 20] [--segment-mb 64] [--runs 3]

writes a broker-shaped log dir of legacy v0 segments (``gen_legacy.py``; every file a broker keeps beside them from
``migrate.demo.legacy_logdir``) and then, interleaved ``--runs`` times:

- pre-stage: one pass of ``migrate.prestage`` over the log dir (no rate limit) while a writer process appends to
  every partition's active segment and rolls a new one every ``--roll-mb``, as a broker takes produce traffic; the
  staging tree is removed before each run;
- copy: every closed segment of the same log dir read and written to a scratch dir with fsync, the least any
  pre-stage must do.

Source pages are dropped from the page cache before each run, so both read from disk. Prints the best (fastest)
of each: source bytes per second, and pre-stage as a fraction of the copy; then the catch-up pass that stages what
the writer rolled during the last run. With --json, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gen_legacy import message_size, segment_bytes, write_segment

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.kafka.layout import inspect_log_dir
from migrate.kafka.names import segment_name
from migrate.prestage.controls import Controls
from migrate.prestage.location import default_staging_root
from migrate.prestage.passes import PrestageRequest, run_prestage

VALUE_BYTES = 100
KEY_BYTES = 10


def build_log_dir(root: Path, total_bytes: int, partitions: int, segment_bytes_: int) -> Path:
    log_dir = root / "kafka"
    per_message = message_size(KEY_BYTES, VALUE_BYTES, 0)
    per_segment = max(1, segment_bytes_ // per_message)
    segments = max(2, -(-total_bytes // (partitions * per_segment * per_message)))  # closed ones, plus an active one
    files = []
    for p in range(partitions):
        part = log_dir / f"bench-{p}"
        offset = 0
        for _ in range(segments + 1):
            count = per_segment if _ < segments else per_segment // 10
            write_segment(part / segment_name(offset, ".log"), count, first_offset=offset, seed=p + 1)
            offset += count
        files.append(PartitionFiles("bench", p, offset))
    write_broker_files(log_dir, files)
    return log_dir


def writer(log_dir: str, roll_bytes: int, stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    """A broker's appends: 2000 messages at a time to each partition's active segment, a new one every roll_bytes."""
    batch = 2000
    while not stop.is_set():
        for part in inspect_log_dir(log_dir).partitions:
            active = part.segments[-1]
            end = active.base_offset + active.size // message_size(KEY_BYTES, VALUE_BYTES, 0)
            if active.size >= roll_bytes:
                write_segment(part.path / segment_name(end, ".log"), batch, first_offset=end)
                continue
            with open(active.path, "ab") as f:
                f.write(segment_bytes(batch, first_offset=end))
        time.sleep(0.01)


def drop_cache(log_dir: Path) -> None:
    for path in log_dir.glob("*/*.log"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def closed_segments(log_dir: Path) -> list[Path]:
    return [s.path for p in inspect_log_dir(log_dir).partitions for s in p.segments[:-1]]


def run_copy(log_dir: Path, scratch: Path) -> tuple[int, float]:
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    drop_cache(log_dir)
    started = time.perf_counter()
    total = 0
    for i, path in enumerate(closed_segments(log_dir)):
        target = scratch / f"{i}.log"
        shutil.copyfile(path, target)
        fd = os.open(target, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        total += path.stat().st_size
    return total, time.perf_counter() - started


def run_prestage_once(log_dir: Path, roll_bytes: int) -> tuple[int, float, int]:
    shutil.rmtree(default_staging_root(log_dir).parent, ignore_errors=True)
    drop_cache(log_dir)
    stop = multiprocessing.Event()
    proc = multiprocessing.Process(target=writer, args=(str(log_dir), roll_bytes, stop))
    proc.start()
    try:
        started = time.perf_counter()
        report = run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())
        seconds = time.perf_counter() - started
    finally:
        stop.set()
        proc.join()
    (done,) = report.passes[0].log_dirs
    if not report.ok:
        raise SystemExit(f"pre-stage failed: {report.stopped or done.refused[:3]}")
    return done.staged_source_bytes, seconds, len(done.rejected)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where to build the log dir (default: a temporary dir, removed after)")
    ap.add_argument("--gb", type=float, default=2.0, help="legacy bytes in closed segments, in GB (default 2)")
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--segment-mb", type=float, default=64.0, help="size of each closed segment (default 64 MB)")
    ap.add_argument("--roll-mb", type=float, default=4.0, help="the writer rolls a partition's segment at this size")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs of each (default 3); the best is reported")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-prestage-"))
    try:
        log_dir = build_log_dir(root, int(args.gb * 1e9), args.partitions, int(args.segment_mb * 1e6))
        roll = int(args.roll_mb * 1e6)
        stages, copies, rejected = [], [], 0
        for _ in range(args.runs):
            staged, seconds, rejects = run_prestage_once(log_dir, roll)
            stages.append(staged / seconds)
            rejected += rejects
            copied, seconds = run_copy(log_dir, root / "copy")
            copies.append(copied / seconds)
        started = time.perf_counter()
        catch_up = run_prestage(PrestageRequest(log_dirs=(str(log_dir),)), Controls())
        catch_up_seconds = time.perf_counter() - started
        (last,) = catch_up.passes[0].log_dirs
        result = {
            "source_bytes": staged,
            "partitions": args.partitions,
            "prestage_bytes_per_s": max(stages),
            "copy_bytes_per_s": max(copies),
            "prestage_of_copy": max(stages) / max(copies),
            "rejected_while_read": rejected,
            "catch_up": {"staged": last.staged, "bytes": last.staged_source_bytes, "seconds": catch_up_seconds},
            "runs": {"prestage": stages, "copy": copies},
        }
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        mb = 1e6
        print(
            f"pre-stage {result['source_bytes'] / 1e9:.2f} GB in {args.partitions} partitions while a writer appends "
            f"and rolls: best {result['prestage_bytes_per_s'] / mb:.0f} MB/s of source; plain copy of the same bytes "
            f"{result['copy_bytes_per_s'] / mb:.0f} MB/s; pre-stage = {result['prestage_of_copy']:.0%} of the copy "
            f"(best of {args.runs} interleaved runs; {rejected} segments rejected as changed while read)"
        )
        c = result["catch_up"]
        rolled = f"{c['staged']} segments rolled meanwhile, {c['bytes'] / mb:.1f} MB"
        print(f"catch-up pass: {rolled} in {c['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
