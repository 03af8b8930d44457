"""Fuzz the plan readers with damaged plans, through the verbs an operator runs.

A plan is bytes from disk like any segment: it may be truncated by a full disk, damaged by a bad copy or edited by
hand. Every case takes a real plan of a demo log dir (columnar by default, ``--form json`` for the JSON form),
damages it (bytes overwritten, bits flipped, a run of bytes zeroed, the file cut short, bytes inserted or deleted),
and runs ``status``, ``verify`` and ``execute --engine serial`` on it in this process, as ``kafka-log-migrate``
would. A case whose damaged plan still loads as the same plan (bytes Parquet does not read, such as statistics) is
counted and not run. The only acceptable outcome of the others is the tool's own refusal: exit 1 or 2 and a message,
never a traceback, never "this is a bug", and the log dir exactly as it was (every file's bytes, size, mtime,
inode; checked after every ``--check-every`` cases and at the end).

    python benchmarks/fuzz_plans.py [--cases 10000] [--seed 1] [--form columnar|json] [--json]
    python benchmarks/fuzz_plans.py --seed 1 --replay 1234      # one case again, with its output

Cases are derived from (seed, case number) alone. Prints the count of each outcome; exits 1 if any case crashed.
tests/test_plan_fuzz.py runs the same engine with a few hundred cases.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_legacy

from migrate.cli import main as cli_main
from migrate.errors import MigrateError
from migrate.planning.plan import load_plan

VERBS = (["status"], ["verify"], ["execute", "--engine", "serial"])
BAD_TEXT = ("Traceback", "this is a bug", "unexpected error")


def make_plan(root: Path, form: str) -> tuple[Path, Path, bytes]:
    """A log dir of three partitions of v0 data, and its plan in ``form``: (log dir, plan path, plan bytes)."""
    log_dir = root / "kafka"
    gen_legacy.write_log_dir(log_dir, 200, partitions=3, magic=0)
    plan = root / ("plan.parquet" if form == "columnar" else "plan.json")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if cli_main(["plan", "--log-dirs", str(log_dir), "-o", str(plan)]) != 0:
            raise SystemExit("could not plan the fuzz's log dir")
    return log_dir, plan, plan.read_bytes()


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One damaged copy of ``data``."""
    b = bytearray(data)
    kind = rng.randrange(6)
    if kind == 0:
        return bytes(b[: rng.randrange(len(b))])
    if kind == 1:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 2:
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 3:
        start = rng.randrange(len(b))
        b[start : start + rng.randint(1, 64)] = bytes(min(64, len(b) - start))
    elif kind == 4:
        at = rng.randrange(len(b))
        b[at:at] = rng.randbytes(rng.randint(1, 16))
    else:
        at = rng.randrange(len(b))
        del b[at : at + rng.randint(1, 16)]
    return bytes(b)


def fingerprint(log_dir: Path) -> dict[str, tuple[int, int, int, str]]:
    out = {}
    for top, _, names in os.walk(log_dir):
        for name in names:
            path = Path(top) / name
            st = os.lstat(path)
            out[str(path)] = (st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def run_case(plan_path: Path, data: bytes, original_id: str) -> tuple[str, str]:
    """('same', '') for a damaged plan that still loads as the original, else ('refused' | 'CRASH', detail)."""
    plan_path.write_bytes(data)
    try:
        if load_plan(plan_path).plan_id == original_id:
            return "same", ""
    except MigrateError:
        pass
    except BaseException as exc:
        return "CRASH", f"load_plan raised {type(exc).__name__}: {exc}"
    for verb in VERBS:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = cli_main([verb[0], "--plan", str(plan_path), *verb[1:]])
        except BaseException as exc:
            return "CRASH", f"{verb[0]} raised {type(exc).__name__}: {exc}"
        text = out.getvalue()
        if code not in (1, 2) or any(bad in text for bad in BAD_TEXT):
            return "CRASH", f"{verb[0]} exited {code}: {text[-1500:]}"
    return "refused", ""


def fuzz(cases: int, seed: int, form: str, check_every: int = 500, replay: int | None = None) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        log_dir, plan, data = make_plan(root, form)
        original_id = load_plan(plan).plan_id
        before = fingerprint(log_dir)
        damaged = root / plan.name.replace("plan", "damaged")
        numbers = [replay] if replay is not None else range(cases)
        for n in numbers:
            outcome, detail = run_case(damaged, mutate(data, random.Random(f"{seed}:{n}")), original_id)
            outcomes[outcome] += 1
            if outcome == "CRASH" or replay is not None:
                print(f"case {n}: {outcome}: {detail}", file=sys.stderr)
            if (n + 1) % check_every == 0 and fingerprint(log_dir) != before:
                outcomes["CRASH"] += 1
                print(f"after case {n}: the log dir changed", file=sys.stderr)
                before = fingerprint(log_dir)
        if fingerprint(log_dir) != before:
            outcomes["CRASH"] += 1
            print("the log dir changed", file=sys.stderr)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--form", choices=("columnar", "json"), default="columnar")
    p.add_argument("--check-every", type=int, default=500)
    p.add_argument("--replay", type=int)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    started = time.perf_counter()
    outcomes = fuzz(args.cases, args.seed, args.form, args.check_every, args.replay)
    seconds = time.perf_counter() - started
    summary = {"cases": sum(outcomes.values()), "seconds": round(seconds, 1), **outcomes}
    print(json.dumps(summary) if args.json else " ".join(f"{k}={v}" for k, v in summary.items()))
    return 1 if outcomes["CRASH"] else 0


if __name__ == "__main__":
    sys.exit(main())
