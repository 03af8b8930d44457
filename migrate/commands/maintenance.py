"""``status``, ``rollback`` and ``finalize``: after (or instead of) a finished execute."""

from __future__ import annotations

import argparse

from migrate import pipeline
from migrate.commands.migration import _with_engine, add_engine_options
from migrate.commands.output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="where every partition of a plan stands, from the journals")
    p.add_argument("--plan", required=True)
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(handler=run_status, engine="serial")

    p = sub.add_parser(
        "rollback",
        help="put every original file back (bytes and mtimes)",
        description="Restore the original segment files from the backups, remove everything the migration added. "
        "Refuses if a live file changed after the swap (a broker ran) unless --force.",
    )
    p.add_argument("--plan", required=True)
    p.add_argument("--force", action="store_true", help="roll back even if a broker wrote to the swapped files")
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(handler=run_rollback, engine="serial")

    p = sub.add_parser("finalize", help="delete backups and staging (no rollback after this)")
    p.add_argument("--plan", required=True)
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(handler=run_finalize, engine="serial")


def run_status(args: argparse.Namespace) -> int:
    _, report = _with_engine(args, pipeline.status)
    lines = []
    for d in report["log_dirs"]:
        lines.append(f"{d['log_dir']}: {d['state']}{' (fence up)' if d['fence_up'] else ''}")
        for name, p in d["partitions"].items():
            lines.append(f"  {name:<40} {p['state']}")
    emit(report, args.json, "\n".join(lines))
    return 0


def run_rollback(args: argparse.Namespace) -> int:
    _, report = _with_engine(args, lambda plan, engine: pipeline.rollback(plan, engine, args.plan, args.force))
    lines = [f"{d['log_dir']}: {d['state']}" for d in report["log_dirs"]]
    lines += [f"error: {e['error']}" for e in report["errors"]]
    lines += [f"journal archived: {j}" for j in report["journals"]]
    emit(report, args.json, "\n".join(lines))
    return 0 if report["ok"] else 1


def run_finalize(args: argparse.Namespace) -> int:
    _, report = _with_engine(args, lambda plan, engine: pipeline.finalize(plan, engine, args.plan))
    lines = [f"{d['log_dir']}: {d['state']}" for d in report["log_dirs"]]
    lines += [f"error: {e['error']}" for e in report["errors"]]
    lines += [f"journal archived: {j}" for j in report["journals"]]
    emit(report, args.json, "\n".join(lines))
    return 0 if report["ok"] else 1
