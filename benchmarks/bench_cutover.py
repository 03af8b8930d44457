"""The cut-over's window after pre-staging, against a cold offline run of the same data in the same run.

    python benchmarks/bench_cutover.py [--dir DIR] [--gb 2] [--partitions 20] [--segment-mb 64] [--runs 3]
        [--changed 0.01] [--roll-mb 1] [--write-mbps 4] [--engine dask] [--json]

Each run prepares its own broker, as an operator's cut-over finds it:

1. a broker-shaped log dir of legacy v0 segments (``bench_prestage.build_log_dir``, built once and copied per run);
2. the broker "runs": a writer process holds ``.lock`` with fcntl (as the JVM's ``FileChannel.tryLock``), the
   clean-shutdown marker is gone, and every partition's active segment takes appends at ``--write-mbps`` and rolls a
   new segment at ``--roll-mb``, while pre-stage passes run in this process (no rate limit) until what is left to
   stage is at most ``--threshold`` of the data (at most ``--max-passes``), as an operator repeats them;
3. the broker stops: the writer ends, and before it stopped every partition rolled its active segment and wrote a
   new one, together ``--changed`` of the data (default 1%) that no pass saw; the checkpoints are written at the log
   end offsets, ``.lock`` removed and the clean-shutdown marker written, as a clean shutdown does;
4. the cold twin: the log dir copied (copy2 keeps mtimes) beside it, with no staging tree, before the cut-over.

Then, back to back in alternating order, with every segment and staged file of the run fsynced and dropped from the
page cache before each: (a) the cut-over, ``plan`` then ``execute --json`` as whole processes on the log dir (the
marker's mtime is set to the moment ``plan`` starts: the broker stopped then), and (b) the cold run, ``plan`` then
``execute --json`` on the twin; then (c) the floor, ``plan`` + ``execute`` of a fresh 4 MB log dir of 2 partitions:
what any run of the tool costs whatever its data (two processes, their imports, the engine, the report, the exit).
The window is the wall time of (a); the report's own ``window_seconds`` (marker to the end of the swap, the issue's
definition) is shown beside it. Last, every ``.log``, ``.index`` and ``.timeindex`` of both log dirs is compared byte
for byte and by mtime, and the run is removed. Before anything is timed, the floor runs once untimed: the verbs'
processes keep compiled modules in ``<dir>/pycache`` as an installed package does (PYTHONDONTWRITEBYTECODE, which
this environment sets, is dropped for them).

Why a fresh pre-stage per run and not a restored copy: a staged conversion names its source by device, inode, size,
mtime and ctime, and a copy has another inode and ctime, so the cut-over rightly converts every copied segment
anew. The best (shortest) window and the best cold run are reported, and their ratio (goal: at most 5%), with the
split of the best window (plan, execute's checks, delta conversion, swap) and each run's figures. With --json, one
JSON object.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import multiprocessing.synchronize
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench_prestage import KEY_BYTES, VALUE_BYTES, build_log_dir
from gen_legacy import message_size, segment_bytes, write_segment

from migrate.demo.legacy_logdir import PartitionFiles, write_broker_files
from migrate.kafka.layout import inspect_log_dir
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE, segment_name
from migrate.prestage.controls import Controls
from migrate.prestage.location import default_staging_root
from migrate.prestage.passes import PassReport, PrestageRequest, run_prestage

REPO = Path(__file__).resolve().parent.parent
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
MESSAGE = message_size(KEY_BYTES, VALUE_BYTES, 0)


def writer(
    log_dir: str,
    roll_bytes: int,
    rate: float,
    locked: multiprocessing.synchronize.Event,
    stop: multiprocessing.synchronize.Event,
) -> None:
    """A running broker: holds ``.lock`` as the JVM does, appends to every partition's active segment at ``rate``
    bytes per second in all, and rolls a new segment once the active one holds ``roll_bytes``."""
    fd = os.open(os.path.join(log_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    locked.set()
    parts = inspect_log_dir(log_dir).partitions
    # each partition's active segment and its next offset, kept here: listing the log dir each round costs more
    active = {p.path: [p.segments[-1].path, p.segments[-1].size, p.segments[-1].base_offset] for p in parts}
    for state in active.values():
        state[2] += state[1] // MESSAGE
    batch = 500
    started, written = time.monotonic(), 0
    while not stop.is_set():
        for part_dir, state in active.items():
            path, size, end = state
            if size >= roll_bytes:
                path = Path(part_dir) / segment_name(end, ".log")
                size = 0
            with open(path, "ab") as f:
                f.write(segment_bytes(batch, first_offset=end))
            state[:] = [path, size + batch * MESSAGE, end + batch]
            written += batch * MESSAGE
        ahead = written / rate - (time.monotonic() - started)
        if ahead > 0:
            stop.wait(ahead)
    os.close(fd)  # the lock goes with it


@dataclass
class Prepared:
    log_dir: Path
    twin: Path
    passes: list[dict[str, float]] = field(default_factory=list)
    legacy_bytes: int = 0  # every segment at the stop
    changed_bytes: int = 0  # what no pass saw: the old active segments and the new ones
    written_bytes: int = 0  # appended and rolled by the writer during the passes


def segment_bytes_on_disk(log_dir: Path) -> int:
    return sum(s.size for p in inspect_log_dir(log_dir).partitions for s in p.segments)


def prepare(base: Path, run_dir: Path, args: argparse.Namespace) -> Prepared:
    log_dir = run_dir / "kafka"
    shutil.copytree(base, log_dir)  # before any pre-stage: the copy's identities are the ones staged
    (log_dir / CLEAN_SHUTDOWN_FILE).unlink()  # the broker runs: Kafka deletes the marker as it starts
    before = segment_bytes_on_disk(log_dir)
    total = before
    prepared = Prepared(log_dir, run_dir / "cold" / "kafka")
    locked, stop = multiprocessing.Event(), multiprocessing.Event()
    proc = multiprocessing.Process(
        target=writer, args=(str(log_dir), int(args.roll_mb * 1e6), args.write_mbps * 1e6, locked, stop)
    )
    proc.start()
    try:
        if not locked.wait(30):
            raise SystemExit("the writer did not take .lock within 30 s")
        request = PrestageRequest(
            log_dirs=(str(log_dir),), passes=args.max_passes, threshold_bytes=int(args.threshold * total)
        )

        def on_pass(p: PassReport) -> None:
            (d,) = p.log_dirs
            prepared.passes.append(
                {
                    "seconds": round(p.seconds, 2),
                    "staged": d.staged,
                    "staged_bytes": d.staged_source_bytes,
                    "left_bytes": d.left_bytes,
                    "active_bytes": d.active_bytes,
                    "rejected": len(d.rejected),
                    "lock_holder": d.lock_holder or 0,
                }
            )

        report = run_prestage(request, Controls(), on_pass=on_pass)
        if not report.ok:
            raise SystemExit(f"pre-stage failed: {report.stopped or report.passes[-1].log_dirs[0].refused[:3]}")
    finally:
        stop.set()
        proc.join()
    prepared.written_bytes = segment_bytes_on_disk(log_dir) - before
    stop_broker(log_dir, args.changed, prepared)
    shutil.copytree(log_dir, prepared.twin)  # copy2: mtimes kept, as a conversion stamps them on its outputs
    return prepared


def stop_broker(log_dir: Path, changed: float, prepared: Prepared) -> None:
    """What the broker did after the last pass, then its clean shutdown: each partition's active segment closed and a
    new one written, together ``changed`` of the data; checkpoints at the log end offsets; no .lock; the marker."""
    parts = inspect_log_dir(log_dir).partitions
    total = sum(s.size for p in parts for s in p.segments)
    share = changed * total / len(parts)
    ends = []
    for part in parts:
        active = part.segments[-1]
        end = active.base_offset + active.size // MESSAGE
        records = max(100, int(share - active.size) // MESSAGE)
        write_segment(part.path / segment_name(end, ".log"), records, first_offset=end)
        prepared.changed_bytes += active.size + records * MESSAGE
        ends.append(PartitionFiles(part.topic, part.partition, end + records))
    write_broker_files(log_dir, ends)  # checkpoints, partition.metadata, leader epochs (unchanged) and the marker
    (log_dir / ".lock").unlink(missing_ok=True)
    prepared.legacy_bytes = segment_bytes_on_disk(log_dir)


def drop_cache(root: Path) -> None:
    """Every segment and staged file under ``root`` written out and dropped from the page cache: each timed run
    reads from the disk, with no writeback of the preparation under it."""
    os.sync()
    for path in root.rglob("*"):
        if path.suffix in SEGMENT_SUFFIXES and path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


PYCACHE: Path | None = None  # where the verbs' processes keep their compiled modules, set by main


def cli(*argv: str) -> tuple[float, str]:
    """One verb as a whole process, as an operator runs it: its wall time and its stdout. Compiled modules are
    cached as an installed package's are (this environment may set PYTHONDONTWRITEBYTECODE: every process would
    compile the tool's modules again, about 0.7 s that no operator's install pays)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if PYCACHE is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "migrate.cli", *argv], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"kafka-log-migrate {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def plan_and_execute(log_dir: Path, plan_path: Path, engine: list[str], stamp_marker: bool) -> dict[str, object]:
    if stamp_marker:  # the broker stops now: the window starts at the marker's mtime
        now = time.time_ns()
        os.utime(log_dir / CLEAN_SHUTDOWN_FILE, ns=(now, now))
    plan_seconds, _ = cli("plan", "--log-dirs", str(log_dir), "-o", str(plan_path))
    execute_seconds, out = cli("execute", "--plan", str(plan_path), "--json", *engine)
    report = json.loads(out[out.index("{") :])
    if not report["ok"]:
        raise SystemExit(f"execute of {log_dir} did not finish: {report['errors'][:3]}")
    return {
        "seconds": round(plan_seconds + execute_seconds, 3),
        "plan_seconds": round(plan_seconds, 3),
        "execute_seconds": round(execute_seconds, 3),
        "stage_seconds": report["stage_seconds"],
        "segments": report["totals"]["verified"] + report["totals"]["unchanged"],
        "cutover": report["cutover"],
    }


def segment_files(log_dir: Path) -> dict[str, Path]:
    """Every segment file of every partition dir (the run's own hidden dirs left out)."""
    return {
        f"{part.name}/{path.name}": path
        for part in sorted(p for p in log_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        for path in sorted(part.iterdir())
        if path.is_file() and path.suffix in SEGMENT_SUFFIXES
    }


def same_files(live: Path, cold: Path) -> tuple[int, int, list[str]]:
    """(files compared, their bytes, the differences): names, mtimes and every byte."""
    ours, theirs = segment_files(live), segment_files(cold)
    problems = [f"only in the cut-over: {n}" for n in sorted(ours.keys() - theirs.keys())]
    problems += [f"only in the cold run: {n}" for n in sorted(theirs.keys() - ours.keys())]
    compared = size = 0
    for name in sorted(ours.keys() & theirs.keys()):
        a, b = ours[name].stat(), theirs[name].stat()
        compared += 1
        size += a.st_size
        if a.st_mtime_ns != b.st_mtime_ns:
            problems.append(f"{name}: mtime {a.st_mtime_ns} against the cold run's {b.st_mtime_ns}")
        if a.st_size != b.st_size or not same_bytes(ours[name], theirs[name]):
            problems.append(f"{name}: bytes differ ({a.st_size} against {b.st_size})")
    return compared, size, problems


def same_bytes(a: Path, b: Path, chunk: int = 8 << 20) -> bool:
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True


def engine_args(args: argparse.Namespace) -> list[str]:
    return ["--engine", args.engine] + (["--dashboard-address", "127.0.0.1:0"] if args.engine == "dask" else [])


def floor(where: Path, args: argparse.Namespace) -> dict[str, object]:
    """``plan`` + ``execute`` of a log dir of 2 partitions and 4 MB, cold: what any run of the tool costs whatever
    its data (two processes started, their imports, the engine, the report, the exit). The first call also compiles
    and caches every module the verbs import."""
    shutil.rmtree(where, ignore_errors=True)
    log_dir = build_log_dir(where, 4_000_000, 2, 1_000_000)
    drop_cache(where)
    timed = plan_and_execute(log_dir, where / "plan.json", engine_args(args), stamp_marker=False)
    shutil.rmtree(where)
    return timed


def one_run(number: int, base: Path, root: Path, args: argparse.Namespace) -> dict[str, object]:
    run_dir = root / f"run{number}"
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    prepared = prepare(base, run_dir, args)
    prepare_seconds = time.perf_counter() - started
    engine = engine_args(args)
    timed: dict[str, dict[str, object]] = {}
    order = ["cutover", "cold"] if number % 2 == 0 else ["cold", "cutover"]
    for which in order:
        drop_cache(run_dir)
        if which == "cutover":
            timed[which] = plan_and_execute(prepared.log_dir, run_dir / "plan.json", engine, stamp_marker=True)
        else:
            timed[which] = plan_and_execute(prepared.twin, run_dir / "cold.json", engine, stamp_marker=False)
    timed["floor"] = floor(run_dir / "floor", args)
    cut, cold = timed["cutover"], timed["cold"]
    if cut["cutover"] is None or cold["cutover"] is not None:
        raise SystemExit("the cut-over found no pre-staged conversions, or the cold run found some: see the plans")
    compared, compared_bytes, problems = same_files(prepared.log_dir, prepared.twin)
    staging_left = sorted(str(p) for p in default_staging_root(prepared.log_dir).rglob("*") if p.is_file())
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return {
        "order": order,
        "prepare_seconds": round(prepare_seconds, 1),
        "passes": prepared.passes,
        "written_during_passes_bytes": prepared.written_bytes,
        "legacy_bytes": prepared.legacy_bytes,
        "changed_bytes": prepared.changed_bytes,
        "cutover": cut,
        "cold": cold,
        "floor": timed["floor"],
        "window_of_cold": round(float(cut["seconds"]) / float(cold["seconds"]), 4),  # type: ignore[arg-type]
        "compared_files": compared,
        "compared_bytes": compared_bytes,
        "differences": problems[:20],
        "staging_files_left": staging_left[:20],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, help="where to build (default: a new dir under /work, on the real disk)")
    ap.add_argument("--gb", type=float, default=2.0, help="legacy bytes in closed segments, in GB (default 2)")
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--segment-mb", type=float, default=64.0, help="size of each closed segment (default 64 MB)")
    ap.add_argument("--roll-mb", type=float, default=1.0, help="the writer rolls a segment at this size (default 1)")
    ap.add_argument("--write-mbps", type=float, default=4.0, help="the writer's appends, MB/s in all (default 4)")
    ap.add_argument("--threshold", type=float, default=0.005, help="passes until this share is left (default 0.5%%)")
    ap.add_argument("--max-passes", type=int, default=8)
    ap.add_argument("--changed", type=float, default=0.01, help="share of the data no pass saw (default 1%%)")
    ap.add_argument("--runs", type=int, default=3, help="runs (default 3), each its own pre-staged broker and twin")
    ap.add_argument("--engine", default="dask", choices=["dask", "serial"], help="execute's engine (default dask)")
    ap.add_argument("--keep", action="store_true", help="keep each run's log dirs (disk: about 4x --gb per run)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-cutover-", dir="/work" if Path("/work").is_dir() else None))
    root.mkdir(parents=True, exist_ok=True)
    global PYCACHE
    PYCACHE = root / "pycache"
    try:
        base = build_log_dir(root / "base", int(args.gb * 1e9), args.partitions, int(args.segment_mb * 1e6))
        floor(root / "floor", args)  # untimed: the modules compiled and cached
        runs = [one_run(i, base, root, args) for i in range(args.runs)]
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result = summarize(runs, args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(summary_text(result))
    return 0 if result["outputs_equal"] else 1


def summarize(runs: list[dict[str, object]], args: argparse.Namespace) -> dict[str, object]:
    best_cut = min(runs, key=lambda r: r["cutover"]["seconds"])  # type: ignore[index]
    best_cold = min(float(r["cold"]["seconds"]) for r in runs)  # type: ignore[index]
    cut = best_cut["cutover"]
    least = min(float(r["floor"]["seconds"]) for r in runs)  # type: ignore[index]
    c = cut["cutover"]  # type: ignore[index]
    return {
        "partitions": args.partitions,
        "engine": args.engine,
        "legacy_bytes": best_cut["legacy_bytes"],
        "changed_bytes": best_cut["changed_bytes"],
        "window_seconds": cut["seconds"],  # type: ignore[index]
        "cold_seconds": best_cold,
        "window_of_cold": round(float(cut["seconds"]) / best_cold, 4),  # type: ignore[index]
        "goal": 0.05,
        # the stop to the end of the swap, as the issue defines the window: the report's own figure
        "report_window_of_cold": round(float(c["window_seconds"]) / best_cold, 4),
        # plan + execute of 4 MB in 2 partitions: the tool's cost whatever the data; the window less it
        "floor_seconds": least,
        "window_less_floor_of_cold": round((float(cut["seconds"]) - least) / best_cold, 4),  # type: ignore[index]
        "split": {
            "plan": cut["plan_seconds"],  # type: ignore[index]
            "execute": cut["execute_seconds"],  # type: ignore[index]
            "checks": c["checks_seconds"],
            "delta": c["delta_seconds"],
            "swap": c["swap_seconds"],
            "report_window_seconds": c["window_seconds"],
            "report_cold_estimate_seconds": c["cold_seconds"],
            "staged": [c["staged_segments"], c["staged_bytes"]],
            "converted_in_window": [c["window_segments"], c["window_bytes"]],
            "fallbacks": len(c["fallbacks"]),
        },
        "outputs_equal": all(not r["differences"] for r in runs),
        "runs": runs,
    }


def summary_text(r: dict[str, object]) -> str:
    s = r["split"]
    gb = 1e9
    lines = [
        f"cut-over after pre-staging: {float(r['legacy_bytes']) / gb:.2f} GB of legacy data in {r['partitions']} "  # type: ignore[arg-type]
        f"partitions, {float(r['changed_bytes']) / 1e6:.1f} MB of it changed after the last pass; engine {r['engine']}",
        f"window (plan + execute, whole processes): {r['window_seconds']:.2f} s; cold run of the same data: "
        f"{r['cold_seconds']:.2f} s; window = {float(r['window_of_cold']):.1%} of the cold run (goal <= 5%; best of "  # type: ignore[arg-type]
        f"{len(r['runs'])} runs)",  # type: ignore[arg-type]
        f"  the report's window (broker stop to the end of the swap) = {float(r['report_window_of_cold']):.1%} of the "  # type: ignore[arg-type]
        f"cold run; the floor (plan + execute of 4 MB in 2 partitions) {r['floor_seconds']:.2f} s, the window less "
        f"it = {float(r['window_less_floor_of_cold']):.1%} of the cold run",  # type: ignore[arg-type]
        f"  split: plan {s['plan']:.2f} s, execute {s['execute']:.2f} s (checks {s['checks']:.2f}, delta "  # type: ignore[index]
        f"{s['delta']:.2f}, swap {s['swap']:.2f}); the report's window (marker to swap) {s['report_window_seconds']} s"  # type: ignore[index]
        f", its cold estimate {s['report_cold_estimate_seconds']} s",  # type: ignore[index]
        f"  staged and taken: {s['staged'][0]} segments, {s['staged'][1] / gb:.2f} GB; converted in the window: "  # type: ignore[index]
        f"{s['converted_in_window'][0]} segments, {s['converted_in_window'][1] / 1e6:.1f} MB; fallbacks "  # type: ignore[index]
        f"{s['fallbacks']}",  # type: ignore[index]
    ]
    for i, run in enumerate(r["runs"]):  # type: ignore[arg-type]
        passes = ", ".join(f"{p['staged_bytes'] / 1e6:.0f} MB in {p['seconds']:.0f} s" for p in run["passes"])
        lines.append(
            f"  run {i} ({' then '.join(run['order'])}): window {run['cutover']['seconds']:.2f} s, cold "
            f"{run['cold']['seconds']:.2f} s ({run['window_of_cold']:.1%}), floor {run['floor']['seconds']:.2f} s; "
            f"passes: {passes}; "
            f"{run['compared_files']} files compared, {len(run['differences'])} differences"
        )
        lines += [f"    {d}" for d in run["differences"]]
    verdict = "equal to the cold run's (bytes and mtimes)" if r["outputs_equal"] else "DIFFERENT from the cold run's"
    lines.append(f"outputs: {verdict}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
