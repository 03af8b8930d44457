"""Whole-pipeline speed: execute a generated log dir on Dask (1 and 2 workers) and Spark (local[2]).

Between runs the migration is rolled back (originals restored), so every run converts the same bytes. Reported per
run: wall time, MB/s, time per stage (prepare, convert + verify, swap), the seconds spent in conversion and in
verification, and the share of worker time spent outside both (scheduling, state, swap). Spark's fixed start-up (JVM
+ SparkSession) is reported apart.

    python benchmarks/bench_pipeline.py [--total-mb 2048] [--partitions 8] [--value-bytes 100] [--no-spark]
                                        [--digest sha256|xxh3-128]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import message_size, write_log_dir

from migrate import pipeline
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import build_plan
from migrate.planning.request import PlanRequest


def run(plan, engine, workers: int, label: str) -> dict:
    start = time.perf_counter()
    report = pipeline.execute(plan, engine)
    wall = time.perf_counter() - start
    assert report.ok, (report.errors[:3], report.problems[:3])
    t = time.perf_counter()
    rolled = pipeline.rollback(plan, engine)
    assert rolled.ok, rolled
    totals = report.totals
    busy = totals.convert_seconds + totals.verify_seconds
    return {
        "engine": label,
        "workers": workers,
        "wall_s": round(wall, 1),
        "MB_per_s": round(totals.bytes_in / 1e6 / wall, 1),
        "stage_s": report.stage_seconds,
        "convert_s": totals.convert_seconds,
        "verify_s": totals.verify_seconds,
        "outside_conversion_share": round(1 - busy / (wall * workers), 3),
        "rollback_s": round(time.perf_counter() - t, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--total-mb", type=int, default=2048)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--digest", default="sha256", choices=["sha256", "xxh3-128"], help="the run's record digest")
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    from migrate.engines.dask import DaskEngine

    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        records = args.total_mb * 1_000_000 // message_size(10, args.value_bytes, 0) // args.partitions
        log_dir = Path(tmp) / "kafka-logs"
        write_log_dir(log_dir, records, partitions=args.partitions, value_bytes=args.value_bytes)
        plan = build_plan(PlanRequest(log_dirs=(str(log_dir),), options=ConvertOptions(digest=args.digest)))
        for workers in (1, 2):
            engine = DaskEngine(n_workers=workers, dashboard_address="127.0.0.1:0", progress=False)
            try:
                rows.append(run(plan, engine, workers, "dask"))
            finally:
                engine.close()
        if not args.no_spark:
            from migrate.engines.spark import SparkEngine

            t = time.perf_counter()
            engine = SparkEngine(master="local[2]", ui=False, progress=False)
            startup = time.perf_counter() - t
            try:
                row = run(plan, engine, 2, "spark local[2]")
                row["startup_s"] = round(startup, 1)
                rows.append(row)
            finally:
                engine.close()
    print(json.dumps({"input_MB": args.total_mb, "partitions": args.partitions, "runs": rows}, indent=2))
    base = rows[0]["wall_s"]
    for r in rows:
        print(
            f"{r['engine']:<16} workers={r['workers']} wall {r['wall_s']:>6}s  {r['MB_per_s']:>6} MB/s  "
            f"speed-up vs 1 Dask worker {base / r['wall_s']:.2f}x  "
            f"outside conversion {r['outside_conversion_share']:.0%}"
        )
    print(f"reproduce: python benchmarks/bench_pipeline.py --total-mb {args.total_mb} --partitions {args.partitions}")


if __name__ == "__main__":
    main()
