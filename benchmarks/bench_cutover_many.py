"""The cut-over's window at broker scale: many tiny pre-staged segments, against a cold run.

``bench_cutover.py`` measures the window on a few large segments, where the data decides it; this one measures it
where the count of segments does. Two twins of one broker-shaped log dir are written by ``gen_many.write_many`` on
tmpfs (N / P partitions x P tiny v0 segments, identical bytes; each its own inodes). Twin A is pre-staged
(``prestage``, timed: it runs while the broker does, so it is not part of the window); every partition's last
segment is its active one and is never staged, so 1/P of the segments are left for the window, as a broker's active
segments are. Then the broker "stops": the clean-shutdown marker is stamped on both twins. Timed, each verb as its
own process with the peak RSS of its tree (``bench_million.run_verb``): the cut-over (``plan`` then ``execute`` of
A) and the cold run (``plan`` then ``execute`` of B), alternating which goes first over the rounds (each round
writes and stages its twins anew: a staged conversion names its source by inode). Execute's own split of the
cut-over (checks, delta conversion, swap) is read from its output. Before the first round every verb runs once, untimed,
on a twin of two partitions, so the timed ones find their modules compiled (as ``bench_million``). Afterwards an
independent ``scan`` must certify both twins v2-only, and every live ``.log``, ``.index`` and ``.timeindex`` of A
must equal B's, bytes and mtime.

    python benchmarks/bench_cutover_many.py [--segments 100000] [--per-partition 100] [--rounds 1]
                                            [--dir /dev/shm/bench-cutover-many] [--engine dask|serial]
                                            [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_million  # noqa: E402
from bench_million import MB, VerbRun, run_verb  # noqa: E402
from gen_many import write_many  # noqa: E402

# each figure as ``migrate.units.human_seconds`` writes one under an hour: ``45 ms``, ``12.3 s``, ``4 min 05 s``
_SECONDS = r"(\d+ min \d+ s|[\d.]+ m?s)"
SPLIT_RE = re.compile(rf"this run: checks {_SECONDS}, delta conversion {_SECONDS}, swap {_SECONDS}")


def seconds_of(text: str) -> float:
    """A duration as ``human_seconds`` wrote it, in seconds."""
    if " min " in text:
        minutes, _, rest = text.partition(" min ")
        return 60 * int(minutes) + int(rest.removesuffix(" s"))
    if text.endswith(" ms"):
        return float(text.removesuffix(" ms")) / 1000
    return float(text.removesuffix(" s"))


@dataclass
class Round:
    order: str
    prestage_s: float
    cutover_plan_s: float
    cutover_execute_s: float
    cold_plan_s: float
    cold_execute_s: float
    checks_s: float
    delta_conversion_s: float
    swap_s: float
    cutover_tree_peak_mb: float
    cold_tree_peak_mb: float
    files_compared: int
    find_s: float  # the floor: a stat of every live and staged file (``find -printf``), best of 3
    start_s: float  # the floor of a verb: the interpreter and the tool's imports (``--version``), best of 3

    @property
    def window_s(self) -> float:
        return self.cutover_plan_s + self.cutover_execute_s

    @property
    def cold_s(self) -> float:
        return self.cold_plan_s + self.cold_execute_s


def stamp_clean_shutdown(log_dir: Path) -> None:
    """The broker stopped cleanly, now: it writes this marker last."""
    marker = log_dir / ".kafka_cleanshutdown"
    marker.touch()
    os.utime(marker)


def compare(a: Path, b: Path) -> int:
    """Every segment file of twin ``a`` equals ``b``'s, bytes and mtime; how many were compared."""
    n = 0
    for part in sorted(p for p in a.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for f in sorted(part.iterdir()):
            if not f.name.endswith((".log", ".index", ".timeindex")):
                continue
            twin = b / part.name / f.name
            if f.read_bytes() != twin.read_bytes() or f.stat().st_mtime_ns != twin.stat().st_mtime_ns:
                raise SystemExit(f"{f} differs from the cold run's {twin}")
            n += 1
    return n


def find_floor(dirs: list[Path]) -> float:
    """Seconds of ``find`` printing every file's size and mtime under ``dirs`` (a stat each), best of 3: what any
    proof that the files are unchanged costs at least."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(["find", *map(str, dirs), "-printf", "%s %T@\\n"], check=True, stdout=subprocess.DEVNULL)
        best = min(best, time.perf_counter() - started)
    return best


def one_round(args: argparse.Namespace, index: int) -> Round:
    per = args.per_partition
    partitions = args.segments // per
    root = Path(args.dir) / f"round{index}"
    if root.exists():
        shutil.rmtree(root)
    a, b, logs = root / "a" / "logdir", root / "b" / "logdir", root / "out"
    logs.mkdir(parents=True)
    engine = ["--engine", args.engine]
    if args.engine == "dask":
        engine += ["--dashboard-address", "127.0.0.1:0"]
    try:
        for twin in (a, b):
            write_many(twin, partitions, per, args.records, args.value_bytes)
        prestage = run_verb("prestage", ["--log-dirs", str(a)], logs)
        print(f"  prestage  {prestage.wall_s:8.2f} s (while the broker runs; not in the window)", flush=True)
        stamp_clean_shutdown(a)
        stamp_clean_shutdown(b)
        floor = find_floor([a, a.parent / ".kafka-log-migrate-staging"])
        start = min(run_verb("--version", [], logs).wall_s for _ in range(3))
        print(f"  floors    find {floor:7.2f} s  start {start:7.2f} s", flush=True)
        runs: dict[str, list[VerbRun]] = {}

        def both(name: str, log_dir: Path) -> None:
            plan = log_dir.parent / "plan.parquet"
            runs[name] = [
                run_verb("plan", ["--log-dirs", str(log_dir), "-o", str(plan)], logs),
                run_verb("execute", ["--plan", str(plan), *engine], logs),
            ]
            p, e = runs[name]
            print(f"  {name:<8} plan {p.wall_s:7.2f} s  execute {e.wall_s:7.2f} s", flush=True)

        order = ("cut-over", "cold") if index % 2 == 0 else ("cold", "cut-over")
        for name in order:
            both(name, a if name == "cut-over" else b)
        text = Path(runs["cut-over"][1].log).read_text()
        split = SPLIT_RE.search(text)
        if split is None:
            raise SystemExit(f"no cut-over split in {runs['cut-over'][1].log}: was anything taken from staging?")
        for twin in (a, b):
            run_verb("scan", ["--log-dirs", str(twin)], logs)  # exit 0: v2 only
        compared = compare(a, b)
        return Round(
            order=", ".join(order),
            prestage_s=round(prestage.wall_s, 2),
            cutover_plan_s=round(runs["cut-over"][0].wall_s, 2),
            cutover_execute_s=round(runs["cut-over"][1].wall_s, 2),
            cold_plan_s=round(runs["cold"][0].wall_s, 2),
            cold_execute_s=round(runs["cold"][1].wall_s, 2),
            checks_s=seconds_of(split.group(1)),
            delta_conversion_s=seconds_of(split.group(2)),
            swap_s=seconds_of(split.group(3)),
            cutover_tree_peak_mb=round(max(r.peaks.tree for r in runs["cut-over"]) / MB, 1),
            cold_tree_peak_mb=round(max(r.peaks.tree for r in runs["cold"]) / MB, 1),
            files_compared=compared,
            find_s=round(floor, 2),
            start_s=round(start, 2),
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=int, default=100_000)
    ap.add_argument("--per-partition", type=int, default=100, help="segments per partition (1 of them active)")
    ap.add_argument("--records", type=int, default=2, help="v0 messages per segment")
    ap.add_argument("--value-bytes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", default="/dev/shm/bench-cutover-many", help="scratch dir, on tmpfs")
    ap.add_argument("--engine", choices=["dask", "serial"], default="dask")
    ap.add_argument("--keep", action="store_true", help="keep the last round's dirs")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    if args.segments % args.per_partition:
        raise SystemExit("--segments must be a multiple of --per-partition")
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    bench_million.PYCACHE = Path(args.dir) / "pycache"
    # every verb once, untimed, on a small twin: the timed ones find their modules compiled, as an install's are
    one_round(argparse.Namespace(**{**vars(args), "segments": 2 * args.per_partition, "keep": False}), -1)
    rounds = []
    for i in range(args.rounds):
        print(
            f"round {i + 1}: {args.segments} segments ({args.segments // args.per_partition} x {args.per_partition})",
            flush=True,
        )
        rounds.append(one_round(args, i))
    best_window = min(r.window_s for r in rounds)
    best_cold = min(r.cold_s for r in rounds)
    print(
        "\n| round | order | window (plan + execute) s | of it: plan / checks / delta / swap s | cold run s "
        "| window / cold | floors: find, start s | prestage s | tree peak MB (cut-over, cold) |"
    )
    print("|---|---|---:|---|---:|---:|---|---:|---|")
    for i, r in enumerate(rounds):
        print(
            f"| {i} | {r.order} | {r.window_s:.2f} | {r.cutover_plan_s:.2f} / {r.checks_s:.2f} / "
            f"{r.delta_conversion_s:.2f} / {r.swap_s:.2f} | {r.cold_s:.2f} | {r.window_s / r.cold_s:.1%} | "
            f"{r.find_s:.2f}, {r.start_s:.2f} | {r.prestage_s:.1f} | "
            f"{r.cutover_tree_peak_mb:.0f}, {r.cold_tree_peak_mb:.0f} |"
        )
    staged = args.segments - args.segments // args.per_partition
    print(
        f"\nbest window {best_window:.2f} s against best cold run {best_cold:.2f} s: {best_window / best_cold:.1%}; "
        f"{1000 * best_window / args.segments:.3f} ms a segment ({staged} taken from staging); "
        f"{rounds[-1].files_compared} files equal to the cold run's, bytes and mtime"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "rounds": [asdict(r) | {"window_s": r.window_s, "cold_s": r.cold_s} for r in rounds],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
