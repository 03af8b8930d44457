"""Every core busy: the default engine's steady state against the serial engine and the machine's floor.

Three sections, every row a fresh process, rows interleaved over ``--rounds`` (their order turned each round), each
row's best kept, every ratio between rows of the same run:

* ``tmpfs``: ``kafka-log-migrate execute`` of one large v0 segment (``--tmpfs-records``, default 11,029,411
  messages of 100 B values: 1.5 GB, 1.98 GB as v2, under 2 GiB) in one partition, and of two such segments in two
  partitions, on /dev/shm; on the default engine (a LocalCluster, one worker per core) and on ``--engine serial``.
  The *marginal* time (two segments minus one) cancels each engine's start-up, which is reported beside it (the
  one-segment run minus the marginal time). The machine's floor in the same run: a plain copy of the same bytes
  (every source read, as many bytes written as the conversion writes, on every core), one segment and two.
  Target: default ÷ serial >= 1.8x. The machine's own ceiling, in the same run (``serial-pair``): the serial
  engine as two independent processes, one per core, each over its own log dir, plan and source, started together:
  what two cores give work that shares nothing (not even a scheduler). Each process converts one segment, then (the
  other run) two in two partitions: its marginal time is each core's time for one more segment while the other core
  does the same, so 2 x the serial marginal ÷ this marginal is the ceiling of the default ÷ serial ratio in steady
  state (2.0 where a busy core does not slow the other down). The pair's one-segment run is also the ceiling of whole
  runs of two segments, beside the default engine's.
* ``disk``: the same on a directory of the real disk (``--disk-dir``): the default engine over 1.2 GB of log dir
  (one partition) and 3.6 GB (three), each run starting with its sources out of the page cache (dropped after the
  plan, which reads them); against the plain copy of the same bytes from the same cache state, ending in syncfs as
  the conversion does. Target: the default engine's marginal rate >= 0.8x the copy's. The machine's bound for a
  converter that verifies what it wrote, in the same run (``apart``): each process's share of every source (as the
  copy splits them) converted and verified by ``convert_range`` from the same cold cache, one process per core, no
  engine, no join, no indexes, no state, ending in syncfs; default ÷ apart is what the engine costs over that.
* ``startup``: the two commands as an operator runs them (``kafka-log-migrate plan``, then ``execute``: two whole
  processes) over 1.5 M v0 messages of 100 B values, against aiokafka's bare codec loop converting the same bytes
  in one process (``bench_end_to_end.py``'s rows, reused). Target: >= 1.0x.

The ``tmpfs`` and ``disk`` sections also measure, in every round, what the conversion itself costs the CPU with
every core busy, no engine and no disk (``reference_run``, on tmpfs): Apache Kafka's own conversion loop (``oracle
convert --repeat 5``) and this tool's ``convert_segment`` + ``verify_segment`` in one process, one process per core at
once over 204 MB each. At those rates the report gives the marginal bytes' time and its ratio to the plain copy: what
default ÷ plain copy would be at the pace of the conversion alone (``--no-reference`` leaves it out).

Every ``execute`` row also counts the CPU seconds of its whole process tree (``TreeCpu``): the marginal CPU per
segment is the engine's own cost, and marginal CPU ÷ marginal wall time the cores it kept busy in steady state,
whatever the host's memory did to the wall time.

``--host-memory quiet`` (root) turns the VM's free page reporting off for the run and touches ``HOST_WARM_BYTES``
once first (``bench_end_to_end.quiet_host_memory``), then restores the setting. With reporting on, memory a run
frees goes back to the host within about 2 s, and the next run's first touch of each page costs the host's fault
(1 GiB touched in one process: 0.8 s; 4 GiB: 5-11 s; two processes of 2 GiB each: 2.6-3.0 s, measured on
2026-11-28): a row that writes 2 GB of tmpfs output pays seconds by chance and by how many processes touch them,
which is the host's memory, not the engine. The report's first line says which state the run had.

The plan (``kafka-log-migrate plan``) is made before each timed ``execute`` and is not timed in the first two
sections. Log dirs are rebuilt for every run from hard links to sources generated once (``gen_legacy``), so a run's
data is its sources plus its outputs: on /dev/shm 3 GB of sources (the engines' rows link the first into every
partition, each independent process has its own) and up to 4 GB of output during a two-segment run; everything is
removed at the end (``--keep-sources`` keeps the generated sources for the next run).

    python benchmarks/bench_cores.py [--sections tmpfs,disk,startup] [--rounds 3] [--shm /dev/shm/bench-cores]
           [--disk-dir /tmp/bench-cores] [--tmpfs-records 11029411] [--disk-records 8823529] [--keep-sources]
           [--host-memory as-is|quiet] [--no-reference] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_end_to_end as e2e
from gen_legacy import message_size, write_segment

from migrate.demo import legacy_logdir

REPO = Path(__file__).resolve().parents[1]
TOPIC = "bench"
HOST_WARM_BYTES = 10 << 30  # more than the two-segment tmpfs run holds at once (1.5 GB source, 4 GB out, processes)
V2_BYTES_PER_MESSAGE = 180  # a 10 B key and 100 B value as one single-record v2 batch (batch.single_record_batch_sizes)

COPY = r"""
import json, os, sys, time
from multiprocessing import get_context
out_dir, cache, ratio, procs, *sources = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:]
sizes = [os.stat(s).st_size for s in sources]
outs = [os.path.join(out_dir, f"copy-{i}.log") for i in range(len(sources))]
def work(i):
    # this process's share of every source: its half (or third...) of each, as the ranges of a plan spread them
    buf = bytearray(2 << 20)
    for src_path, out_path, size in zip(sources, outs, sizes):
        lo, hi = size * i // procs, size * (i + 1) // procs
        src, dst = os.open(src_path, os.O_RDONLY), os.open(out_path, os.O_WRONLY)
        pos, at = lo, int(lo * ratio)
        while pos < hi:
            n = os.preadv(src, [memoryview(buf)[: min(len(buf), hi - pos)]], pos)
            grown = int((pos + n) * ratio) - int(pos * ratio)  # as many bytes out as a conversion writes
            for piece in (memoryview(buf)[:n], memoryview(buf)[: grown - n]):
                at += os.pwrite(dst, piece, at)
            pos += n
        os.close(src); os.close(dst)
for s in sources:
    fd = os.open(s, os.O_RDONLY)
    if cache == "cold":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
for o in outs:
    os.close(os.open(o, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
t = time.perf_counter()
ps = [get_context("fork").Process(target=work, args=(i,)) for i in range(procs)]
[p.start() for p in ps]; [p.join() for p in ps]
import ctypes
fd = os.open(out_dir, os.O_RDONLY); ctypes.CDLL(None).syncfs(fd); os.close(fd)  # as a convert task ends
seconds = time.perf_counter() - t
for o in outs:
    os.unlink(o)
print(json.dumps({"seconds": seconds}))
"""

APART = r"""
import ctypes, json, os, sys, time
from multiprocessing import get_context
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import Outcome, SegmentTask
from migrate.segment.ranges import convert_range
out_dir, cache, procs, *sources = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:]
opts = ConvertOptions()  # what `plan` writes by default: v2, the file's mtime for messages without a timestamp
def work(i):
    # this process's share of every source, as the copy takes it: its range, converted and verified (read back,
    # every CRC, the records' digest against the source's), with no engine, no join, no indexes, no state
    for j, source in enumerate(sources):
        size = os.stat(source).st_size
        task = SegmentTask(source, os.path.join(out_dir, f"apart-{j}"), 0, opts)
        part = convert_range(task, i, procs, size * i // procs, size * (i + 1) // procs)
        if part.outcome != Outcome.VERIFIED:
            raise SystemExit(f"range {i} of {source} did not verify: {part.problem}")
for s in sources:
    fd = os.open(s, os.O_RDONLY)
    if cache == "cold":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
os.sync()
t = time.perf_counter()
ps = [get_context("fork").Process(target=work, args=(i,)) for i in range(procs)]
[p.start() for p in ps]; [p.join() for p in ps]
fd = os.open(out_dir, os.O_RDONLY); ctypes.CDLL(None).syncfs(fd); os.close(fd)  # as a convert task ends
seconds = time.perf_counter() - t
if any(p.exitcode for p in ps):
    raise SystemExit(f"a converting process exited {[p.exitcode for p in ps]}")
print(json.dumps({"seconds": seconds}))
"""


def generate(root: Path, records: int, count: int) -> list[Path]:
    """``count`` distinct source segments of ``records`` messages under ``root`` (kept if already there)."""
    out = []
    for i in range(count):
        path = root / f"src-{i}.log"
        expected = records * message_size(10, 100, 0)
        if not path.exists() or path.stat().st_size != expected:
            write_segment(path, records, value_bytes=100, seed=1 + i)
        out.append(path)
    return out


def log_dir_of(root: Path, sources: list[Path], records: int) -> Path:
    """A fresh log dir whose partition i holds ``sources[i]`` (a hard link: the run never writes its sources)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for p, src in enumerate(sources):
        d = root / f"{TOPIC}-{p}"
        d.mkdir()
        os.link(src, d / f"{0:020d}.log")
    legacy_logdir.write_broker_files(
        root, [legacy_logdir.PartitionFiles(TOPIC, p, records) for p in range(len(sources))]
    )
    return root


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "migrate.cli", *args]


BEFORE: Path | None = None  # --before: an older tree whose default engine runs beside ours ("dask-before" rows)


PYCACHE = Path(tempfile.gettempdir()) / "bench-cores-pycache"


def env(engine: str = "") -> dict[str, str]:
    """The tool's processes keep compiled modules as an installed package does (this environment may set
    PYTHONDONTWRITEBYTECODE: every process would compile the tool's modules again, about 0.7 s that no operator's
    install pays; as bench_cutover.py does)."""
    e = dict(os.environ)
    tree = BEFORE if engine.endswith("-before") and BEFORE is not None else REPO
    e["PYTHONPATH"] = str(tree)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return e


def drop_cache(paths: list[Path]) -> None:
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def execute_run(scratch: Path, sources: list[Path], records: int, engine: str, cold: bool) -> tuple[float, float]:
    """Plan (untimed), then ``execute`` in a fresh process, timed from its start to its exit, with the CPU seconds
    of its process tree (``TreeCpu``); then remove it all."""
    log_dir = log_dir_of(scratch / "logdir", sources, records)
    plan = scratch / "plan.json"
    subprocess.run(
        cli("plan", "--log-dirs", str(log_dir), "-o", str(plan)),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env(engine),
        cwd=tempfile.gettempdir(),
    )
    if cold:
        drop_cache(sources)
    extra = ["--engine", "serial"] if engine == "serial" else ["--dashboard-address", "127.0.0.1:0"]
    t = time.perf_counter()
    with TreeCpu([subprocess.Popen(cli("execute", "--plan", str(plan), *extra), **_quiet(engine))]) as tree:
        codes = tree.wait()
    seconds = time.perf_counter() - t
    if any(codes):
        raise SystemExit(f"execute exited {codes[0]}")
    remove_run(log_dir, plan)
    return seconds, tree.cpu_seconds


def _quiet(engine: str = "") -> dict:
    return {
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "env": env(engine),
        "cwd": tempfile.gettempdir(),
    }


class TreeCpu:
    """The CPU seconds (user + system) of processes and all their descendants (a LocalCluster's workers are the
    forkserver's children, which ``RUSAGE_CHILDREN`` never sees): each process's counters read from /proc every
    20 ms, its last reading kept (a process's last 20 ms may be missed). The steady state's cores in use is then the
    marginal CPU over the marginal wall time: the engine's own use of the cores, whatever the host's memory costs."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.procs = procs
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def wait(self) -> list[int]:
        return [p.wait() for p in self.procs]

    @property
    def cpu_seconds(self) -> float:
        return sum(self._last.values())

    def _tree(self, pid: int) -> list[int]:
        out = [pid]
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
                    out += self._tree(int(child))
        return out

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            for root in self.procs:
                for pid in self._tree(root.pid):
                    with contextlib.suppress(OSError, IndexError):
                        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                        self._last[pid] = (int(fields[11]) + int(fields[12])) / self._tick


def remove_run(log_dir: Path, plan: Path) -> None:
    """A run's log dir, plan, state and run logs."""
    shutil.rmtree(log_dir)
    for leftover in (plan, Path(f"{plan}.state"), Path(f"{plan}.logs")):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        else:
            leftover.unlink(missing_ok=True)


def independent_run(scratch: Path, sources: list[Path], records: int, per_process: int) -> tuple[float, float]:
    """The machine's ceiling for two cores: one serial ``execute`` per source, each its own process over its own log
    dir (``per_process`` partitions, each a link to that process's source) and plan, all started together (planned
    before, untimed); timed from the first start to the last exit."""
    runs = []
    for i, src in enumerate(sources):
        log_dir = log_dir_of(scratch / f"logdir-{i}", [src] * per_process, records)
        plan = scratch / f"plan-{i}.json"
        subprocess.run(
            cli("plan", "--log-dirs", str(log_dir), "-o", str(plan)),
            check=True,
            capture_output=True,
            env=env(),
            cwd=tempfile.gettempdir(),
        )
        runs.append((log_dir, plan))
    t = time.perf_counter()
    procs = [
        subprocess.Popen(cli("execute", "--plan", str(plan), "--engine", "serial"), **_quiet()) for _, plan in runs
    ]
    with TreeCpu(procs) as tree:
        codes = tree.wait()
    seconds = time.perf_counter() - t
    if any(codes):
        raise SystemExit(f"independent serial executes exited {codes}")
    for log_dir, plan in runs:
        remove_run(log_dir, plan)
    return seconds, tree.cpu_seconds


def copy_run(scratch: Path, sources: list[Path], cold: bool) -> float:
    out = scratch / "copy"
    out.mkdir(exist_ok=True)
    procs = os.cpu_count() or 1
    ratio = V2_BYTES_PER_MESSAGE / message_size(10, 100, 0)
    r = e2e.child(COPY, out, "cold" if cold else "warm", ratio, procs, *sources)
    shutil.rmtree(out)
    return r["seconds"]


def apart_run(scratch: Path, sources: list[Path], cold: bool) -> tuple[float, float]:
    """The conversion alone on the section's own disk: ``convert_range`` (convert, write, read back, check) of each
    process's share of every source with the plan's default options, one process per core, no engine, no join, no
    state, ending in syncfs as the copy does. Its marginal is what a verifying converter costs on this disk with every
    core busy: the machine's bound for the default engine's row (timed after the imports; the CPU of the whole
    tree)."""
    out = scratch / "apart"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    procs = os.cpu_count() or 1
    code = f"import migrate\nassert migrate.__file__.startswith({str(REPO)!r}), migrate.__file__\n{APART}"
    args = [str(out), "cold" if cold else "warm", str(procs), *map(str, sources)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env(),
        cwd=tempfile.gettempdir(),
    )
    with TreeCpu([proc]) as tree:
        stdout, stderr = proc.communicate()
    shutil.rmtree(out)
    if proc.returncode:
        raise SystemExit(f"the conversion apart exited {proc.returncode}: {stderr.decode()[-2000:]}")
    return json.loads(stdout.decode().strip().splitlines()[-1])["seconds"], tree.cpu_seconds


REFERENCE_RECORDS = 1_500_000  # 204 MB: the oracle holds a segment and its output in its 2 GiB heap


def reference_run(scratch: Path, sources: list[Path]) -> dict[str, float]:
    """The conversion's own cost on every core at once, no engine: one process per core, each over its own
    ``REFERENCE_RECORDS`` source, all started together (``bench_end_to_end``'s children, one thread waiting on
    each). ``kafka``: Apache Kafka's conversion loop (``oracle convert --repeat 5``: in memory, the source read and
    its CRCs checked before the clock, nothing written or verified); ``ours``: the tool's ``convert_segment`` then
    ``verify_segment`` of the same file in one process (read, convert, write, read back, check:
    ``bench_end_to_end.CONVERT_VERIFY``, best of 3), its two parts apart. Each figure is the slowest process's best
    loop: every core was busy while it ran."""
    with ThreadPoolExecutor(len(sources)) as pool:
        kafka = list(pool.map(lambda i: e2e.kafka(sources[i], scratch / f"kafka-{i}.log"), range(len(sources))))
        if None in kafka:
            raise SystemExit(f"no oracle at {e2e.ORACLE}: run with --no-reference")
        ours = list(
            pool.map(
                lambda i: e2e.child(e2e.CONVERT_VERIFY, sources[i], scratch / f"ours-{i}", "xxh3-128", 3),
                range(len(sources)),
            )
        )
    for i in range(len(sources)):
        shutil.rmtree(scratch / f"ours-{i}", ignore_errors=True)
    return {
        "kafka": max(k["seconds"] for k in kafka if k is not None),
        "ours": max(r["seconds"] for r in ours),
        "ours-convert": max(r["convert"] for r in ours),
        "ours-verify": max(r["verify"] for r in ours),
    }


def marginal_section(
    name: str,
    scratch: Path,
    records: int,
    counts: tuple[int, int],
    engines: list[str],
    cold: bool,
    rounds: int,
    reference: Path | None = None,
) -> dict:
    # tmpfs: the engines' rows link one source into every partition; independent processes each get a source of their
    # own, as their log dirs would: a link made by one process's swap changes the shared inode's ctime, which the
    # other's swap rightly refuses as a file changed after conversion
    pairs = os.cpu_count() or 1  # serial-pair: one independent process per core
    separate = "serial-pair" in engines
    sources = generate(scratch / "sources", records, max(counts[1] if cold else 1, pairs if separate else 1))
    rows: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    references: dict[str, list[float]] = {}
    if reference is not None:  # on tmpfs whatever the section: what the conversion costs the CPU, apart from the disk
        ref_sources = generate(reference, REFERENCE_RECORDS, pairs)
    for r in range(rounds):
        if reference is not None:
            for k, v in reference_run(reference, ref_sources).items():
                references.setdefault(k, []).append(v)
            told = ", ".join(f"{k} {v[-1]:.3f} s" for k, v in references.items())
            print(f"{name} round {r + 1}: reference, every core: {told}", file=sys.stderr, flush=True)
        order = [(e, n) for n in counts for e in [*engines, "copy"]]
        for engine, n in order if r % 2 == 0 else order[::-1]:
            chosen = sources[:n] if cold else [sources[0]] * n
            cpu_seconds = None
            if engine == "copy":
                seconds = copy_run(scratch, chosen, cold)
            elif engine == "apart":
                seconds, cpu_seconds = apart_run(scratch, chosen, cold)
            elif engine == "serial-pair":  # n segments in each of the processes
                seconds, cpu_seconds = independent_run(scratch, sources[:pairs], records, n)
            else:
                seconds, cpu_seconds = execute_run(scratch, chosen, records, engine, cold)
            rows.setdefault(f"{engine}-{n}", []).append(seconds)
            if cpu_seconds is not None:
                cpu.setdefault(f"{engine}-{n}", []).append(cpu_seconds)
            told = f"{seconds:.2f} s" + (f", CPU {cpu_seconds:.2f} s" if cpu_seconds is not None else "")
            print(f"{name} round {r + 1}: {engine} x{n}: {told}", file=sys.stderr, flush=True)
    best = {k: min(v) for k, v in rows.items()}
    out: dict = {
        "records": records,
        "segment_bytes": records * message_size(10, 100, 0),
        "counts": counts,
        "pairs": pairs,
    }
    out["runs"] = rows
    out["cpu"] = cpu
    if references:
        out["reference"] = {
            "bytes": REFERENCE_RECORDS * message_size(10, 100, 0) * pairs,
            "runs": references,
            **{k: min(v) for k, v in references.items()},
        }
    for engine in [*engines, "copy"]:
        one, many = best[f"{engine}-{counts[0]}"], best[f"{engine}-{counts[1]}"]
        marginal = many - one
        out[engine] = {
            "one": one,
            "many": many,
            "marginal": marginal,
            "startup": one - marginal * counts[0] / (counts[1] - counts[0]),
        }
        if f"{engine}-{counts[0]}" in cpu:
            # the CPU of the runs whose wall time was kept (each side's best), and the medians' difference
            med = {n: sorted(cpu[f"{engine}-{n}"])[len(cpu[f"{engine}-{n}"]) // 2] for n in counts}
            out[engine]["cpu_marginal"] = med[counts[1]] - med[counts[0]]

    return out


def startup_section(scratch: Path, rounds: int) -> dict:
    records = 1_500_000
    src = write_segment(scratch / "seg" / f"{0:020d}.log", records, value_bytes=100)
    names = ["commands", *(["commands-before"] if BEFORE is not None else [])]
    rows: dict[str, list[float]] = {name: [] for name in [*names, "aiokafka"]}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            log_dir = log_dir_of(scratch / "logdir", [src], records)
            plan = scratch / "plan.json"
            t = time.perf_counter()
            for argv in (
                cli("plan", "--log-dirs", str(log_dir), "-o", str(plan)),
                cli("execute", "--plan", str(plan), "--dashboard-address", "127.0.0.1:0"),
            ):
                subprocess.run(argv, check=True, capture_output=True, env=env(name), cwd=tempfile.gettempdir())
            rows[name].append(time.perf_counter() - t)
            shutil.rmtree(log_dir)
            shutil.rmtree(f"{plan}.state", ignore_errors=True)
            shutil.rmtree(f"{plan}.logs", ignore_errors=True)
            plan.unlink()
        rows["aiokafka"].append(e2e.child(e2e.AIOKAFKA, src, 1)["seconds"])
        told = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in rows.items())
        print(f"startup round {r + 1}: {told}", file=sys.stderr, flush=True)
    return {"records": records, "runs": rows, **{k: min(v) for k, v in rows.items()}}


def report(results: dict) -> str:
    order = results.get("page_reporting_order")
    state = (
        "no free page reporting"
        if order is None
        else (
            "free page reporting off, memory touched once first"
            if order >= e2e.NO_REPORTING_ORDER
            else f"free page reporting on (order {order})"
        )
    )
    lines = [f"host memory: {state}"]
    for name in ("tmpfs", "disk"):
        s = results.get(name)
        if not s:
            continue
        mb = s["segment_bytes"] / 1e6
        a, b = s["counts"]
        lines.append(f"{name}: segments of {mb:,.0f} MB ({s['records']:,} v0 messages, 100 B values), {a} -> {b}")
        lines.append(
            "| row | best s, one | best s, many | marginal s | start-up s | marginal MB/s | marginal CPU s "
            "(medians) | cores in use (marginal CPU ÷ marginal s) |"
        )
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for engine in ("dask", "dask-before", "serial", "serial-pair", "apart", "copy"):
            if engine in s:
                r = s[engine]
                each = s.get("pairs", 2) if engine == "serial-pair" else 1  # the pair's marginal: one per process
                rate = (b - a) * mb * each / r["marginal"] if r["marginal"] > 0 else float("inf")
                cpu_s = r.get("cpu_marginal")
                cores = f"{cpu_s / r['marginal']:.2f}" if cpu_s is not None and r["marginal"] > 0 else "-"
                lines.append(
                    f"| {engine} | {r['one']:.2f} | {r['many']:.2f} | {r['marginal']:.2f} | {r['startup']:.2f} | "
                    f"{rate:,.0f} | {'-' if cpu_s is None else f'{cpu_s:.2f}'} | {cores} |"
                )
        dask = s["dask"]["marginal"]
        if "serial" in s:
            lines.append(f"default ÷ serial (marginal): {s['serial']['marginal'] / dask:.2f}x")
            if "cpu_marginal" in s["dask"] and "cpu_marginal" in s["serial"]:
                lines.append(
                    f"CPU per marginal segment: default {s['dask']['cpu_marginal'] / (b - a):.2f} s, serial "
                    f"{s['serial']['cpu_marginal'] / (b - a):.2f} s (the engine's own cost; the wall time adds the "
                    "host's)"
                )
        if "serial-pair" in s and "serial" in s:
            pair, pairs = s["serial-pair"], s.get("pairs", 2)
            lines.append(
                f"the machine's ceiling in steady state: {pairs} x serial marginal ÷ serial-pair marginal "
                f"{pairs * s['serial']['marginal'] / pair['marginal']:.2f}x ({pairs} independent processes, each "
                f"converting one more segment while the other{'s' if pairs > 2 else ''} did the same)"
            )
            if "cpu_marginal" in pair:
                lines.append(
                    f"CPU per marginal segment with every core busy, serial-pair: "
                    f"{pair['cpu_marginal'] / ((b - a) * pairs):.2f} s (what a core's sharing costs the same code)"
                )
            if b == pairs and a == 1:
                # whole runs of as many segments as processes, each side's best, start-up included on every side
                serial = s["serial"]["many"]
                lines.append(
                    f"whole runs of {b}: default ÷ serial {serial / s['dask']['many']:.2f}x; the machine's ceiling, "
                    f"independent serial processes (one segment each) ÷ serial {serial / pair['one']:.2f}x"
                )
        lines.append(f"default ÷ plain copy (marginal, the floor): {s['copy']['marginal'] / dask:.2f}x")
        if "apart" in s:
            apart = s["apart"]
            cpu_note = ""
            if "cpu_marginal" in apart and "cpu_marginal" in s["dask"]:
                cpu_note = (
                    f"; CPU per marginal segment: default {s['dask']['cpu_marginal'] / (b - a):.2f} s, apart "
                    f"{apart['cpu_marginal'] / (b - a):.2f} s"
                )
            lines.append(
                f"the conversion apart on this {name} (each process's range of every source converted and "
                f"verified, a process per core, no engine) ÷ plain copy: "
                f"{s['copy']['marginal'] / apart['marginal']:.2f}x, the bound of a verifying converter here; "
                f"default ÷ the conversion apart {apart['marginal'] / dask:.2f}x{cpu_note}"
            )
        ref = s.get("reference")
        if ref:
            marginal_mb = (b - a) * mb
            rate = {k: ref["bytes"] / 1e6 / ref[k] for k in ("kafka", "ours-convert", "ours")}
            lines.append(
                f"the conversion alone on every core at once ({ref['bytes'] / 1e6:,.0f} MB, on tmpfs; no timestamps "
                "given to v0 messages, as Kafka's cleaner gives none): Apache Kafka's "
                f"loop (in memory; nothing read, written or verified) {rate['kafka']:,.0f} MB/s; ours "
                f"{rate['ours-convert']:,.0f} MB/s converting (read, convert, write), {rate['ours']:,.0f} MB/s with "
                f"the verification (read back, check)"
            )
            kafka_s, ours_s = marginal_mb / rate["kafka"], marginal_mb / rate["ours"]
            lines.append(
                f"the marginal {marginal_mb:,.0f} MB at those rates: Kafka's loop {kafka_s:.2f} s, ours converted and "
                f"verified {ours_s:.2f} s; Kafka's loop ÷ plain copy {s['copy']['marginal'] / kafka_s:.2f}x, ours "
                f"{s['copy']['marginal'] / ours_s:.2f}x (default ÷ plain copy at the pace of the conversion measured "
                f"apart); default engine ÷ that conversion {ours_s / dask:.2f}x (the plan's mtime timestamps cost "
                "more: the apart row converts as the plan does)"
            )
        if "dask-before" in s:
            before = s["dask-before"]["marginal"]
            lines.append(f"before ÷ serial: {s['serial']['marginal'] / before:.2f}x" if "serial" in s else "")
            lines.append(f"before ÷ plain copy: {s['copy']['marginal'] / before:.2f}x")
        lines.append("")
    s = results.get("startup")
    if s:
        for name in ("commands", "commands-before"):
            if name in s:
                lines.append(
                    f"startup, {name}: plan + execute (two processes) {s[name]:.2f} s, aiokafka bare loop "
                    f"{s['aiokafka']:.2f} s: {s['aiokafka'] / s[name]:.2f}x"
                )
    return "\n".join(lines)


def quiet_host(how: str) -> contextlib.AbstractContextManager[int | None]:
    if how == "quiet":
        return e2e.quiet_host_memory(HOST_WARM_BYTES)
    return contextlib.nullcontext(e2e.page_reporting_order())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="tmpfs,disk,startup")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shm", type=Path, default=Path("/dev/shm/bench-cores"))
    ap.add_argument("--disk-dir", type=Path, default=Path(tempfile.gettempdir()) / "bench-cores")
    ap.add_argument("--tmpfs-records", type=int, default=11_029_411)
    ap.add_argument("--disk-records", type=int, default=8_823_529)
    ap.add_argument("--keep-sources", action="store_true")
    ap.add_argument("--before", type=Path, help="an older tree (accelerator built) whose default engine runs too")
    ap.add_argument(
        "--host-memory",
        choices=["as-is", "quiet"],
        default="as-is",
        help="quiet: the VM's free page reporting off for the run, and memory touched once before it (root)",
    )
    ap.add_argument("--no-reference", action="store_true", help="leave out the conversion's reference rows")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    sections = args.sections.split(",")
    global BEFORE
    BEFORE = args.before
    befores = ["dask-before"] if args.before else []
    results: dict = {}
    host = quiet_host(args.host_memory)
    try:
        results["page_reporting_order"] = host.__enter__()
        if "tmpfs" in sections:
            results["tmpfs"] = marginal_section(
                "tmpfs",
                args.shm,
                args.tmpfs_records,
                (1, 2),
                ["dask", *befores, "serial", "serial-pair"],
                False,
                args.rounds,
                reference=None if args.no_reference else args.shm / "reference",
            )
        if "disk" in sections:
            results["disk"] = marginal_section(
                "disk",
                args.disk_dir,
                args.disk_records,
                (1, 3),
                ["dask", *befores, "apart"],
                True,
                args.rounds,
                reference=None if args.no_reference else args.shm / "reference",
            )
        if "startup" in sections:
            results["startup"] = startup_section(args.shm / "startup", args.rounds)
    finally:
        host.__exit__(None, None, None)
        for root in (args.shm, args.disk_dir):
            for sub in ("logdir", "copy", "startup", *([] if args.keep_sources else ["sources", "reference"])):
                shutil.rmtree(root / sub, ignore_errors=True)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
