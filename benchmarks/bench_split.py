"""A v0 segment whose v2 form passes 2 GiB - 1 (Kafka's FileRecords limit), converted into N segments.

Generates one partition of one uncompressed v0 segment of tiny messages (``--records``, default 28,000,000 of a
6-byte key and a 4-byte value: 36 bytes each in v0, 78 as single-record v2 batches, so about 1.0 GB in and 2.2 GB
out) on tmpfs (``--dir``, default /dev/shm), then in a fresh child process ``plan`` and ``execute`` it (serial
engine: one process does all the work, so its peak RSS is the conversion's), and checks the result:

- the plan's cuts and the live files: N outputs, the first named like the source, each after its first batch's base
  offset, each at most 2**31 - 1 bytes, every file (logs and indexes) with the source's mtime;
- every output opened and validated by Apache Kafka's reader and the partition's records equal to the source's, in
  order (``oracle compare`` against a copy of the source, which validates every batch of both sides);
- the child's peak RSS against the chunk size (``ConvertOptions.chunk_bytes``) and the segment size: memory is bounded
  by the chunk, not by the segment.

Speed is reported for the record only, with a reference in the same run: the same child converting the first
``--reference-records`` of the source (a segment that does not split) gives the seconds per source byte of the
unsplit path.

    python benchmarks/bench_split.py [--records 28000000] [--dir /dev/shm] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import message_size, write_log_dir

REPO = Path(__file__).resolve().parents[1]
ORACLE = REPO.parent / "shared" / "oracle" / "oracle"
MAX_SEGMENT_BYTES = 2**31 - 1
MTIME_NS = 1_500_000_000_000_000_000

CHILD = r"""
import json, resource, sys, time
from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
started = time.perf_counter()
limit = int(sys.argv[3]) or None
plan = build_plan(PlanRequest(log_dirs=(sys.argv[1],), options=ConvertOptions(max_segment_bytes=limit)))
planned = time.perf_counter()
write_plan(plan, sys.argv[2])
report = pipeline.execute(plan, SerialEngine())
done = time.perf_counter()
seg = plan.log_dirs[0].partitions[0].segments[0]
print(json.dumps({
    "ok": report.ok,
    "plan_seconds": planned - started,
    "execute_seconds": done - planned,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "chunk_bytes": plan.options.chunk_bytes,
    "split": None if seg.split is None else {
        "outputs": seg.split.outputs,
        "cuts": [[c.position, c.base_offset] for c in seg.split.cuts or ()],
    },
    "tasks": len(plan.tasks),
    "range_tasks": sum(t.byte_range is not None for t in plan.tasks),
}))
"""


def _child(log_dir: Path, plan_path: Path, max_segment_bytes: int | None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(log_dir), str(plan_path), str(max_segment_bytes or 0)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if proc.returncode != 0:
        raise SystemExit(f"plan + execute failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _oracle(*args: str | Path) -> subprocess.CompletedProcess:
    # compare keeps a summary of every batch of both sides: 28 M batches need more than the oracle's default 2 GiB
    env = {**os.environ, "ORACLE_JAVA_OPTS": os.environ.get("ORACLE_JAVA_OPTS", "-Xmx12g")}
    return subprocess.run([str(ORACLE), *map(str, args)], capture_output=True, text=True, timeout=3600, env=env)


def _generate(root: Path, records: int) -> Path:
    write_log_dir(root, records, topic="tiny", key_bytes=6, value_bytes=4, magic=0, seed=5)
    part = root / "tiny-0"
    os.utime(part / f"{0:020d}.log", ns=(MTIME_NS, MTIME_NS))
    return part


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=28_000_000)
    ap.add_argument("--reference-records", type=int, default=1_500_000, help="under --range-bytes: one task")
    ap.add_argument(
        "--max-segment-bytes", type=int, help="a smaller limit, to try the script on small data (default: Kafka's)"
    )
    ap.add_argument("--dir", type=Path, default=Path("/dev/shm"))
    ap.add_argument("--keep", action="store_true", help="leave the scratch directory")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-split-", dir=args.dir))
    out: dict = {"records": args.records, "dir": str(args.dir)}
    try:
        t = time.perf_counter()
        part = _generate(scratch / "logs", args.records)
        source = part / f"{0:020d}.log"
        out["source_bytes"] = source.stat().st_size
        out["expected_v2_bytes"] = args.records * 78
        out["generate_seconds"] = round(time.perf_counter() - t, 1)
        print(f"generated {out['source_bytes'] / 2**30:.2f} GiB of v0 in {out['generate_seconds']} s", file=sys.stderr)
        original = scratch / "original"
        shutil.copytree(part, original)

        reference = _generate(scratch / "reference", args.reference_records).parent
        ref = _child(reference, scratch / "reference-plan.json", None)
        out["reference"] = {k: ref[k] for k in ("ok", "execute_seconds", "peak_rss_bytes", "split")}
        shutil.rmtree(reference)

        run = _child(scratch / "logs", scratch / "plan.json", args.max_segment_bytes)
        out.update({k: run[k] for k in ("ok", "plan_seconds", "execute_seconds", "peak_rss_bytes", "chunk_bytes")})
        out["split"] = run["split"]
        out["tasks"], out["range_tasks"] = run["tasks"], run["range_tasks"]
        logs = sorted(part.glob("*.log"))
        out["outputs"] = [{"file": p.name, "bytes": p.stat().st_size} for p in logs]
        problems = []
        names = [0, *(base for _, base in (run["split"] or {}).get("cuts", []))]
        if [p.name for p in logs] != [f"{b:020d}.log" for b in names]:
            problems.append(f"outputs {[p.name for p in logs]} are not the planned {names}")
        for p in logs:
            if p.stat().st_size > (args.max_segment_bytes or MAX_SEGMENT_BYTES):
                problems.append(f"{p.name} holds {p.stat().st_size} bytes, over the limit")
            with p.open("rb") as f:
                if int.from_bytes(f.read(8), "big") != int(p.stem):
                    problems.append(f"{p.name}: its first batch's base offset is not its name")
        for p in part.iterdir():
            if p.suffix in (".log", ".index", ".timeindex") and p.stat().st_mtime_ns != MTIME_NS:
                problems.append(f"{p.name} has mtime_ns {p.stat().st_mtime_ns}, not the source's {MTIME_NS}")
        t = time.perf_counter()
        # one pass of Kafka's reader over both: every output batch validated (bValid), records equal in order
        compare = _oracle("compare", original, part)
        result = json.loads(compare.stdout.strip().splitlines()[-1]) if compare.stdout.strip() else {}
        out["oracle_compare"] = {k: result.get(k) for k in ("equal", "aValid", "bValid", "records", "firstDifference")}
        if compare.returncode != 0 or not result.get("equal"):
            said = compare.stdout[-500:] + compare.stderr[-500:]
            problems.append(f"oracle compare: exit {compare.returncode}: {said}")
        out["oracle_seconds"] = round(time.perf_counter() - t, 1)
        out["problems"] = problems
        chunk = out["chunk_bytes"]
        out["peak_rss_over_chunk"] = round(out["peak_rss_bytes"] / chunk, 1)
        out["peak_rss_over_reference_run"] = round(out["peak_rss_bytes"] / ref["peak_rss_bytes"], 2)
        out["peak_rss_over_source"] = round(out["peak_rss_bytes"] / out["source_bytes"], 4)
        per_byte = out["execute_seconds"] / out["source_bytes"]
        ref_per_byte = ref["execute_seconds"] / (args.reference_records * message_size(6, 4, 0))
        out["seconds_per_byte_over_reference"] = round(per_byte / ref_per_byte, 2)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    out["bench_max_rss_children_bytes"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if out.get("ok") and not out.get("problems") else 1


if __name__ == "__main__":
    sys.exit(main())
