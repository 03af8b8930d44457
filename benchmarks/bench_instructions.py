"""Instructions per segment of the convert and swap stages, counted by valgrind: a figure this VM's drift cannot move.

On this VM the same execute of 10^5 tiny segments takes 20 to 29 s within an hour, and a bare CPU loop 1.8 to 2.6 s
with no steal reported: a change of a few percent per segment cannot be shown by timing. Valgrind's callgrind counts
the instructions a process executes (``Ir``), which do not depend on the machine's speed: the same code and inputs
give the same count to within a fraction of a percent.

For each tree (this one, and with ``--before TREE`` an older checkout with its compiled extensions in place),
interleaved: a fresh copy of one generated log dir of ``--partitions`` x ``--segments`` tiny v0 segments
(``gen_many.write_many``), planned by that tree's own CLI; then, in one process under callgrind with instrumentation
off, ``prepare`` and the plan's first convert task (imports and first-call caches), instrumentation on, every other
convert task in turn (``stages.convert.convert_task``: convert, verify from disk, record), a dump, then the swap of
the log dir (``stages.swap.swap_log_dir``, in process below the plan helper's threshold), a dump. Reported: ``Ir``
per segment of each stage, and each tree's over the first's.

What it does not count: the kernel's side of every system call (valgrind sees user space only; ``--syscalls`` adds
the count of system calls per segment of the same work, by ``strace -c``), the engine (Dask's scheduler, events,
the worker's process), and waits. Timing figures stay with ``bench_million.py``; this says whether a change made a
segment's own work smaller, and by how much.

    python benchmarks/bench_instructions.py [--partitions 20] [--segments 100] [--before TREE] [--rounds 1]
                                            [--dir /dev/shm/bench-instructions] [--syscalls] [--json out.json]

Needs ``valgrind`` (and ``strace`` for ``--syscalls``); about a minute per tree and round at 2,000 segments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from gen_many import write_many  # noqa: E402

CLI = 'import sys; sys.argv[0] = "kafka-log-migrate"; from migrate.cli import console_main; console_main()'

# the process under callgrind: prepare and one task uninstrumented, then each stage between two dumps
CHILD = r"""
import os, subprocess, sys
from migrate.planning.plan import load_plan
from migrate.stages.convert import convert_task
from migrate.stages.prepare import prepare_log_dir
from migrate.stages.swap import swap_log_dir

def control(*args):
    if sys.argv[2] == "callgrind":
        subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)

def mark(name):
    if sys.argv[2] == "strace":  # a system call strace shows between the stages: a stat of a name never there
        try:
            os.stat("/kafka-log-migrate-mark-" + name)
        except FileNotFoundError:
            pass

plan = load_plan(sys.argv[1])
key = plan.log_dirs[0].key
prepare_log_dir(plan, key)
ids = [t.id for t in plan.tasks]
convert_task(plan, ids[0])
print("SEGMENTS", sum(len(plan.tasks_by_id[i].segments) for i in ids[1:]), sum(len(t.segments) for t in plan.tasks))
sys.stdout.flush()
control("-i", "on")
mark("convert")
for task_id in ids[1:]:
    convert_task(plan, task_id)
control("-d", "convert")
mark("swap")
report = swap_log_dir(plan, key)
control("-d", "swap")
mark("end")
assert not report.failed, report.failed
"""


def python() -> str:
    """The interpreter itself: a version manager's shim is a shell script, which valgrind would count instead."""
    return os.path.realpath(sys.executable)


def fresh_log_dir(orig: Path, work: Path, tree: Path, task_segments: int | None = None) -> Path:
    """A copy of ``orig`` planned by ``tree``'s CLI (with ``--task-segments`` where given); the plan's path."""
    shutil.rmtree(work, ignore_errors=True)
    for stale in work.parent.glob(work.name + ".plan*"):
        shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
    shutil.copytree(orig, work, symlinks=True)
    plan = work.parent / (work.name + ".plan.parquet")
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run(
        [python(), "-c", CLI, "plan", "--log-dirs", str(work), "-o", str(plan)]
        + ([] if task_segments is None else ["--task-segments", str(task_segments)]),
        check=True,
        env=env,
        capture_output=True,
    )
    return plan


def run_child(plan: Path, tree: Path, scratch: Path, tool: list[str], mode: str) -> dict[str, int]:
    """``CHILD`` over ``plan`` with ``tree``'s code, under ``tool`` (valgrind or strace); the segments each stage
    counted (the swap's are all the plan's, the conversion's all but its first task's)."""
    child = scratch / "child.py"
    child.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=str(tree))
    run = subprocess.run([*tool, python(), str(child), str(plan), mode], env=env, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"the child under {tool[0]} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    m = re.search(r"SEGMENTS (\d+) (\d+)", run.stdout)
    if m is None:
        raise RuntimeError(f"the child did not say how many segments it converted:\n{run.stdout}")
    return {"convert": int(m.group(1)), "swap": int(m.group(2))}


def instructions(plan: Path, tree: Path, scratch: Path) -> dict[str, float]:
    """Ir per segment of convert and swap for ``plan``, run by ``tree``'s code."""
    for old in scratch.glob("cg.out*"):
        old.unlink()
    tool = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={scratch}/cg.out"]
    counted = run_child(plan, tree, scratch, tool, "callgrind")
    dumps = {}
    for dump in scratch.glob("cg.out*"):
        text = dump.read_text(errors="replace")
        trigger = re.search(r"^desc: Trigger: .*?(convert|swap)\s*$", text, re.M)
        totals = re.search(r"^(?:totals|summary): (\d+)", text, re.M)
        if trigger and totals:
            dumps[trigger.group(1)] = int(totals.group(1))
    missing = {"convert", "swap"} - dumps.keys()
    if missing:
        raise RuntimeError(f"no callgrind dump for {sorted(missing)} in {scratch}")
    return {stage: count / counted[stage] for stage, count in dumps.items()} | {"segments": counted["convert"]}


def syscalls(plan: Path, tree: Path, scratch: Path) -> dict[str, float]:
    """System calls per segment of convert and swap (``strace -f``: the stages' own calls between two marks)."""
    trace = scratch / "strace.out"
    counted = run_child(plan, tree, scratch, ["strace", "-f", "-o", str(trace)], "strace")
    counts = {"convert": 0, "swap": 0}
    stage = None
    for line in trace.read_text(errors="replace").splitlines():
        mark = re.search(r'kafka-log-migrate-mark-(\w+)"', line)
        if mark:
            stage = mark.group(1) if mark.group(1) in counts else None
            continue
        if stage is not None and re.match(r"^\d+\s+\w+\(", line):
            counts[stage] += 1
    return {stage: n / counted[stage] for stage, n in counts.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--segments", type=int, default=100, help="segments per partition")
    ap.add_argument("--before", help="an older tree (a git worktree with its compiled extensions) counted beside")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (the counts barely move between them)")
    ap.add_argument("--dir", default="/dev/shm/bench-instructions", help="scratch dir (removed at the end)")
    ap.add_argument("--syscalls", action="store_true", help="also count system calls per segment (strace)")
    ap.add_argument("--task-segments", type=int, help="plan with at most this many segments a task")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind (callgrind) is not installed: nothing to count", file=sys.stderr)
        return 2
    trees = {"this": REPO} | ({"before": Path(args.before).resolve()} if args.before else {})
    scratch = Path(args.dir)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    orig = scratch / "orig"
    write_many(orig, args.partitions, args.segments)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                plan = fresh_log_dir(orig, scratch / f"ld-{name}", tree, args.task_segments)
                row = instructions(plan, tree, scratch)
                if args.syscalls:
                    plan = fresh_log_dir(orig, scratch / f"ld-{name}", tree, args.task_segments)
                    row |= {f"{stage}_syscalls": n for stage, n in syscalls(plan, tree, scratch).items()}
                rows[name].append(row)
                calls = (
                    f", system calls {row['convert_syscalls']:.1f} and {row['swap_syscalls']:.1f} a segment"
                    if args.syscalls
                    else ""
                )
                print(
                    f"round {r + 1} {name} ({tree}): convert {row['convert']:,.0f} Ir a segment, swap "
                    f"{row['swap']:,.0f}, over {row['segments']:.0f} segments{calls}",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {name: {k: min(row[k] for row in runs) for k in runs[0]} for name, runs in rows.items()}
    if "before" in summary:
        for stage in ("convert", "swap"):
            ratio = summary["this"][stage] / summary["before"][stage]
            print(
                f"{stage}: this tree {summary['this'][stage]:,.0f} Ir a segment, before {summary['before'][stage]:,.0f}"
                f" ({ratio:.3f}x)"
            )
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": rows, "best": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
