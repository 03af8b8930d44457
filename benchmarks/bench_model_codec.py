"""The record codec (``migrate.codec``) on a broker-sized plan and on run-state rows, against bare ``json``.

A plan of ``--partitions`` x ``--segments`` tiny v0 segments (benchmarks/gen_many.py, planned by ``build_plan``) is
read and written the way every command does, and each is timed against the ``json`` call it wraps, in the same run:

* load: ``load_plan_json(text)`` (json.loads + from_json + check_integrity, whose plan id hashes to_json's output
  dumped with sorted keys) against ``json.loads(text)``; from_json alone against the same;
* dump: ``dump_plan_json(plan)`` (to_json + json.dumps, indent 1) against ``json.dumps`` of its to_json output
  (indent 1); to_json alone against ``json.loads(text)``, for scale;
* state rows: ``--rows`` SegmentResults (three staged files, their stats and the live ones, digests) written as
  ``migrate.run.state`` writes them (``json.dumps(to_json(r), separators=(",", ":"))``) and read back as it reads
  them (``from_json(SegmentResult, json.loads(s))``), against json.dumps and json.loads of the same data.

Timing is in rounds, each measurement once per round (a change of the machine's load does not fall on one of them
only), the cyclic GC collected before each; figures are the best of ``--rounds``. Ratios are what to compare across
machines and revisions; ``PYTHONPATH`` chooses the revision of ``migrate`` measured.

    python benchmarks/bench_model_codec.py [--dir /dev/shm/bench-model-codec] [--partitions 10000] [--segments 10]
                                           [--plan PLAN.json] [--rounds 5] [--rows 20000] [--json out.json]

``--plan`` times an existing plan file instead of generating and planning a log dir (planning 100,000 segments takes
about two minutes; the generated dir and plan are left in ``--dir`` for the next run: ``--plan DIR/plan.json``).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from gen_many import write_many

from migrate.codec import from_json, to_json
from migrate.model.plan_tree import DigestAlgorithm, Plan, dump_plan_json, load_plan_json
from migrate.model.run_state import ConversionStatus, FileStat, SegmentResult

MTIME = 1_500_000_000 * 10**9


def make_plan(root: Path, partitions: int, segments: int) -> Path:
    from migrate.planning.plan import build_plan, write_plan
    from migrate.planning.request import PlanRequest

    if root.exists():
        shutil.rmtree(root)
    logdir = root / "logdir"
    logdir.mkdir(parents=True)
    t = time.perf_counter()
    write_many(logdir, partitions, segments)
    print(f"generated {partitions} x {segments} segments in {time.perf_counter() - t:.1f} s", flush=True)
    t = time.perf_counter()
    plan = build_plan(PlanRequest(log_dirs=(str(logdir),)))
    path = root / "plan.json"
    write_plan(plan, path)
    print(f"planned in {time.perf_counter() - t:.1f} s: {path}", flush=True)
    return path


def state_rows(n: int) -> list[SegmentResult]:
    """SegmentResults shaped like execute's: three staged files, their stats and the live files they replace."""
    rows = []
    for i in range(n):
        base = i * 2
        staged = f"/data/kafka/.kafka-log-migrate-staging/t-{i % 1000}/{base:020d}"
        live = f"/data/kafka/t-{i % 1000}/{base:020d}"
        sfx = (".log", ".index", ".timeindex")
        rows.append(
            SegmentResult(
                source=live + ".log",
                base_offset=base,
                status=ConversionStatus.CONVERTED,
                outputs={s: staged + s for s in sfx},
                output_stats={s: FileStat(1_000_000 + i, 196 + k, MTIME + i) for k, s in enumerate(sfx)},
                live_before={s: FileStat(2_000_000 + i, 112 + k, MTIME) for k, s in enumerate(sfx)},
                source_bytes=112,
                output_bytes=196,
                entries_in=2,
                batches_out=2,
                records=2,
                first_offset=base,
                last_offset=base + 1,
                max_timestamp=1_500_000_000_000,
                magics_in={"0": 2},
                mtime_timestamped_records=2,
                digest=DigestAlgorithm.XXH3_128,
                source_digest=f"{i:032x}",
                output_digest_ts=f"{i + 1:032x}",
                mtime_ns=MTIME,
                seconds=0.001,
                source_ctime_ns=MTIME,
                source_edges=f"{i:016x}",
            )
        )
    return rows


def rounds(cases: dict[str, Callable[[], Any]], n: int) -> dict[str, float]:
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(n):
        for name, case in cases.items():
            gc.collect()
            t = time.perf_counter()
            case()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm/bench-model-codec"))
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--plan", type=Path, help="time this plan file instead of generating one")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    path = args.plan or make_plan(args.dir, args.partitions, args.segments)
    text = path.read_text()
    data = json.loads(text)
    plan = load_plan_json(text, str(path))
    body = to_json(plan)
    # the codec's output is checked before it is timed: a faster codec must write and read the same
    assert dump_plan_json(plan) == text, "dump_plan_json(load_plan_json(text)) differs from the plan file"
    assert from_json(Plan, data, "plan") == plan
    segments = sum(len(p.segments) for d in plan.log_dirs for p in d.partitions)
    print(f"plan {path}: {len(text) / 1e6:.1f} MB, {segments} segments, {len(plan.tasks)} tasks", flush=True)

    rows = state_rows(args.rows)
    texts = [json.dumps(to_json(r), separators=(",", ":")) for r in rows]
    bodies = [to_json(r) for r in rows]
    assert [from_json(SegmentResult, json.loads(s)) for s in texts] == rows

    best = rounds(
        {
            "json.loads": lambda: json.loads(text),
            "load_plan_json": lambda: load_plan_json(text, str(path)),
            "from_json": lambda: from_json(Plan, data, "plan"),
            "json.dumps": lambda: json.dumps(body, indent=1),
            "dump_plan_json": lambda: dump_plan_json(plan),
            "to_json": lambda: to_json(plan),
            "rows json.dumps": lambda: [json.dumps(b, separators=(",", ":")) for b in bodies],
            "rows write": lambda: [json.dumps(to_json(r), separators=(",", ":")) for r in rows],
            "rows json.loads": lambda: [json.loads(s) for s in texts],
            "rows read": lambda: [from_json(SegmentResult, json.loads(s)) for s in texts],
        },
        args.rounds,
    )
    ratios = {
        "load_plan_json / json.loads": best["load_plan_json"] / best["json.loads"],
        "from_json / json.loads": best["from_json"] / best["json.loads"],
        "dump_plan_json / json.dumps": best["dump_plan_json"] / best["json.dumps"],
        "to_json / json.loads": best["to_json"] / best["json.loads"],
        "state rows write / json.dumps": best["rows write"] / best["rows json.dumps"],
        "state rows read / json.loads": best["rows read"] / best["rows json.loads"],
    }
    print(f"best of {args.rounds} interleaved rounds:")
    for name, seconds in best.items():
        print(f"  {name:16s} {seconds * 1e3:9.1f} ms")
    for name, ratio in ratios.items():
        print(f"  {name:30s} {ratio:5.2f}x")
    if args.json:
        out = {"plan": str(path), "segments": segments, "rows": args.rows, "seconds": best, "ratios": ratios}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
