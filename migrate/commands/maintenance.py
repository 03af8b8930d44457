"""``status``, ``rollback`` and ``finalize``: after (or instead of) a finished execute."""

from __future__ import annotations

import argparse

from migrate import pipeline
from migrate.codec import to_json
from migrate.commands.engine import add_engine_options, engine_for, load_plan_for
from migrate.commands.manifest import run_manifest_verb
from migrate.engines.watched import WatchedEngine
from migrate.model.cluster_manifest import Verb
from migrate.model.run_state import LogDirPhase, LogDirStatus
from migrate.model.stage_reports import StageError
from migrate.reports.columns import aligned
from migrate.watch.runlog import result


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "status",
        help="where every partition of a plan stands",
        description="Every planned partition's state (planned, converting, ready, failed with the reason, swapping, "
        "migrated, rolling-back, rolled-back) and each log dir's history, read from the run's state in the log dir, "
        "or from the copy archived beside the plan after finalize or rollback. Changes nothing.",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument("--all", action="store_true", help="list every partition, not only those not migrated")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    add_engine_options(p, full=False)
    p.set_defaults(handler=run_status)

    p = sub.add_parser(
        "rollback",
        help="put every original file back (bytes and mtimes)",
        description="Check every live file of every planned partition first; then restore the original segment "
        "files from the backups and remove everything the migration added. Refuses, before renaming anything, if a "
        "live file changed after the swap (a broker ran) unless --force. Running it again after a crash finishes it. "
        "Keeps a run log beside the plan (<plan>.logs/).",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument(
        "--force", action="store_true", help="roll back even over live files a broker wrote to (their writes are lost)"
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_engine_options(p, full=False)
    p.set_defaults(handler=run_rollback, run_log=True)

    p = sub.add_parser(
        "finalize",
        help="delete the originals (no rollback after this)",
        description="Delete the backups of the originals and any staging, once the migrated data has been checked "
        "(verify) and the broker runs well on it. Refused while a planned partition is not migrated, unless "
        "--partial. Keeps a run log beside the plan (<plan>.logs/).",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument(
        "--partial",
        action="store_true",
        help="finalize the migrated partitions and leave the others exactly as they are (plan them again later)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_engine_options(p, full=False)
    p.set_defaults(handler=run_finalize, run_log=True)


def status_lines(d: LogDirStatus, every: bool, plan_path: str = "PLAN") -> list[str]:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(d.counts.items()))
    fence = " (fence up)" if d.fence_up else ""
    lines = [f"{d.log_dir}: {d.phase.description}{fence}; {len(d.partitions)} planned partition(s): {counts}"]
    shown = d.partitions if every else d.unmigrated
    lines += aligned([(p.partition, p.state.value, p.problem.message if p.problem else "") for p in shown])
    if d.history:
        lines.append(f"  last: {d.history[-1]}")
    lines += [f"  the files say otherwise: {r}" for r in d.reconciled]
    if d.running:
        lines.append(f"  running now: {d.running}")
    elif d.phase in (LogDirPhase.EXECUTING, LogDirPhase.ROLLING_BACK) or d.fence_up:
        lines.append(
            f"  no run is active (the last one ended or died): `execute --plan {plan_path}` resumes it, "
            f"`rollback --plan {plan_path}` undoes it"
        )
    return lines


def run_status(args: argparse.Namespace) -> int:
    if (code := run_manifest_verb(args, Verb.STATUS)) is not None:
        return code
    plan = load_plan_for(args)
    with engine_for(args, plan=plan) as engine:
        report = pipeline.status(plan, engine, args.plan)
    lines = [line for d in report.log_dirs for line in status_lines(d, args.all, args.plan)]
    lines += [f"{d}: not started (run `execute --plan {args.plan}`)" for d in report.not_started]
    lines += [f"error: {stage_error_text(e)}" for e in report.errors]
    result(to_json(report), args.json, "\n".join(lines))
    return 1 if report.errors else 0


def run_rollback(args: argparse.Namespace) -> int:
    if (code := run_manifest_verb(args, Verb.ROLLBACK)) is not None:
        return code
    plan = load_plan_for(args)
    with engine_for(args, plan=plan) as engine:
        report = pipeline.rollback(plan, WatchedEngine(engine), args.plan, args.force)
    lines = []
    for r in report.rollbacks:
        lines.append(f"{r.log_dir}: {r.phase.value}, {len(r.restored)} partitions restored")
        lines += [f"  {x}" for x in r.reconciled]
    if report.refused:
        lines.append(
            f"refusing to roll back: a broker ran on the converted data, and {len(report.refused)} file(s) would lose "
            "what it did since the swap (nothing was moved):"
        )
        lines += [f"  {x}" for x in report.refused]
        lines.append(
            "Stop the broker; `rollback --force` puts the originals back and loses exactly that (consumers and "
            "replicas that read it will see those offsets again from the leader, or not at all)."
        )
    lines += [f"error: {stage_error_text(e)}" for e in report.errors]
    lines += [f"state archived: {a}" for a in report.archived]
    if report.archived:
        lines.append(f"the run's report stays available: kafka-log-migrate report --plan {args.plan}")
    result(to_json(report), args.json, "\n".join(lines))
    return 0 if report.ok else 1


def run_finalize(args: argparse.Namespace) -> int:
    if (code := run_manifest_verb(args, Verb.FINALIZE)) is not None:
        return code
    plan = load_plan_for(args)
    with engine_for(args, plan=plan) as engine:
        report = pipeline.finalize(plan, WatchedEngine(engine), args.plan, args.partial)
    lines = []
    for r in report.finalizes:
        lines.append(f"{r.log_dir}: {r.phase.value}: originals of {len(r.finalized)} partitions deleted")
        lines += [f"  {x}" for x in r.reconciled]
        if r.found:
            lines.append(f"  what the broker did since the swap ({len(r.found)} partition(s); the rest unchanged):")
            lines += [f"    {x}" for x in r.found]
        if r.left_legacy:
            lines.append(f"  {len(r.left_legacy)} partitions left as they were, e.g. {r.left_legacy[0]}")
    lines += [f"error: {stage_error_text(e)}" for e in report.errors]
    lines += [f"state archived: {a}" for a in report.archived]
    if report.archived:
        lines.append(f"the run's report stays available: kafka-log-migrate report --plan {args.plan}")
    result(to_json(report), args.json, "\n".join(lines))
    return 0 if report.ok else 1


def stage_error_text(e: StageError) -> str:
    """A stage's error naming its log dir once: most stages' messages begin with it already."""
    return e.message if e.message.startswith(f"{e.log_dir}:") else f"{e.log_dir}: {e.message}"
