"""A million segments on one log dir: every verb of a migration as its own process, timed, with the peak
memory of its whole process tree.

For each size N (segments), ``gen_many.write_many`` writes one broker-shaped log dir of N / P partitions x P tiny
segments (2 v0 messages each) on tmpfs. Then, each as ``python -m migrate.cli ...`` (what an operator runs):
plan, execute, status, verify, rollback, execute again, finalize, and an independent ``scan`` that must certify
the log dir v2-only (exit 0). Every verb's wall time is taken from outside, and a thread samples the RSS of the
verb's process and of every descendant (Dask nanny and workers) every ~50 ms: the driver's peak, the largest peak of
any one descendant, and the peak of the sum over the tree (RSS counts shared pages once per process, so the sum is
an upper bound). The same sampler sums the CPU (user + system) each process of the tree used, as last sampled, and
each verb's steal share is printed beside its time (on a VM neither is steady: both move with what the host takes).

Also per size: the plan's bytes on disk per segment; the time the project's loader takes to load it (in a fresh
``python -c``, timed around the call only, best of 3); execute's ms per segment; and execute's overhead per
segment = (execute wall - floor) / N, where the floor is a plain copy of the same source bytes into fresh files on
the same tmpfs in one Python process (one new dir per partition, each .log read and written to a new file; best of
2). Beside it, the job's own floor (``job_floor``, best of 2): the file operations a migration cannot leave out (each
source read, three outputs written with its mtime, the .log read back, the source moved aside and the outputs renamed
in), with no conversion and no state, one process per core; execute's time over it per segment is reported too.
status runs 3 times, interleaved with its floor: ``find`` stating every file of the migrated log dir (what
status must ask of each live file), best of 3 each. Each size's dir is removed before the next is generated.
Before the first size, every verb runs once, untimed, on a log dir of 2 partitions, so that the timed ones find
their modules compiled (in ``<dir>/pycache``) as an installed package's are.

    python benchmarks/bench_million.py [--segments 100000,300000,1000000] [--per-partition 10]
                                       [--dir /dev/shm/bench-million] [--engine dask|serial] [--workers N]
                                       [--plan-name plan.parquet] [--host-memory as-is|quiet] [--json out.json]

``--host-memory quiet`` (root) turns the VM's free page reporting off for the run and touches up to
``HOST_WARM_BYTES`` once first (``bench_end_to_end.quiet_host_memory``, as ``bench_cores.py`` does), then restores
it: with reporting on, an execute's millions of fresh tmpfs pages fault in from the host by chance of what the run
before freed (at 10^6 on 2026-11-28: the first execute 387 s, the second, in pages rollback had just freed, 353 s).

The plan's name is a parameter (a columnar plan need not end in .json) and the loader is taken through
``plan_loader`` alone: the two places to adapt when the plan format changes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from gen_many import TOPIC, write_many  # noqa: E402

MB = 1e6
SAMPLE_S = 0.05
HOST_WARM_BYTES = 16 << 30  # at most half the memory available is touched (quiet_host_memory)
VERB_TIMEOUT_S = 6 * 3600

# the scale goals: (size the goal is stated at, row field, limit, what it says)
GOALS: tuple[tuple[int, str, float, str], ...] = (
    (1_000_000, "execute_overhead_ms_per_segment", 0.3, "execute's overhead at most 0.3 ms per segment"),
    (1_000_000, "max_driver_peak_mb", 1000, "the driver's peak RSS at most 1 GB"),
    (1_000_000, "plan_bytes_per_segment", 100, "the plan at most 100 B per segment on disk"),
    (1_000_000, "plan_load_s", 2.0, "the plan loaded in at most 2 s"),
    (100_000, "max_tree_peak_mb", 400, "peak RSS of all the run's processes at most 400 MB"),
    (100_000, "status_s", 2.0, "status within 2 s"),
)


def plan_loader() -> Callable[[str], object]:
    """How the commands load a plan (``migrate/commands/engine.py`` ``load_plan_for``): the one place to change when
    the plan format changes. Imports happen here, outside the timed call."""
    from migrate.planning.plan import load_plan

    return load_plan


@dataclass
class Peaks:
    """Peak RSS in bytes seen while a process tree ran, and the CPU its processes used."""

    driver: int = 0
    descendant: int = 0
    tree: int = 0
    descendants_seen: int = 0
    # user + system seconds of every process of the tree, each as last sampled (up to SAMPLE_S of each process's
    # last moments missed): what the verb's processes were charged, beside its wall time (on this VM it drifts
    # with the machine too: an execute of 10^5 took 40.7 and 57.4 s of CPU ten minutes apart)
    cpu_s: float = 0.0


@dataclass
class VerbRun:
    verb: str
    argv: list[str]
    exit_code: int
    wall_s: float
    peaks: Peaks
    log: str
    steal_share: float = 0.0  # of every core's time during the verb, taken by the hypervisor (cpu_steal_ticks)


def cpu_ticks() -> tuple[int, int]:
    """(steal, all) clock ticks of every core since boot, from /proc/stat's ``cpu`` line; (0, 0) where there is none.
    On a VM the host takes its share (steal) when it likes: a verb's wall time is read beside it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return 0, 0
    return fields[7], sum(fields)


def steal_between(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


@dataclass
class SizeRow:
    segments: int
    partitions: int
    per_partition: int
    source_mb: float
    generate_s: float
    floor_copy_s: float
    job_floor_s: float  # job_floor: the file operations a migration cannot leave out, on every core (best of 2)
    plan_bytes: int
    plan_bytes_per_segment: float
    plan_load_s: float
    plan_load_peak_mb: float
    verbs: list[VerbRun] = field(default_factory=list)
    status_walls: list[float] = field(default_factory=list)  # status, run 3 times interleaved with its floor
    stat_floor_s: float = 0.0  # status's floor: `find` stating every file of the migrated log dir, best of 3

    def wall(self, verb: str) -> float:
        return next(v.wall_s for v in self.verbs if v.verb == verb)

    def summary(self) -> dict[str, float]:
        """The figures the goals and the table read."""
        execute = self.wall("execute")
        return {
            "execute_s": round(execute, 2),
            "execute_steal_share": next(v.steal_share for v in self.verbs if v.verb == "execute"),
            "execute_cpu_ms_per_segment": round(
                1000 * next(v.peaks.cpu_s for v in self.verbs if v.verb == "execute") / self.segments, 4
            ),
            "execute_ms_per_segment": round(1000 * execute / self.segments, 4),
            "execute_overhead_ms_per_segment": round(1000 * (execute - self.floor_copy_s) / self.segments, 4),
            "floor_ms_per_segment": round(1000 * self.floor_copy_s / self.segments, 4),
            "job_floor_ms_per_segment": round(1000 * self.job_floor_s / self.segments, 4),
            "execute_over_job_floor_ms_per_segment": round(1000 * (execute - self.job_floor_s) / self.segments, 4),
            "status_s": round(min(self.status_walls or [self.wall("status")]), 2),
            "stat_floor_s": round(self.stat_floor_s, 2),
            "plan_bytes_per_segment": round(self.plan_bytes_per_segment, 1),
            "plan_load_s": round(self.plan_load_s, 3),
            "max_driver_peak_mb": round(max(v.peaks.driver for v in self.verbs) / MB, 1),
            "max_descendant_peak_mb": round(max(v.peaks.descendant for v in self.verbs) / MB, 1),
            "max_tree_peak_mb": round(max(v.peaks.tree for v in self.verbs) / MB, 1),
        }


class TreeSampler(threading.Thread):
    """Samples the RSS of a process and all its descendants until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peaks = Peaks()
        self.seen: set[int] = set()
        self.cpu: dict[int, float] = {}  # pid -> its user + system seconds, as last sampled
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(SAMPLE_S)

    def sample(self) -> None:
        try:
            driver = self.root.memory_info().rss
            self._cpu(self.root)
            children = self.root.children(recursive=True)
        except psutil.Error:
            return  # the verb has exited between two samples
        total = driver
        for child in children:
            try:
                rss = child.memory_info().rss
                self._cpu(child)
            except psutil.Error:
                continue  # a worker that exited since children() listed it
            self.seen.add(child.pid)
            total += rss
            self.peaks.descendant = max(self.peaks.descendant, rss)
        self.peaks.driver = max(self.peaks.driver, driver)
        self.peaks.tree = max(self.peaks.tree, total)
        self.peaks.descendants_seen = len(self.seen)
        self.peaks.cpu_s = sum(self.cpu.values())

    def _cpu(self, process: psutil.Process) -> None:
        times = process.cpu_times()  # its own: a child's are its own entry, not counted twice
        self.cpu[process.pid] = times.user + times.system


# where the verbs keep compiled modules, under --dir: set by main
PYCACHE: Path | None = None


def child_env() -> dict[str, str]:
    """The verbs import this checkout's ``migrate``, whatever is installed, and keep compiled modules as an installed
    package does: this environment may set PYTHONDONTWRITEBYTECODE, and then every verb would compile the modules it
    imports again (about 0.7 s, more under load) that no operator's install pays."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if PYCACHE is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def run_verb(verb: str, args: list[str], logs: Path, ok_codes: tuple[int, ...] = (0,)) -> VerbRun:
    """``python -m migrate.cli VERB ARGS`` as its own process, its output in ``logs/VERB.out``; a code outside
    ``ok_codes`` stops the benchmark with the output's tail."""
    argv = [sys.executable, "-m", "migrate.cli", verb, *args]
    n = sum(1 for _ in logs.glob(f"{verb}*.out"))
    log = logs / (f"{verb}.out" if n == 0 else f"{verb}-{n + 1}.out")
    with open(log, "wb") as out:
        ticks = cpu_ticks()
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=child_env(), cwd=REPO)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        code = proc.wait(timeout=VERB_TIMEOUT_S)
        wall = time.perf_counter() - start
        steal = steal_between(ticks, cpu_ticks())
        sampler.done.set()
        sampler.join()
    if code not in ok_codes:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        raise SystemExit(f"{' '.join(argv)} exited {code} (output in {log}); its last lines:\n{tail}")
    return VerbRun(verb, argv[3:], code, wall, sampler.peaks, str(log), round(steal, 4))


def source_logs(log_dir: Path) -> list[tuple[str, list[str]]]:
    """Each partition dir with its .log files, in a stable order."""
    return [
        (part.name, sorted(f.name for f in os.scandir(part) if f.name.endswith(".log")))
        for part in sorted(Path(e.path) for e in os.scandir(log_dir) if e.is_dir() and e.name.startswith(TOPIC + "-"))
    ]


def stat_floor(log_dir: Path) -> float:
    """status's floor: every file of the log dir stated by a plain tool (``find -printf`` of each file's inode,
    size and mtime, what status compares of each live file), timed as a whole process."""
    start = time.perf_counter()
    subprocess.run(
        ["find", str(log_dir), "-type", "f", "-printf", "%i %s %T@\\n"], stdout=subprocess.DEVNULL, check=True
    )
    return time.perf_counter() - start


def copy_floor(log_dir: Path, scratch: Path, layout: list[tuple[str, list[str]]]) -> float:
    """One plain copy of every source segment into fresh files (a new dir per partition), timed; the copy is
    removed afterwards, outside the time."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    start = time.perf_counter()
    os.mkdir(scratch)
    for part, names in layout:
        src, dst = f"{log_dir}/{part}/", f"{scratch}/{part}/"
        os.mkdir(dst)
        for name in names:
            with open(src + name, "rb") as f:
                data = f.read()
            fd = os.open(dst + name, flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
    elapsed = time.perf_counter() - start
    shutil.rmtree(scratch)
    return elapsed


def job_floor_share(log_dir: str, scratch: str, layout: list[tuple[str, list[str]]]) -> None:
    """``job_floor``'s work for some partitions, in one process."""
    write = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for part, names in layout:
        live, staged, aside = f"{scratch}/{part}/", f"{scratch}/{part}.staged/", f"{scratch}/{part}.aside/"
        os.mkdir(staged)
        os.mkdir(aside)
        for name in names:
            stem = name[: -len(".log")]
            fd = os.open(live + name, os.O_RDONLY)
            st = os.fstat(fd)
            data = os.read(fd, st.st_size + 1)
            os.close(fd)
            for sfx, body in ((".log", data), (".index", b""), (".timeindex", TIME_INDEX_ENTRY)):
                fd = os.open(staged + stem + sfx, write, 0o644)
                if body:
                    os.write(fd, body)
                os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
                os.close(fd)
            fd = os.open(staged + name, os.O_RDONLY)
            os.read(fd, len(data) + 1)
            os.close(fd)
        for name in names:
            stem = name[: -len(".log")]
            os.rename(live + name, aside + name)
            for sfx in (".log", ".index", ".timeindex"):
                os.rename(staged + stem + sfx, live + stem + sfx)


TIME_INDEX_ENTRY = bytes(12)


def job_floor(log_dir: Path, scratch: Path, layout: list[tuple[str, list[str]]]) -> float:
    """The file operations a migration of these segments cannot leave out, with no conversion and no state, on
    every core (one process per core, each over its share of the partitions), timed from the first fork to the last
    exit. Per segment: the source .log opened, stated, read and closed; three outputs created in a staging dir
    beside the partition, each written (the source's bytes as the .log, an empty .index, one 12-byte .timeindex
    entry: what a tiny segment converts to, whose cost is per file, not per byte) and given the source's mtime; the
    staged .log read back; then the source moved aside and the three outputs renamed into place. The sources are
    hard links made before the clock starts (the originals stay as they are); the tree is removed afterwards."""
    os.mkdir(scratch)
    for part, names in layout:
        os.mkdir(f"{scratch}/{part}")
        for name in names:
            os.link(f"{log_dir}/{part}/{name}", f"{scratch}/{part}/{name}")
    cores = os.cpu_count() or 1
    shares = [layout[i::cores] for i in range(cores)]
    start = time.perf_counter()
    pids = []
    for share in shares:
        pid = os.fork()
        if pid == 0:  # the child does its share and leaves without the parent's clean-up
            code = 1
            try:
                job_floor_share(str(log_dir), str(scratch), share)
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    failed = [pid for pid in pids if os.waitpid(pid, 0)[1] != 0]
    elapsed = time.perf_counter() - start
    shutil.rmtree(scratch)
    if failed:
        raise SystemExit(f"the job floor's processes {failed} failed: see their traceback above")
    return elapsed


LOAD_SNIPPET = """
import resource, sys, time
sys.path.insert(0, {bench!r})
import bench_million
load = bench_million.plan_loader()
start = time.perf_counter()
plan = load({plan!r})
elapsed = time.perf_counter() - start
print(elapsed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def plan_load_time(plan: Path, repeats: int = 3) -> tuple[float, float]:
    """Best of ``repeats`` fresh processes loading the plan, the load call alone timed; and their largest peak RSS
    in MB (the interpreter and imports included)."""
    best, peak = float("inf"), 0
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", LOAD_SNIPPET.format(bench=str(BENCH_DIR), plan=str(plan))],
            check=True,
            capture_output=True,
            text=True,
            env=child_env(),
        ).stdout.split()
        best, peak = min(best, float(out[0])), max(peak, int(out[1]))
    return best, peak / MB


def plan_size(plan: Path) -> int:
    """Bytes of the plan on disk: a file, or every file under it if the format makes it a directory."""
    if plan.is_dir():
        return sum(f.stat().st_size for f in plan.rglob("*") if f.is_file())
    return plan.stat().st_size


def run_size(args: argparse.Namespace, segments: int) -> SizeRow:
    per = args.per_partition
    if segments % per:
        raise SystemExit(f"--segments {segments} is not a multiple of --per-partition {per}: pick sizes it divides")
    partitions = segments // per
    root = Path(args.dir) / f"n{segments}"
    if root.exists():
        shutil.rmtree(root)
    log_dir, logs, plan = root / "logdir", root / "out", root / args.plan_name
    logs.mkdir(parents=True)
    engine = ["--engine", args.engine]
    if args.engine == "dask":
        engine += ["--dashboard-address", "127.0.0.1:0"]
    if args.workers:
        engine += ["--workers", str(args.workers)]
    try:
        start = time.perf_counter()
        source_bytes = write_many(log_dir, partitions, per, args.records, args.value_bytes)
        generate = time.perf_counter() - start
        print(f"{segments} segments ({partitions} x {per}), {source_bytes / MB:.1f} MB in {generate:.1f} s", flush=True)
        layout = source_logs(log_dir)
        floor = min(copy_floor(log_dir, root / "copy", layout) for _ in range(2))
        floor_job = min(job_floor(log_dir, root / "job", layout) for _ in range(2))
        verbs: list[VerbRun] = []

        def verb(name: str, *rest: str, ok: tuple[int, ...] = (0,)) -> None:
            run = run_verb(name, list(rest), logs, ok)
            verbs.append(run)
            p = run.peaks
            print(
                f"  {name:<9} {run.wall_s:8.2f} s  exit {run.exit_code}  driver {p.driver / MB:7.1f} MB  "
                f"largest child {p.descendant / MB:7.1f} MB  tree {p.tree / MB:7.1f} MB "
                f"({p.descendants_seen} children)  CPU {p.cpu_s:.1f} s  steal {100 * run.steal_share:.1f}%",
                flush=True,
            )

        verb("plan", "--log-dirs", str(log_dir), "-o", str(plan))
        size = plan_size(plan)
        load_s, load_peak = plan_load_time(plan)
        print(
            f"  floor copy {floor:.2f} s ({1000 * floor / segments:.3f} ms/segment); "
            f"the job's file operations on {os.cpu_count()} cores {floor_job:.2f} s "
            f"({1000 * floor_job / segments:.3f} ms/segment); "
            f"plan {size / segments:.1f} B/segment, loaded in {load_s:.3f} s "
            f"(best of 3, process peak {load_peak:.0f} MB)",
            flush=True,
        )
        verb("execute", "--plan", str(plan), *engine)
        stat_floors = [stat_floor(log_dir)]
        verb("status", "--plan", str(plan))
        status_walls = [verbs[-1].wall_s]
        for _ in range(2):  # best of 3, interleaved with the floor (status changes nothing)
            stat_floors.append(stat_floor(log_dir))
            status_walls.append(run_verb("status", ["--plan", str(plan)], logs, (0,)).wall_s)
        print(
            f"  status best of 3 {min(status_walls):.2f} s; its floor (find stating every file) best of 3 "
            f"{min(stat_floors):.2f} s",
            flush=True,
        )
        verb("verify", "--plan", str(plan), *engine)
        verb("rollback", "--plan", str(plan))
        verb("execute", "--plan", str(plan), *engine)
        verb("finalize", "--plan", str(plan))
        verb("scan", "--log-dirs", str(log_dir))  # exit 0 is the certificate: 4 = legacy data left, 1 = unreadable
        return SizeRow(
            segments=segments,
            partitions=partitions,
            per_partition=per,
            source_mb=round(source_bytes / MB, 2),
            generate_s=round(generate, 2),
            floor_copy_s=round(floor, 3),
            job_floor_s=round(floor_job, 3),
            plan_bytes=size,
            plan_bytes_per_segment=size / segments,
            plan_load_s=load_s,
            plan_load_peak_mb=round(load_peak, 1),
            verbs=verbs,
            status_walls=status_walls,
            stat_floor_s=min(stat_floors),
        )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def goals(rows: list[SizeRow]) -> list[dict[str, object]]:
    """Each of the scale goals against the row of the size it is stated at, where that size was run."""
    out: list[dict[str, object]] = []
    for size, key, limit, text in GOALS:
        row = next((r for r in rows if r.segments == size), None)
        if row is not None:
            value = row.summary()[key]
            out.append({"segments": size, "goal": text, "value": value, "limit": limit, "met": value <= limit})
    return out


def print_tables(rows: list[SizeRow]) -> None:
    print()
    print(
        "| segments | partitions | plan B/segment | plan load s | floor copy s | job floor s | execute s | "
        "execute ms/segment | overhead ms/segment | over the job floor ms/segment | driver peak MB | "
        "largest child MB | tree peak MB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        s = r.summary()
        print(
            f"| {r.segments:,} | {r.partitions:,} | {s['plan_bytes_per_segment']} | {s['plan_load_s']} | "
            f"{r.floor_copy_s} | {r.job_floor_s} | {s['execute_s']} | {s['execute_ms_per_segment']} | "
            f"{s['execute_overhead_ms_per_segment']} | {s['execute_over_job_floor_ms_per_segment']} | "
            f"{s['max_driver_peak_mb']} | {s['max_descendant_peak_mb']} | {s['max_tree_peak_mb']} |"
        )
    print()
    print(
        "| segments | verb | wall s | ms/segment | CPU s | CPU ms/segment | driver peak MB | largest child MB | "
        "tree peak MB | steal % |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        for v in r.verbs:
            print(
                f"| {r.segments:,} | {v.verb} | {v.wall_s:.2f} | {1000 * v.wall_s / r.segments:.3f} | "
                f"{v.peaks.cpu_s:.1f} | {1000 * v.peaks.cpu_s / r.segments:.3f} | {v.peaks.driver / MB:.0f} | "
                f"{v.peaks.descendant / MB:.0f} | {v.peaks.tree / MB:.0f} | {100 * v.steal_share:.1f} |"
            )
    if len(rows) > 1:
        base = rows[0]
        print()
        print(f"linearity, against {base.segments:,} segments (1.0 = the same cost per segment):")
        for r in rows[1:]:
            ratios = [
                f"{v.verb} {(v.wall_s / r.segments) / (b.wall_s / base.segments):.2f}"
                for v, b in zip(r.verbs, base.verbs, strict=True)
            ]
            print(f"  {r.segments:,}: " + ", ".join(ratios))
    print()
    for r in rows:
        s = r.summary()
        print(
            f"status at {r.segments:,}: best of 3 {s['status_s']} s; "
            f"floor (find stating every file) {s['stat_floor_s']} s"
        )
    for g in goals(rows):
        print(f"goal at {g['segments']:,}: {g['goal']}: {g['value']} -> {'met' if g['met'] else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", default="100000,300000,1000000", help="comma-separated segment counts")
    ap.add_argument("--per-partition", type=int, default=10, help="segments per partition")
    ap.add_argument("--records", type=int, default=2, help="v0 messages per segment")
    ap.add_argument("--value-bytes", type=int, default=20)
    ap.add_argument("--dir", default="/dev/shm/bench-million", help="scratch dir, on tmpfs (removed per size)")
    ap.add_argument("--engine", choices=["dask", "serial"], default="dask")
    ap.add_argument("--workers", type=int, help="execute's and verify's --workers (default: theirs)")
    ap.add_argument(
        "--plan-name",
        default="plan.parquet",
        help="the plan file's name (default plan.parquet: the columnar form; plan.json for the JSON one)",
    )
    ap.add_argument("--keep", action="store_true", help="keep each size's dir (for a look after a failure)")
    ap.add_argument("--host-memory", choices=["as-is", "quiet"], default="as-is", help="see the module's doc")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    sizes = [int(x.replace("_", "")) for x in args.segments.split(",") if x.strip()]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    global PYCACHE
    PYCACHE = Path(args.dir) / "pycache"
    # untimed: every verb once on a tiny log dir, so the timed ones find their modules compiled
    with contextlib.redirect_stdout(io.StringIO()):
        run_size(args, 2 * args.per_partition)
    host: contextlib.AbstractContextManager[int | None] = contextlib.nullcontext(None)
    quiet = False
    if args.host_memory == "quiet":
        import bench_end_to_end

        host = bench_end_to_end.quiet_host_memory(HOST_WARM_BYTES)
    with host as order:
        if args.host_memory == "quiet":
            quiet = order == bench_end_to_end.NO_REPORTING_ORDER
        print(f"host memory: {'free page reporting off, memory touched once first' if quiet else 'as is'}")
        rows = [run_size(args, n) for n in sizes]
    print_tables(rows)
    if args.json:
        doc = {
            "engine": args.engine,
            "workers": args.workers,
            "plan_name": args.plan_name,
            "host_memory_quiet": quiet,
            "rows": [{**asdict(r), **r.summary()} for r in rows],
            "goals": goals(rows),
        }
        Path(args.json).write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
