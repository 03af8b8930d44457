"""``demo``: generate a legacy broker log dir and migrate it end to end on a Dask LocalCluster."""

from __future__ import annotations

import argparse
import shutil
from contextlib import closing
from pathlib import Path

from migrate import pipeline
from migrate.commands.output import note
from migrate.demo.generate import write_demo_logdir
from migrate.engines import Engine, SerialEngine
from migrate.planning.plan import build_plan, write_plan
from migrate.planning.request import PlanRequest
from migrate.reports.scan import scan_log_dirs
from migrate.units import human_bytes


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="generate a legacy log dir and migrate it (scan, plan, execute, verify)",
        description="Write a broker log dir of legacy (v0/v1) segments in every codec, as a 0.10 broker leaves "
        "it, then scan it, plan, execute (on a Dask LocalCluster by default), verify and scan again; --rollback then "
        "puts every original back. Touches nothing but --dir.",
    )
    p.add_argument(
        "--dir", default="demo-kafka-logs", help="where to write the demo log dir (default ./demo-kafka-logs)"
    )
    p.add_argument("--records", type=int, default=3000, help="records per partition (default 3000)")
    p.add_argument(
        "--engine", choices=["dask", "serial"], default="dask", help="a Dask LocalCluster (default) or this process"
    )
    p.add_argument("--rollback", action="store_true", help="roll back at the end, proving the originals come back")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if root.exists():
        shutil.rmtree(root)
    log_dir = write_demo_logdir(root, args.records)
    before = scan_log_dirs([str(log_dir)]).summary
    note(
        f"1. wrote {log_dir}: {before.partitions} partitions, {before.legacy_partitions} with legacy data "
        f"({human_bytes(before.legacy_bytes)})"
    )
    plan = build_plan(PlanRequest(log_dirs=(str(log_dir),)))
    plan_path = root.parent / f"{root.name}-plan.json"
    write_plan(plan, plan_path)
    note(f"2. plan {plan.plan_id} -> {plan_path}: {plan.estimates.segments} segments to convert")
    engine: Engine
    if args.engine == "dask":
        from migrate.engines.dask import DaskEngine

        engine = DaskEngine(dashboard_address="127.0.0.1:0")
        note(f"   Dask dashboard: {engine.dashboard_link}")
    else:
        engine = SerialEngine()
    with closing(engine):
        report = pipeline.execute(plan, engine)
        t = report.totals
        note(
            f"3. execute: {t.verified} segments, {t.records} records, {human_bytes(t.bytes_in)} -> "
            f"{human_bytes(t.bytes_out)}, "
            f"every partition migrated: {report.ok}"
        )
        live = pipeline.verify_live(plan, engine)
        note(f"4. verify: live data {'matches' if live.ok else 'DIFFERS from'} what was swapped in")
        after = scan_log_dirs([str(log_dir)]).summary
        note(f"5. scan: {after.legacy_partitions} partitions with legacy data left; v2-only: {after.v2_only}")
        if args.rollback:
            rolled = pipeline.rollback(plan, engine, plan_path)
            note(f"6. rollback: ok={rolled.ok}; originals restored")
    note(f"Inspect with: kafka-log-migrate dump --deep-iteration {next(log_dir.glob('*/*.log'))}")
    return 0 if report.ok and live.ok and after.v2_only else 1
