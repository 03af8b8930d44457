"""Pass one of compaction (KIP-280): time and peak memory for one partition of many distinct keys, against the
KIP's per-key estimate.

KIP-280 sizes the cleaner's map per distinct key: a 16-byte key digest and the 8-byte offset (24 bytes, Kafka's
own cleaner), plus the 8-byte compared value for the timestamp and header strategies (32 bytes). Pass one keeps
exactly that, plus one flags byte for header (has the header). This script writes a partition of N v1 messages
with N distinct keys (the worst case: nothing to compact, the state holds every key) in segments of
``--segment-records``, then runs ``migrate.compaction.pass_one.pass_one`` on it once per strategy, each in a child
process so its peak RSS is its own, and prints seconds, records per second, peak RSS above the child's baseline (Python,
numpy and the package imported) and that peak divided by N x the KIP's bytes per key.

    python benchmarks/bench_compaction.py                      # 10,000,000 keys (~640 MB of segments, a few minutes)
    python benchmarks/bench_compaction.py --records 1000000 --strategies offset --reference

``--reference`` also runs the deliberately simple implementation (``migrate.compaction.reference``, a dict over
every key, what verification trusts) on the same partition, to show what pass one's arrays save.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import write_segment

KIP_BYTES_PER_KEY = {"offset": 24, "timestamp": 32, "header": 32}

CHILD = r"""
import json, sys, time

def rss(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1]) * 1024

from migrate.compaction.facts import SegmentSource
from migrate.compaction.pass_one import pass_one
from migrate.compaction.rules import Settings
from migrate.compaction.reference import reference_survivors
from migrate.model.plan_tree import CompactionStrategy, TimestampPolicy
what, strategy, paths = sys.argv[1], CompactionStrategy(sys.argv[2]), json.loads(sys.argv[3])
sources = [SegmentSource(p, base, 0) for p, base in paths]
header = "version" if strategy == CompactionStrategy.HEADER else ""
baseline = rss("VmRSS")
start = time.perf_counter()
if what == "pass-one":
    s = pass_one(sources, Settings(strategy, header, TimestampPolicy.MTIME), "bench-0")
    out = {"survivors": len(s.offsets), "distinct_keys": s.distinct_keys, "bytes_per_key": s.bytes_per_key}
else:
    r = reference_survivors(sources, strategy, header, TimestampPolicy.MTIME, None)
    out = {"survivors": len(r.survivors), "distinct_keys": r.distinct_keys, "bytes_per_key": None}
out["seconds"] = time.perf_counter() - start
out["peak_bytes"] = rss("VmHWM") - baseline
print(json.dumps(out))
"""


def run_child(what: str, strategy: str, segments: list[tuple[str, int]]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, what, strategy, json.dumps(segments)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{what} {strategy} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=10_000_000, help="records = distinct keys (default 10M)")
    parser.add_argument("--segment-records", type=int, default=1_000_000, help="records per segment (default 1M)")
    parser.add_argument("--value-bytes", type=int, default=20)
    parser.add_argument("--strategies", default="offset,timestamp,header")
    parser.add_argument("--reference", action="store_true", help="also run the simple dict implementation")
    parser.add_argument("--dir", help="where to write the partition (default: a temporary directory)")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        started = time.perf_counter()
        segments = []
        for first in range(0, args.records, args.segment_records):
            count = min(args.segment_records, args.records - first)
            path = Path(tmp) / "bench-0" / f"{first:020d}.log"
            # v1: each record has a timestamp; keys are the offset in 10 decimal digits, all distinct
            write_segment(path, count, key_bytes=10, value_bytes=args.value_bytes, magic=1, first_offset=first)
            segments.append((str(path), first))
        size = sum(Path(p).stat().st_size for p, _ in segments)
        print(
            f"partition: {args.records:,} records, {args.records:,} distinct keys, {len(segments)} segments, "
            f"{size / 1e6:,.0f} MB (written in {time.perf_counter() - started:.0f} s)"
        )
        rows = []
        cases = [("pass-one", s) for s in args.strategies.split(",")]
        if args.reference:
            cases += [("reference", s) for s in args.strategies.split(",")]
        for what, strategy in cases:
            r = run_child(what, strategy, segments)
            assert r["distinct_keys"] == args.records and r["survivors"] == args.records, r
            estimate = args.records * KIP_BYTES_PER_KEY[strategy]
            row = {
                "implementation": what,
                "strategy": strategy,
                "records": args.records,
                "seconds": round(r["seconds"], 1),
                "records_per_second": round(args.records / r["seconds"]),
                "peak_mb": round(r["peak_bytes"] / 1e6, 1),
                "state_bytes_per_key": r["bytes_per_key"],
                "kip_estimate_mb": round(estimate / 1e6, 1),
                "peak_over_kip_estimate": round(r["peak_bytes"] / estimate, 2),
            }
            rows.append(row)
            print(
                f"{what:<9} {strategy:<9} {row['seconds']:>7.1f} s  {row['records_per_second']:>10,} rec/s  "
                f"peak {row['peak_mb']:>8,.1f} MB  KIP estimate {row['kip_estimate_mb']:>7,.1f} MB "
                f"({KIP_BYTES_PER_KEY[strategy]} B/key)  peak/estimate {row['peak_over_kip_estimate']:.2f}"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
