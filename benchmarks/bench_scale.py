"""Control-plane scale: plan + execute + finalize on thousands of partitions against the same records in 8.

For each partition count N, two log dirs hold the same records (N x R records of the same size): one as N partitions
of one small segment each, one as 8 partitions. Both go through plan, execute and finalize on the same engine; the
ratio of their times is what the control plane costs per partition and segment. The goal is time linear in segments
and 10,000 partitions within 3x the 8-partition time. Every run is checked: an independent scan must certify the
migrated log dir v2-only.

    python benchmarks/bench_scale.py [--partitions 1000,5000,10000] [--records 200] [--value-bytes 100]
                                     [--engine dask|serial] [--workers 2] [--json out.json]

The segment bytes are generated once (benchmarks/gen_legacy.py) and written N times, with the files a cleanly stopped
broker keeps (migrate/demo/legacy_logdir.py: meta.properties, checkpoints, partition.metadata, leader-epoch-checkpoint,
.kafka_cleanshutdown), so generating 10,000 partitions takes seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import segment_bytes

from migrate import pipeline
from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
from migrate.reports.scan import scan_log_dirs

SEGMENT_MTIME_NS = 1_500_000_000 * 10**9


def write_log_dir(root: Path, partitions: int, records: int, value_bytes: int) -> int:
    """``partitions`` partitions, each one segment of ``records`` v0 messages (the same bytes); returns total bytes."""
    write_broker_files(root, [PartitionFiles("bench", i, records, leader_epochs=()) for i in range(partitions)])
    data = segment_bytes(records, value_bytes=value_bytes)
    for i in range(partitions):
        seg = root / f"bench-{i}" / "00000000000000000000.log"
        seg.write_bytes(data)
        os.utime(seg, ns=(SEGMENT_MTIME_NS, SEGMENT_MTIME_NS))
    return len(data) * partitions


def run(root: Path, engine, label: str) -> dict:
    times = {}
    t = time.perf_counter()
    plan = build_plan(PlanRequest(log_dirs=(str(root),)))
    plan_path = root.parent / f"{root.name}.plan.json"
    write_plan(plan, plan_path)
    times["plan"] = time.perf_counter() - t
    t = time.perf_counter()
    report = pipeline.execute(plan, engine)
    times["execute"] = time.perf_counter() - t
    assert report.ok, (report.errors[:3], report.problems[:3])
    t = time.perf_counter()
    final = pipeline.finalize(plan, engine, plan_path)
    times["finalize"] = time.perf_counter() - t
    assert final.ok, final
    scan = scan_log_dirs([str(root)]).summary
    assert scan.v2_only and scan.partitions == plan.estimates.partitions, scan
    total = sum(times.values())
    return {
        "run": label,
        "partitions": plan.estimates.partitions,
        "segments": plan.estimates.segments,
        "tasks": len(plan.tasks),
        "MB": round(plan.estimates.bytes / 1e6, 1),
        **{f"{k}_s": round(v, 2) for k, v in times.items()},
        "stages_s": report.stage_seconds,
        "total_s": round(total, 2),
        "ms_per_segment": round(1000 * total / plan.estimates.segments, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1000,5000,10000", help="comma-separated partition counts")
    ap.add_argument("--records", type=int, default=200, help="records per partition of the many-partition runs")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--engine", choices=["dask", "serial"], default="dask")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if args.engine == "dask":
        from migrate.engines.dask import DaskEngine

        t = time.perf_counter()
        engine = DaskEngine(n_workers=args.workers, dashboard_address="127.0.0.1:0", progress=False)
        startup = time.perf_counter() - t
    else:
        from migrate.engines import SerialEngine

        engine, startup = SerialEngine(), 0.0
    print(f"engine {args.engine} ({args.workers} workers), start-up {startup:.1f} s (not in the figures below)")
    rows = []
    # on an ext4 without a journal (this project's VMs) creating a file skips each inode freed in the last
    # vm.dirty_expire_centisecs (30 s): a row right after another one's finalize (which deletes the originals it
    # kept) paid for those deletions, so the scratch dirs stay until the end and each partition count waits that long
    recently_deleted_s = int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text()) / 100 + 1
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        try:
            for i, n in enumerate(int(x) for x in args.partitions.split(",")):
                if i:
                    time.sleep(recently_deleted_s)
                many, few = Path(tmp) / f"many-{n}", Path(tmp) / f"few-{n}"
                write_log_dir(many, n, args.records, args.value_bytes)
                write_log_dir(few, 8, n * args.records // 8, args.value_bytes)
                few_row = run(few, engine, f"8 partitions, same records as {n}")
                many_row = run(many, engine, f"{n} partitions")
                many_row["vs_8_partitions"] = round(many_row["total_s"] / few_row["total_s"], 2)
                rows += [few_row, many_row]
                for row in (few_row, many_row):
                    print(json.dumps(row), flush=True)
        finally:
            engine.close()
    print()
    print("| run | segments | tasks | MB | plan s | execute s | finalize s | total s | ms/segment | vs 8 partitions |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['run']} | {r['segments']} | {r['tasks']} | {r['MB']} | {r['plan_s']} | {r['execute_s']} | "
            f"{r['finalize_s']} | {r['total_s']} | {r['ms_per_segment']} | {r.get('vs_8_partitions', '')} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
