"""``plan``, ``execute`` and ``verify``: the migration itself (generate, execute, verify, as kafka-reassign does)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from migrate import pipeline
from migrate.commands.output import emit, note
from migrate.engines import Engine, SerialEngine
from migrate.errors import MigrateError
from migrate.plan import PlanRequest, build_plan, load_plan
from migrate.segment.task import DEFAULT_MAX_MESSAGE_BYTES, ConvertOptions

EXIT_VERIFY_FAILED = 3


def add_engine_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=["dask", "spark", "serial"], default="dask", help="default: dask")
    g.add_argument("--scheduler", help="address of a running Dask scheduler (default: start a LocalCluster)")
    g.add_argument("--workers", type=int, help="LocalCluster worker processes (default: one per core)")
    g.add_argument("--dashboard-address", default=":8787", help="LocalCluster dashboard address (default :8787)")
    g.add_argument("--master", default="local[*]", help="Spark master URL for --engine spark (default local[*])")


def make_engine(args: argparse.Namespace) -> Engine:
    if args.engine == "serial":
        return SerialEngine()
    if args.engine == "spark":
        from migrate.engines.spark import SparkEngine

        engine = SparkEngine(master=args.master)
        note(f"Spark UI: {engine.ui_url}")
        return engine
    from migrate.engines.dask import DaskEngine

    engine = DaskEngine(scheduler=args.scheduler, n_workers=args.workers, dashboard_address=args.dashboard_address)
    note(f"Dask dashboard: {engine.dashboard_link}")
    return engine


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="write a reviewable plan (changes nothing)",
        description="Inspect the log dirs of a stopped broker, refuse what is unsafe (a held .lock, no clean-shutdown "
        "marker, a migration in progress, too little space, truncated tails) and write a plan of the segments that "
        "hold legacy data. Changes nothing.",
    )
    p.add_argument("--log-dirs", required=True, help="comma-separated log dirs of one broker (log.dirs)")
    p.add_argument("-o", "--output", required=True, help="plan file to write")
    p.add_argument("--topics", help="only topics whose name fully matches this regex")
    p.add_argument("--target", choices=["v2", "v1"], default="v2", help="target message format (default v2)")
    p.add_argument(
        "--timestamps",
        choices=["mtime", "none"],
        default="mtime",
        help="timestamps for v0 records, which have none: 'mtime' = LogAppendTime at the segment's mtime, so time "
        "retention and timestamp search keep working (default); 'none' = CreateTime -1, exactly what Kafka 4's "
        "cleaner writes. v1 timestamps are always kept.",
    )
    p.add_argument(
        "--leader-epoch",
        type=int,
        help="partition leader epoch of converted batches. Default: per partition, the first epoch of its "
        "leader-epoch-checkpoint, else 0. -1 is what Kafka's cleaner writes, but a follower fetching such batches "
        "fails (LeaderEpochFileCache rejects negative epochs).",
    )
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], help="recompress every batch")
    p.add_argument(
        "--pack-bytes",
        type=int,
        help="group uncompressed legacy messages into v2 batches of up to N bytes (much smaller output). Replicas "
        "converted with different settings then differ in batch boundaries: use the same plan options on every "
        "broker, or leave this off.",
    )
    p.add_argument(
        "--tombstone-flag",
        action="store_true",
        help="KIP-87: mark null-value records with bit 5 of the record attributes",
    )
    p.add_argument("--index-interval-bytes", type=int, default=4096, help="index.interval.bytes (default 4096)")
    p.add_argument(
        "--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES, help="max.message.bytes (default 1048588)"
    )
    p.add_argument(
        "--truncate-tail",
        action="store_true",
        help="drop partial entries a crash left at segment ends (originals are kept)",
    )
    p.add_argument("--allow-unclean", action="store_true", help="plan even without a clean-shutdown marker")
    p.add_argument("--host-map", default="", help="log dir to worker host: /data/a=10.0.0.5,/data/b=10.0.0.6")
    p.add_argument("--task-bytes", type=int, default=128 << 20, help="segment bytes per task (default 128 MiB)")
    p.add_argument("--assume-free-bytes", type=int, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the plan summary as JSON")
    p.set_defaults(handler=run_plan)

    p = sub.add_parser(
        "execute",
        help="convert, verify and swap a plan (resumes after a crash)",
        description="Convert every planned segment into staging, verify each partition from disk, and swap the "
        "verified partitions in under a fence (originals kept as hard links). Running it again after a crash resumes.",
    )
    p.add_argument("--plan", required=True)
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(handler=run_execute)

    p = sub.add_parser("verify", help="re-check the live segments against what execute swapped in")
    p.add_argument("--plan", required=True)
    p.add_argument("--json", action="store_true")
    add_engine_options(p)
    p.set_defaults(handler=run_verify)


def run_plan(args: argparse.Namespace) -> int:
    host_map = dict(item.split("=", 1) for item in args.host_map.split(",") if item)
    options = ConvertOptions(
        target_magic=2 if args.target == "v2" else 1,
        timestamps=args.timestamps,
        compression=args.compression,
        pack_bytes=args.pack_bytes,
        tombstone_flag=args.tombstone_flag,
        index_interval_bytes=args.index_interval_bytes,
        max_message_bytes=args.max_message_bytes,
        truncate_tail=args.truncate_tail,
    )
    request = PlanRequest(
        log_dirs=[d for d in args.log_dirs.split(",") if d],
        options=options,
        topics=args.topics,
        leader_epoch=args.leader_epoch,
        host_map=host_map,
        allow_unclean=args.allow_unclean,
        task_bytes=args.task_bytes,
        free_bytes_cap=args.assume_free_bytes,
    )
    plan = build_plan(request)
    Path(args.output).write_text(json.dumps(plan, indent=2) + "\n")
    est = plan["estimates"]
    text = [f"warning: {w}" for w in plan["warnings"]] + [
        f"plan {plan['plan_id']} written to {args.output}: {est['partitions']} partitions, {est['segments']} segments, "
        f"{est['bytes']} bytes in, about {est['estimated_output_bytes']} bytes out.",
        f"Review it, then: kafka-log-migrate execute --plan {args.output}",
    ]
    emit(
        {"plan_id": plan["plan_id"], "path": args.output, **est, "warnings": plan["warnings"]},
        args.json,
        "\n".join(text),
    )
    return 0


def _with_engine(args: argparse.Namespace, action):
    plan = load_plan(args.plan)
    engine = make_engine(args)
    try:
        return plan, action(plan, engine)
    finally:
        engine.close()


def run_execute(args: argparse.Namespace) -> int:
    plan, report = _with_engine(args, pipeline.execute)
    lines = [
        f"plan {plan['plan_id']}: {report['converted']} segments converted ({report['resumed_segments']} resumed), "
        f"{report['records']} records, {report['bytes_in']} -> {report['bytes_out']} bytes"
    ]
    for s in report.get("swap", []):
        lines.append(f"{s['log_dir']}: swapped {len(s['swapped'])} partitions, failed {len(s['failed'])}")
    for e in report["errors"]:
        lines.append(f"error in {e['stage']} {e['args']}: {e['error']}")
    for v in report.get("verify", []):
        if not v["ok"]:
            lines.append(f"verification failed for {v['partition']}: {'; '.join(v['problems'][:3])}")
    if report["ok"]:
        lines.append(f"Originals are kept. Check with `verify --plan {args.plan}`, then `finalize` or `rollback`.")
    else:
        lines.append(
            f"Not everything was migrated; live data is consistent (each partition wholly old or new). Fix the cause "
            f"and run execute again, or `rollback --plan {args.plan}`."
        )
    emit(report, args.json, "\n".join(lines))
    return 0 if report["ok"] else 1


def run_verify(args: argparse.Namespace) -> int:
    _, report = _with_engine(args, pipeline.verify_live)
    lines = [f"{d['log_dir']}: {'OK' if d['ok'] else 'DIFFERENCES'} ({d['state']})" for d in report["log_dirs"]]
    lines += [f"  {p}" for d in report["log_dirs"] for p in d["problems"][:20]]
    lines += [f"error: {e['error']}" for e in report["errors"]]
    emit(report, args.json, "\n".join(lines))
    if report["errors"]:
        raise MigrateError("verification could not run: " + report["errors"][0]["error"])
    return 0 if report["ok"] else EXIT_VERIFY_FAILED
