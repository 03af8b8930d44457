"""``report``: the per-segment results of a plan's runs as Parquet, and an HTML report rendered from them."""

from __future__ import annotations

import argparse
from pathlib import Path

from migrate.commands.engine import add_engine_options, engine_for, load_plan_for
from migrate.errors import MigrateError
from migrate.reports import report_page
from migrate.reports import run_report as report
from migrate.watch import runlog


def default_paths(plan_path: str | Path) -> tuple[Path, Path]:
    """``plan.json`` -> ``plan-report.html`` and ``plan-segments.parquet`` beside it."""
    plan = Path(plan_path)
    stem = plan.stem if plan.suffix == ".json" else plan.name
    return plan.with_name(f"{stem}-report.html"), plan.with_name(f"{stem}-segments.parquet")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="the per-segment results of a plan's runs: Parquet and an HTML report",
        description="Read the state of every log dir of a plan (from the log dir while a run has state there, else "
        "from the copy archived beside the plan by finalize or rollback) and write one row per planned segment: "
        "source and output bytes, records, entries by magic, timestamps policy, seconds, outcome and problem (file "
        "and byte position). The table is written as Parquet (for pandas, DuckDB or Spark), and a self-contained "
        "HTML report is rendered from it: summary, per-broker and per-topic tables, plots, failures, plan id, "
        "options and tool version. Changes nothing.",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument(
        "-o",
        "--output",
        help="the HTML report to write (default: beside the plan, <plan name>-report.html)",
    )
    p.add_argument(
        "--parquet",
        help="the Parquet table of segments to write (default: beside the plan, <plan name>-segments.parquet)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_engine_options(p, full=False)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    plan = load_plan_for(args)
    html_default, parquet_default = default_paths(args.plan)
    with engine_for(args, plan=plan) as engine:
        rows, errors = report.collect(plan, engine, args.plan)
    if not rows:
        raise MigrateError(
            f"plan {plan.plan_id} has no state in any of its log dirs nor beside {args.plan}: nothing to report "
            f"(run `kafka-log-migrate execute --plan {args.plan}` first)" + (f"; {'; '.join(errors)}" if errors else "")
        )
    table = report.build_table(plan, rows, args.plan)
    summary = report.summarize(table)
    parquet = report.write_parquet(table, args.parquet or parquet_default)
    page = report_page.write_html(report_page.render_html(table, summary), args.output or html_default)
    lines = report.summary_lines(summary)
    lines += [f"error: {e}" for e in errors]
    lines += [f"segments (Parquet, {table.num_rows} rows): {parquet}", f"report (HTML): {page}"]
    body = {**report.summary_json(summary), "parquet": str(parquet), "html": str(page), "errors": errors}
    runlog.result(body, args.json, "\n".join(lines))
    return 1 if errors else 0
