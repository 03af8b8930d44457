"""End-to-end speed against the references, every ratio measured in the same run.

Four sections, each in child processes (so imports, peak RSS and start-up are each run's own):

* ``segment``: ``convert_segment`` + ``verify_segment`` of one v0 segment in one process, with the SHA-256 digest
  (comparable with ``oracle dump --summary``) and the XXH3-128 one; against Apache Kafka's own conversion loop on
  the same file (``oracle convert --repeat 5``: best of 5 after a JIT warm-up, input CRCs checked apart, not timed)
  and aiokafka's bare codec loop on the same bytes in memory (one core, CRCs checked, no files, no digests, no
  indexes). The ratio is Kafka's seconds over ours: 1.0x would be Kafka's speed.
* ``execute``: ``plan`` + ``execute`` on the default engine (a Dask LocalCluster sized to the machine) over that
  segment in a log dir, wall clock from the start of a fresh process (imports and cluster start-up included) to
  its exit; against aiokafka's bare loop over the same records (from the ``segment`` section). Two ways: the two
  commands as an operator runs them (``kafka-log-migrate plan``, then ``kafka-log-migrate execute``: two processes,
  the run log, progress and the report's summary included), and both calls of the Python API in one process.
* ``workers``: one partition of one large segment (``--workers-mib``, default 1024) executed on a LocalCluster of 1
  worker and of 2 (waiting for the workers first, so that only the workers work), and every worker's peak RSS; the
  best time of each over the rounds, and each round's own ratio (its two runs back to back, in alternating order);
  with the segment in the page cache when ``execute`` starts (``warm``) and out of it (``cold``, the MB read from the
  disk reported), and the machine's own 1 -> 2 process speed-up on a memory copy for reference (on a VM, two cores
  seldom get twice one core's bandwidth). ``--host-memory quiet`` turns the VM's free page reporting off for the
  run (see ``quiet_host_memory``) and restores it after; the report says which state the run had.
* ``small``: ms per small segment (``--small-records`` 200 x 100 B, about 26 KB) converted and verified in one
  process, fresh staging files each time: the fixed cost per segment that dominates at 10,000 partitions.

``--before TREE`` also runs ``segment`` (SHA-256), ``execute`` and ``small`` with the package in TREE (a checkout of
an older commit with its accelerator built: ``git archive COMMIT | tar -x -C TREE && cd TREE && python setup.py
build_ext --inplace``), alternating with this tree in the same run.

    python benchmarks/bench_end_to_end.py [--records 1500000] [--values 100,1000] [--sections segment,execute,...]
           [--workers-mib 1024] [--source-cache warm,cold] [--host-memory as-is|quiet] [--before TREE]
           [--repeat 3] [--rounds 2] [--json out.json] [--dir SCRATCH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gen_legacy import message_size, write_log_dir, write_segment

REPO = Path(__file__).resolve().parents[1]
ORACLE = REPO.parent / "shared" / "oracle" / "oracle"

CONVERT_VERIFY = r"""
import json, shutil, sys, time
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentTask
from migrate.segment.convert import convert_segment
from migrate.segment.verify import verify_segment
src, out, digest, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
opts = ConvertOptions(timestamps="none", digest=digest)
best = None
for _ in range(repeat):
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    r = convert_segment(SegmentTask(src, out, 0, opts))
    c = time.perf_counter()
    check = verify_segment(r, opts)
    v = time.perf_counter()
    assert check.ok, check.problems
    if best is None or v - t < best["seconds"]:
        best = {"seconds": v - t, "convert": c - t, "verify": v - c, "records": r.records}
best["peak_rss_mb"] = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM")).split()[1]) / 1024
print(json.dumps(best))
"""

AIOKAFKA = r"""
import json, struct, sys, time
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
data = open(sys.argv[1], "rb").read()
repeat = int(sys.argv[2])
def run():
    n = 0
    records = MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        batch.validate_crc()
        for r in batch:
            b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
            ts = r.timestamp
            b.append(0, timestamp=-1 if ts is None else ts, key=r.key, value=r.value, headers=[])
            buf = b.build()
            struct.pack_into(">q", buf, 0, r.offset)
            struct.pack_into(">i", buf, 12, -1)
            n += 1
    return n
best = None
for _ in range(repeat):
    t = time.perf_counter()
    n = run()
    s = time.perf_counter() - t
    best = s if best is None else min(best, s)
print(json.dumps({"seconds": best, "records": n}))
"""

EXECUTE = r"""
import json, sys, time
start = time.perf_counter()
from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
log_dir, digest, plan_path = sys.argv[1], sys.argv[2], sys.argv[3]
plan = build_plan(PlanRequest(log_dirs=(log_dir,), options=ConvertOptions(digest=digest)))
write_plan(plan, plan_path)
planned = time.perf_counter()
engine = DaskEngine(dashboard_address="127.0.0.1:0", progress=False)
try:
    report = pipeline.execute(plan, engine)
finally:
    engine.close()
done = time.perf_counter()
assert report.ok, (report.errors, report.problems)
print(json.dumps({"plan": planned - start, "execute": done - planned, "records": report.totals.records,
                  "stages": report.stage_seconds, "tasks": len(plan.tasks)}))
"""

COMMANDS = r"""
import json, subprocess, sys, time
log_dir, digest, plan_path = sys.argv[1], sys.argv[2], sys.argv[3]
cli = [sys.executable, "-m", "migrate.cli"]
start = time.perf_counter()
subprocess.run([*cli, "plan", "--log-dirs", log_dir, "--digest", digest, "-o", plan_path], check=True,
               stdout=subprocess.DEVNULL)
planned = time.perf_counter()
subprocess.run([*cli, "execute", "--plan", plan_path], check=True, stdout=subprocess.DEVNULL)
done = time.perf_counter()
print(json.dumps({"plan": planned - start, "execute": done - planned, "wall": done - start}))
"""

ROLLBACK = r"""
import sys
from migrate import pipeline
from migrate.engines import SerialEngine
from migrate.planning.plan import load_plan
assert pipeline.rollback(load_plan(sys.argv[1]), SerialEngine(), sys.argv[1]).ok
"""

WORKERS = r"""
import json, os, resource, sys, time
from migrate import pipeline
from migrate.engines.dask import DaskEngine
from migrate.model.plan_tree import ConvertOptions
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
log_dir, workers, digest, plan_path, segment, cache = sys.argv[1], int(sys.argv[2]), *sys.argv[3:7]
plan = build_plan(PlanRequest(log_dirs=(log_dir,), options=ConvertOptions(digest=digest)))
write_plan(plan, plan_path)
engine = DaskEngine(n_workers=workers, dashboard_address="127.0.0.1:0", progress=False)
try:
    engine.client.wait_for_workers(workers, timeout=120)
    # after the plan, which reads the whole segment: see section_workers
    fd = os.open(segment, os.O_RDONLY)
    if cache == "cold":
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    else:
        while os.read(fd, 8 << 20):
            pass
    os.close(fd)
    dev = os.stat(segment).st_dev
    def sectors_read():  # of the segment's device (a partition's own line), or None off Linux
        try:
            for line in open("/proc/diskstats"):
                f = line.split()
                if (int(f[0]), int(f[1])) == (os.major(dev), os.minor(dev)):
                    return int(f[5])
        except OSError:
            return None
    read0 = sectors_read()
    cpu = engine.client.run(time.process_time)
    t = time.perf_counter()
    report = pipeline.execute(plan, engine)
    wall = time.perf_counter() - t
    read1 = sectors_read()
    output_bytes = os.stat(segment).st_size  # the converted segment, swapped in
    cpu = {k: v - cpu[k] for k, v in engine.client.run(time.process_time).items()}
    rss = engine.client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    assert pipeline.rollback(plan, engine, plan_path).ok
finally:
    engine.close()
assert report.ok, (report.errors, report.problems)
print(json.dumps({"seconds": wall, "records": report.totals.records, "stages": report.stage_seconds,
                  "tasks": len(plan.tasks), "worker_peak_rss_mb": sorted(rss.values()),
                  "worker_cpu_seconds": sorted(cpu.values()), "output_bytes": output_bytes,
                  "disk_read_mb": None if read0 is None or read1 is None else (read1 - read0) * 512 / 1e6}))
"""

SMALL = r"""
import json, os, sys, time
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentTask
from migrate.segment.convert import convert_segment
from migrate.segment.verify import verify_segment
src, root, n, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
opts = ConvertOptions()
best = None
for k in range(repeat):
    # fresh directories, nothing deleted: see section_small
    dirs = [os.path.join(root, f"r{k}", f"p-{i}") for i in range(n)]
    for d in dirs:
        os.makedirs(d)
    cpu, t = time.process_time(), time.perf_counter()
    for d in dirs:
        assert verify_segment(convert_segment(SegmentTask(src, d, 0, opts)), opts).ok
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    if best is None or wall < best["wall_ms"] * n / 1e3:
        best = {"wall_ms": wall / n * 1e3, "cpu_ms": cpu / n * 1e3}
print(json.dumps(best))
"""


def child(code: str, *args: object, tree: Path | None = None, timeout: float = 3600) -> dict:
    where = str(tree or REPO)
    code = f"import migrate\nassert migrate.__file__.startswith({where!r}), migrate.__file__\n{code}"
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    # not from the repository: `python -c` puts the working directory first on sys.path, before PYTHONPATH
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def timed_child(code: str, *args: object, tree: Path | None = None) -> tuple[float, dict]:
    t = time.perf_counter()
    out = child(code, *args, tree=tree)
    return time.perf_counter() - t, out


def kafka(src: Path, out: Path) -> dict | None:
    if not ORACLE.exists():
        return None
    proc = subprocess.run([str(ORACLE), "convert", "--repeat", "5", str(src), str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"oracle convert failed: {proc.stderr[-1000:]}")
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    out.unlink(missing_ok=True)
    return {"seconds": float(line["seconds"]), "records": int(line["records"])}


def section_segment(args: argparse.Namespace, tmp: Path, results: dict) -> None:
    values = [int(v) for v in args.values.split(",")]
    target = args.records * message_size(10, values[0], 0)  # every value size: a segment of the same bytes
    for value_bytes in values:
        records = target // message_size(10, value_bytes, 0)
        src = write_segment(tmp / f"seg-{value_bytes}" / "bench-0" / f"{0:020d}.log", records, value_bytes=value_bytes)
        size = src.stat().st_size
        rows: dict[str, dict] = {}
        for _ in range(args.rounds):  # alternate, so that the machine's load lands on every row alike
            for name, digest, tree in [
                ("ours, SHA-256", "sha256", None),
                ("ours, XXH3-128", "xxh3-128", None),
                *([("before, SHA-256", "sha256", args.before)] if args.before else []),
            ]:
                r = child(CONVERT_VERIFY, src, tmp / "out", digest, args.repeat, tree=tree)
                if name not in rows or r["seconds"] < rows[name]["seconds"]:
                    rows[name] = r
            r = child(AIOKAFKA, src, args.repeat)
            if "aiokafka" not in rows or r["seconds"] < rows["aiokafka"]["seconds"]:
                rows["aiokafka"] = r
            k = kafka(src, tmp / "kafka.log") if not args.no_kafka else None
            if k is not None and ("kafka" not in rows or k["seconds"] < rows["kafka"]["seconds"]):
                rows["kafka"] = k
        results.setdefault("segment", {})[str(value_bytes)] = {"bytes": size, "records": records, "rows": rows}
        shutil.rmtree(tmp / "out", ignore_errors=True)
        if value_bytes != values[0]:
            shutil.rmtree(src.parents[1])


def section_execute(args: argparse.Namespace, tmp: Path, results: dict) -> None:
    value_bytes = int(args.values.split(",")[0])
    log_dir = tmp / "logdir"
    src = tmp / f"seg-{value_bytes}" / "bench-0" / f"{0:020d}.log"
    if not src.exists():
        write_segment(src, args.records, value_bytes=value_bytes)
    write_log_dir(log_dir, 1, value_bytes=value_bytes)  # broker files, a partition dir; the segment comes next
    shutil.copyfile(src, log_dir / "bench-0" / f"{0:020d}.log")
    aio = results.get("segment", {}).get(str(value_bytes), {}).get("rows", {}).get("aiokafka")
    if aio is None:
        aio = child(AIOKAFKA, src, args.repeat)
    rows: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, how, digest, tree in [
            ("ours, the two commands, SHA-256", COMMANDS, "sha256", None),
            ("ours, the two commands, XXH3-128", COMMANDS, "xxh3-128", None),
            ("ours, API in one process, SHA-256", EXECUTE, "sha256", None),
            ("ours, API in one process, XXH3-128", EXECUTE, "xxh3-128", None),
            *([("before, API in one process, SHA-256", EXECUTE, "sha256", args.before)] if args.before else []),
        ]:
            plan_path = tmp / "plan.json"
            wall, r = timed_child(how, log_dir, digest, plan_path, tree=tree)
            if how is EXECUTE:
                r["wall"] = wall  # the commands' child times its two processes itself, not its own start-up
            child(ROLLBACK, plan_path, tree=tree)
            for leftover in (f"{plan_path}.state", f"{plan_path}.logs"):
                shutil.rmtree(leftover, ignore_errors=True)
            if name not in rows or wall < rows[name]["wall"]:
                rows[name] = r
    results["execute"] = {"records": args.records, "value_bytes": value_bytes, "aiokafka": aio, "rows": rows}


def section_workers(args: argparse.Namespace, tmp: Path, results: dict) -> None:
    """Each run starts ``execute`` with the segment in the page cache (``warm``: read through once) or out of it
    (``cold``: its clean pages dropped, as on a broker host whose segments were written long ago, or planned hours
    before): set after the plan, which reads the whole segment. Left alone, the state depends on the minutes before:
    this VM's kernel evicts page cache untouched for about a minute (DAMON)."""
    value_bytes = int(args.values.split(",")[0])
    records = args.workers_mib * (1 << 20) // message_size(10, value_bytes, 0)
    log_dir = tmp / "big"
    write_log_dir(log_dir, records, value_bytes=value_bytes)
    segment = log_dir / "bench-0" / f"{0:020d}.log"
    size = segment.stat().st_size
    by_cache: dict[str, dict] = {}
    machine_before = copy_scaling()
    for state in args.source_cache.split(","):
        rows: dict[str, dict] = {}
        paired: list[float] = []  # each round's 1-worker time over its 2-worker time, run back to back
        rounds: list[dict[str, float]] = []
        stages: list[dict[str, dict]] = []  # each run's stage seconds, to see where a slow run lost its time
        copies: list[dict[str, float]] = []  # the same bytes copied plainly, 1 and 2 processes, each round
        for i in range(args.rounds):
            this_round = {}
            these_stages = {}
            for workers in (1, 2) if i % 2 == 0 else (2, 1):  # alternating: a drift of the machine favours neither
                r = child(WORKERS, log_dir, workers, args.workers_digest, tmp / "big-plan.json", segment, state)
                shutil.rmtree(tmp / "big-plan.json.state", ignore_errors=True)
                this_round[workers] = r["seconds"]
                these_stages[str(workers)] = {
                    **r["stages"],
                    "worker_cpu": r["worker_cpu_seconds"],
                    "disk_read_mb": r["disk_read_mb"],
                }
                if str(workers) not in rows or r["seconds"] < rows[str(workers)]["seconds"]:
                    rows[str(workers)] = r
            paired.append(this_round[1] / this_round[2])
            rounds.append({str(k): v for k, v in this_round.items()})
            stages.append(these_stages)
            out_bytes = rows["1"]["output_bytes"]
            copies.append({str(n): byte_copy(segment, tmp / "copy.out", out_bytes, n, state) for n in (1, 2)})
        by_cache[state] = {
            "rows": rows,
            "paired_speedups": paired,
            "rounds": rounds,
            "round_stages": stages,
            "byte_copy_rounds": copies,
        }
    results["workers"] = {
        "bytes": size,
        "records": records,
        "digest": args.workers_digest,
        "by_source_cache": by_cache,
        "machine_copy_scaling": [machine_before, copy_scaling()],
    }
    shutil.rmtree(log_dir)


COPY_SCALING = r"""
import json, sys, time
import numpy as np
from multiprocessing import get_context
def copy(q):
    a = np.ones(32 << 20); b = np.empty_like(a)
    np.copyto(b, a)
    t = time.perf_counter()
    for _ in range(10):
        np.copyto(b, a)
    q.put(time.perf_counter() - t)
def run(procs):
    ctx = get_context("fork"); q = ctx.Queue()
    ps = [ctx.Process(target=copy, args=(q,)) for _ in range(procs)]
    [p.start() for p in ps]; [p.join() for p in ps]
    return max(q.get() for _ in ps)
print(json.dumps(sorted(2 * run(1) / run(2) for _ in range(5))))
"""


BYTE_COPY = r"""
import json, os, sys, time
from multiprocessing import get_context
segment, out, output_bytes, procs, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
size = os.stat(segment).st_size
def part(i):
    lo, hi = size * i // procs, size * (i + 1) // procs
    src, dst = os.open(segment, os.O_RDONLY), os.open(out, os.O_WRONLY)
    buf = bytearray(2 << 20)
    pos, at = lo, lo * output_bytes // size
    while pos < hi:
        n = os.preadv(src, [memoryview(buf)[: min(len(buf), hi - pos)]], pos)
        grown = (pos + n) * output_bytes // size - pos * output_bytes // size  # as many bytes out as a conversion
        for piece in (memoryview(buf)[:n], memoryview(buf)[: grown - n]):
            at += os.pwrite(dst, piece, at)
        pos += n
    os.close(src); os.close(dst)
fd = os.open(segment, os.O_RDONLY)
if cache == "cold":
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
else:
    while os.read(fd, 8 << 20):
        pass
os.close(fd)
os.close(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
t = time.perf_counter()
ps = [get_context("fork").Process(target=part, args=(i,)) for i in range(procs)]
[p.start() for p in ps]; [p.join() for p in ps]
fd = os.open(out, os.O_RDONLY); os.fsync(fd); os.close(fd)
seconds = time.perf_counter() - t
os.unlink(out)
print(json.dumps({"seconds": seconds}))
"""


def byte_copy(segment: Path, out: Path, output_bytes: int, procs: int, cache: str) -> float:
    """A plain copy of the segment's bytes from the same cache state, writing as many bytes as the conversion did
    and syncing them, in ``procs`` processes (each its share): what the disk and memory allow without any codec."""
    return child(BYTE_COPY, segment, out, output_bytes, procs, cache)["seconds"]


PAGE_REPORTING_ORDER = Path("/sys/module/page_reporting/parameters/page_reporting_order")
NO_REPORTING_ORDER = 11  # above the buddy allocator's largest order (10 on x86-64): no free block qualifies
HOST_WARM_BYTES = 6 << 30  # more than a workers run allocates at once (page cache of source and output, processes)

TOUCH_MEMORY = r"""
import mmap, sys
size = int(sys.argv[1])
m = mmap.mmap(-1, size)
for at in range(0, size, 4096):
    m[at] = 1
"""


def page_reporting_order() -> int | None:
    """The guest's free page reporting (virtio-balloon): free blocks of at least this order are handed back to the
    host, which drops them; the next touch of such a page faults it back in from the host (measured here: about 1.2 s
    of system CPU per GiB, taken by whichever process touches it first). None without the feature."""
    try:
        return int(PAGE_REPORTING_ORDER.read_text())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def quiet_host_memory(warm_bytes: int) -> Iterator[int | None]:
    """Free page reporting off, and ``warm_bytes`` of the guest's memory touched once, for the block: pages then come
    back warm whichever run frees and reuses them, instead of cold by chance (a cold read of 1 GiB took 0.5-0.7 s or
    1.2-1.7 s in alternation on this VM with reporting on, 0.50-0.58 s with it off). At most half the memory available
    is touched. The previous order is restored after."""
    before = page_reporting_order()
    if before is None:
        yield None
        return
    try:
        PAGE_REPORTING_ORDER.write_text(str(NO_REPORTING_ORDER))
    except OSError as exc:
        print(f"free page reporting stays on ({exc}): run as root to turn it off", file=sys.stderr)
        yield before
        return
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        available = next(int(line.split()[1]) << 10 for line in meminfo if line.startswith("MemAvailable:"))
        subprocess.run([sys.executable, "-c", TOUCH_MEMORY, str(min(warm_bytes, available // 2))], check=True)
        yield NO_REPORTING_ORDER
    finally:
        PAGE_REPORTING_ORDER.write_text(str(before))


def copy_scaling() -> float:
    """The machine's own speed-up from 1 to 2 processes on memory-bound work (each copies 256 MB, ten times): the
    median of five; 2.0 on a machine whose memory bandwidth both cores get in full."""
    ratios = child(COPY_SCALING)
    return ratios[len(ratios) // 2]


def section_small(args: argparse.Namespace, tmp: Path, results: dict) -> None:
    """Every run creates its files in directories of its own and none is deleted until the section ends: on an ext4
    without a journal (this VM's root), creating a file skips each inode freed in the last 30 s
    (``recently_deleted``), so a run right after another one's deletions paid up to 3 ms per segment instead of 0.7
    (``perf``: 35 % of the samples there), and a row that always ran second looked twice as slow."""
    src = write_segment(tmp / "small" / f"{0:020d}.log", args.small_records, value_bytes=100)
    rows: dict[str, dict] = {}
    trees = [("ours", None), *([("before", args.before)] if args.before else [])]
    for i in range(args.rounds):
        for name, tree in trees if i % 2 == 0 else trees[::-1]:
            out = tmp / "small-out" / f"{name}-{i}"
            r = child(SMALL, src, out, args.small_segments, args.repeat, tree=tree)
            if name not in rows or r["wall_ms"] < rows[name]["wall_ms"]:
                rows[name] = r
    results["small"] = {"bytes": src.stat().st_size, "segments": args.small_segments, "rows": rows}
    shutil.rmtree(tmp / "small-out", ignore_errors=True)


def report(results: dict) -> str:
    order = results.get("page_reporting_order")
    lines = [
        "host memory: "
        + (
            "no free page reporting"
            if order is None
            else f"free page reporting {'off' if order >= NO_REPORTING_ORDER else f'on (order {order})'}"
        )
    ]
    for value_bytes, case in results.get("segment", {}).items():
        rows = case["rows"]
        n, mb = case["records"], case["bytes"] / 1e6
        k, aio = rows.get("kafka"), rows.get("aiokafka")
        lines.append(f"\nconvert + verify in one process, {n:,} v0 records of {value_bytes} B values ({mb:.0f} MB):\n")
        lines.append(
            "| implementation | seconds | records/s | MB/s in | ÷ Kafka's loop | ÷ aiokafka bare loop | peak RSS MB |"
        )
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name, r in rows.items():
            s = r["seconds"]
            detail = f" (convert {r['convert']:.2f} + verify {r['verify']:.2f})" if "convert" in r else ""
            vs_k = f"{k['seconds'] / s:.2f}x" if k else "-"
            vs_a = f"{aio['seconds'] / s:.2f}x" if aio else "-"
            rss = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "-"
            label = {
                "kafka": "Apache Kafka's conversion loop (oracle convert --repeat 5)",
                "aiokafka": "aiokafka bare codec loop (in memory)",
            }.get(name, name)
            lines.append(f"| {label}{detail} | {s:.3f} | {n / s:,.0f} | {mb / s:,.0f} | {vs_k} | {vs_a} | {rss} |")
    if "execute" in results:
        e = results["execute"]
        aio_rate = e["aiokafka"]["records"] / e["aiokafka"]["seconds"]
        lines.append(f"\nplan + execute on the default engine, {e['records']:,} records, fresh process, wall clock:\n")
        lines.append("| run | wall s | plan s | execute s | records/s | ÷ aiokafka bare loop (one core) |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        for name, r in e["rows"].items():
            rate = e["records"] / r["wall"]
            lines.append(
                f"| {name} | {r['wall']:.2f} | {r['plan']:.2f} | {r['execute']:.2f} | {rate:,.0f} "
                f"| {rate / aio_rate:.2f}x |"
            )
        lines.append(f"| aiokafka bare codec loop | {e['aiokafka']['seconds']:.2f} | | | {aio_rate:,.0f} | 1.00x |")
    if "workers" in results:
        w = results["workers"]
        lines.append(
            f"\none partition, one segment of {w['bytes'] / 2**30:.2f} GiB ({w['records']:,} records), {w['digest']}; "
            "the machine's own 1 -> 2 process speed-up on a memory copy, before and after: "
            + " and ".join(f"{x:.2f}x" for x in w["machine_copy_scaling"])
        )
        for state, c in w["by_source_cache"].items():
            one = c["rows"]["1"]["seconds"]
            lines.append(f"\nsource {state} ({'in the page cache' if state == 'warm' else 'read from disk'}):\n")
            lines.append("| workers | best seconds | MB/s | speed-up | tasks | peak RSS per worker MB |")
            lines.append("| ---: | ---: | ---: | ---: | ---: | --- |")
            for workers, r in c["rows"].items():
                rss = ", ".join(f"{x:.0f}" for x in r["worker_peak_rss_mb"])
                lines.append(
                    f"| {workers} | {r['seconds']:.2f} | {w['bytes'] / 1e6 / r['seconds']:.0f} "
                    f"| {one / r['seconds']:.2f}x | {r['tasks']} | {rss} |"
                )
            paired = c["paired_speedups"]
            lines.append(
                "\nspeed-up of each round (its two runs back to back, in alternating order): "
                f"{', '.join(f'{x:.2f}x' for x in c['paired_speedups'])}; median {statistics.median(paired):.2f}x"
            )
            lines.append(
                "seconds of each round (1 worker / 2 workers): "
                + ", ".join(f"{r['1']:.2f} / {r['2']:.2f}" for r in c["rounds"])
            )
            if c.get("byte_copy_rounds"):
                copy_ratios = [r["1"] / r["2"] for r in c["byte_copy_rounds"]]
                lines.append(
                    "a plain copy of the same bytes, same cache state, fsync'd, 1 / 2 processes, each round: "
                    + ", ".join(f"{r['1']:.2f} / {r['2']:.2f}" for r in c["byte_copy_rounds"])
                    + f"; its speed-up: median {statistics.median(copy_ratios):.2f}x"
                )
            read = [x.get("disk_read_mb") for st in c["round_stages"] for x in st.values()]
            read = [x for x in read if x is not None]
            if read:
                lines.append(f"read from disk by each execute: {min(read):.0f}-{max(read):.0f} MB")
    if "small" in results:
        s = results["small"]
        lines.append(
            f"\nconvert + verify of one small segment ({s['bytes'] / 1e3:.0f} KB), {s['segments']} in a row:\n"
        )
        lines.append("| tree | wall ms per segment | CPU ms per segment |")
        lines.append("| --- | ---: | ---: |")
        for name, r in s["rows"].items():
            lines.append(f"| {name} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_500_000, help="of the first value size; the others: same bytes")
    ap.add_argument("--values", default="100,1000", help="value sizes in bytes; the first is used by execute/workers")
    ap.add_argument("--sections", default="segment,execute,workers,small")
    ap.add_argument("--workers-mib", type=int, default=1024)
    ap.add_argument("--workers-digest", default="xxh3-128")
    ap.add_argument(
        "--source-cache", default="warm,cold", help="workers: the segment in the page cache when execute starts, or not"
    )
    ap.add_argument(
        "--host-memory",
        choices=("as-is", "quiet"),
        default="as-is",
        help="quiet: the VM's free page reporting off for the run, and memory touched once before it (root)",
    )
    ap.add_argument("--small-records", type=int, default=200)
    ap.add_argument("--small-segments", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per child, best kept")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds over the rows, best kept")
    ap.add_argument("--before", type=Path, help="a tree of an older commit, run alongside this one")
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    sections = args.sections.split(",")
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    host = quiet_host_memory(HOST_WARM_BYTES) if args.host_memory == "quiet" else contextlib.nullcontext(None)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-e2e-") as tmp_name, host as order:
        results["page_reporting_order"] = order if args.host_memory == "quiet" else page_reporting_order()
        tmp = Path(tmp_name)
        for name in ("segment", "execute", "workers", "small"):
            if name in sections:
                t = time.perf_counter()
                globals()[f"section_{name}"](args, tmp, results)
                print(f"[{name}: {time.perf_counter() - t:.0f} s]", file=sys.stderr, flush=True)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"\nreproduce: python benchmarks/bench_end_to_end.py {' '.join(sys.argv[1:])}")


if __name__ == "__main__":
    main()
