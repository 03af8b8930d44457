"""Segment conversion speed and memory: one large v0 segment converted to v2 (convert_segment, streaming) and
verified from disk (verify_segment), in one process.

Each case runs in a child process so its peak RSS is its own; the reference is a plain copy of the same file
(shutil.copyfile) in the same run, so figures are ratios, not absolutes. ``--digest`` picks the record digest both
use (sha256, comparable with ``oracle dump --summary``, or xxh3-128). Kafka's own loop and the end-to-end figures are
in ``bench_end_to_end.py``.

    python benchmarks/bench_segment.py [--size-mb 256] [--values 100,1000] [--digest sha256|xxh3-128]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import message_size, write_segment

CHILD = r"""
import json, resource, shutil, sys, time
from pathlib import Path
from migrate.segment.convert import convert_segment
from migrate.segment.verify import verify_segment
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentTask
what, src, out, digest = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
start = time.perf_counter()
if what == "copy":
    shutil.copyfile(src, out)
    result = {}
else:
    options = ConvertOptions(timestamps="none", digest=digest)
    r = convert_segment(SegmentTask(src, out, 0, options))
    converted = time.perf_counter()
    check = verify_segment(r, options)
    assert check.ok, check.problems
    result = {"records": r.records, "output_bytes": r.output_bytes, "verify_seconds": time.perf_counter() - converted}
    result["convert_seconds"] = converted - start
result["seconds"] = time.perf_counter() - start
result["peak_rss_mb"] = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
print(json.dumps(result))
"""


def child(what: str, src: Path, out: Path, digest: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, what, str(src), str(out), digest], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--values", default="100,1000", help="value sizes in bytes, comma-separated")
    ap.add_argument("--digest", default="sha256", choices=["sha256", "xxh3-128"])
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for value_bytes in map(int, args.values.split(",")):
            records = args.size_mb * 1_000_000 // message_size(10, value_bytes, 0)
            src = write_segment(Path(tmp) / "in" / f"{0:020d}.log", records, value_bytes=value_bytes)
            size = src.stat().st_size
            copy = child("copy", src, Path(tmp) / "copy.log", args.digest)
            conv = child("convert", src, Path(tmp) / "out", args.digest)
            rows.append(
                {
                    "value_bytes": value_bytes,
                    "segment_mb": round(size / 1e6),
                    "records": conv["records"],
                    "convert_verify_mb_s": round(size / 1e6 / conv["seconds"], 1),
                    "convert_s": round(conv["convert_seconds"], 2),
                    "verify_s": round(conv["verify_seconds"], 2),
                    "convert_rec_s": round(conv["records"] / conv["seconds"]),
                    "copy_mb_s": round(size / 1e6 / copy["seconds"], 1),
                    "convert_vs_copy": round(copy["seconds"] / conv["seconds"], 3),
                    "growth": round(conv["output_bytes"] / size, 3),
                    "peak_rss_mb": round(conv["peak_rss_mb"]),
                    "copy_peak_rss_mb": round(copy["peak_rss_mb"]),
                }
            )
            for p in (Path(tmp) / "out").glob("*"):
                p.unlink()
            src.unlink()
    print(json.dumps(rows, indent=2))
    print(
        f"reproduce: python benchmarks/bench_segment.py --size-mb {args.size_mb} --values {args.values} "
        f"--digest {args.digest}"
    )


if __name__ == "__main__":
    main()
