"""``plan``, ``execute`` and ``verify``: the migration itself (generate, execute, verify, as kafka-reassign does)."""

from __future__ import annotations

import argparse
import calendar
import dataclasses
import socket
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from migrate import pipeline
from migrate.codec import to_json
from migrate.commands.engine import (
    accelerator_state,
    add_cluster_options,
    add_engine_options,
    engine_for,
    load_plan_for,
    parse_brokers,
)
from migrate.commands.manifest import plan_manifest_command, run_manifest_verb
from migrate.commands.options import add_conversion_options, convert_options
from migrate.compaction.rules import CompactionRule
from migrate.engines.watched import WatchedEngine
from migrate.errors import MigrateError, RefusedError
from migrate.model.cluster_manifest import Verb
from migrate.model.plan_columns import columns_of, plan_id_of, staged_totals
from migrate.model.plan_tree import (
    DEFAULT_RANGE_BYTES,
    DEFAULT_TASK_SEGMENTS,
    MIN_TASKS_PER_LOG_DIR,
    SMALL_TASK_SEGMENTS,
    ExchangeMethod,
    LogDirPlan,
    Plan,
    PlanForm,
)
from migrate.model.run_state import LogDirPhase, PartitionState, SegmentState
from migrate.model.stage_reports import ExecuteReport, LiveCheck
from migrate.planning.plan import build_plan, form_for, write_plan
from migrate.planning.request import PlanRequest
from migrate.reports.columns import aligned
from migrate.units import human_bytes, human_seconds, parse_duration_ms, parse_memory_bytes
from migrate.watch.runlog import Progress, note, output, result

EXIT_VERIFY_FAILED = 3
EXIT_BROKER_CHANGED = 5
LARGE_JSON_PLAN_SEGMENTS = 100_000  # above this, plan suggests the columnar form


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="write a reviewable plan (changes nothing)",
        description="Inspect the log dirs of a stopped broker, refuse what is unsafe (a held .lock, no clean-shutdown "
        "marker, a migration in progress, stray broker temp files, checksum errors, damage, torn tails, too little "
        "space on any filesystem) and write a plan of the segments that hold legacy data. Changes nothing. With "
        "--check it also decompresses and checks every entry, reporting everything execute would refuse.",
    )
    p.add_argument(
        "--log-dirs",
        help="comma-separated log dirs of one broker (its log.dirs); with --scheduler, each broker's own, at the same "
        "paths on every broker",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        help="the plan file to write: *.parquet is columnar (a broker's million segments, about 20 bytes each, "
        "loaded in seconds); any other name is JSON, to read and diff",
    )
    p.add_argument("--check", action="store_true", help="read every entry deeply (decompress, check inner CRCs)")
    p.add_argument(
        "--manifest",
        action="store_true",
        help="with --scheduler: each broker keeps its part of the plan on its own host (columnar, beside its log "
        "dirs) and -o gets only a manifest of the parts; execute, status, verify, rollback and finalize given the "
        "manifest run each broker's part on its broker (a cluster of millions of segments)",
    )
    add_plan_options(p)
    p.add_argument("--host-map", default="", help="log dir to Dask worker host: /data/a=10.0.0.5,/data/b=10.0.0.6")
    p.add_argument(
        "--swap-method",
        choices=("auto", "exchange", "renames"),
        default="auto",
        help="how each partition's converted directory replaces its original: exchange (one atomic renameat2 "
        "RENAME_EXCHANGE), renames (two renames under the fence, for filesystems without it), or auto (default): "
        "exchange where the log dir's filesystem is one known to do it (ext4, xfs, btrfs, f2fs, tmpfs), else renames; "
        "execute tries the exchange and falls back to renames, saying so, where the filesystem refuses it",
    )
    p.add_argument("--json", action="store_true", help="print the plan summary as JSON")
    g = p.add_argument_group(
        "cut-over after pre-staging",
        "a segment that `prestage` converted while the broker ran, whose source is provably the file it read (device, "
        "inode, size, mtime, ctime and its first and last bytes) and whose staged files are as written, is planned "
        "from its staged conversion without reading it; execute takes the staged files instead of converting. "
        "Anything else is converted in the window, as a cold run would.",
    )
    g.add_argument(
        "--staging-dir",
        help="the staging tree of each log dir, comma-separated in the order of --log-dirs, as given to prestage "
        "(default: <parent of log dir>/.kafka-log-migrate-staging/<log dir name>, used when it exists)",
    )
    g.add_argument(
        "--no-staged", action="store_true", help="plan cold: read and convert every segment, ignore what was staged"
    )
    g.add_argument(
        "--reverify-staged",
        action="store_true",
        help="execute re-reads every staged file and verifies it against the digests recorded when it was staged "
        "before taking it (a full read of the staged data: the window grows with it). By default a staged file is "
        "taken when its inode, size, mtime and ctime are as recorded after its fsync, which no write can keep.",
    )
    g = p.add_argument_group(
        "cluster",
        "plan every broker at once on a Dask cluster with one worker per broker host: each worker plans its own "
        "host's log dirs",
    )
    g.add_argument("--scheduler", help="address of the cluster's scheduler (tls://HOST:8786)")
    g.add_argument(
        "--broker-config",
        help="path of server.properties on each broker host; its log.dirs are planned (instead of --log-dirs)",
    )
    g.add_argument(
        "--brokers", help="the broker ids the cluster must have, e.g. 1,2,3: a broker without a worker is refused"
    )
    add_cluster_options(g, brokers=False)
    p.set_defaults(handler=run_plan)

    p = sub.add_parser(
        "execute",
        help="convert, verify and swap a plan (resumes after a crash)",
        description="Convert every planned segment into staging and verify it from disk, then swap each ready "
        "partition in under a fence (originals kept as hard links). A refused segment fails its own partition only. "
        "Exits 0 only when every planned partition is migrated; running it again continues with what remains, "
        "after a crash too. Progress (bytes done of the total, MB/s, ETA, failures) is a line rewritten on a "
        "terminal and a line every few seconds otherwise; every message goes to a run log beside the plan "
        "(<plan>.logs/), and the run ends with its summary and the next steps.",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_engine_options(p, full=True)
    p.add_argument(
        "--require-consistent-replicas",
        action="store_true",
        help="on a cluster plan, do not swap a partition whose replicas hold different records on different brokers "
        "(default: report them and swap anyway)",
    )
    p.set_defaults(handler=run_execute, run_log=True)

    p = sub.add_parser(
        "verify",
        help="re-check the live segments against what execute swapped in, and tell what the broker did since",
        description="Judge every migrated partition's files against what its swap put there, as Kafka's own "
        "recovery would: a converted segment whose bytes are as swapped in (whatever its mtime: a broker start "
        "resizes and trims its active indexes) is read back whole (the source's records, every CRC, the indexes "
        "Kafka's recovery would build); what the broker did since (appended, rolled, a follower's truncation, the "
        "cleaner's merges, retention) is listed apart; converted bytes changed otherwise are differences. Exits 0 "
        "when every converted segment is exact and untouched, 5 when it is exact and the broker has written since, "
        "3 on differences, 1 while planned partitions are not migrated. Lists every file (paged on a terminal, "
        "whole with --json). Changes nothing; keeps a run log beside the plan.",
    )
    p.add_argument("--plan", required=True, help="the plan file written by `plan`")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_engine_options(p, full=True)
    p.set_defaults(handler=run_verify, run_log=True)


def add_plan_options(p: argparse.ArgumentParser, unclean: bool = True) -> None:
    """How segments are planned and converted: the options `plan`, `rehearse` and `rolling` share. ``unclean``
    False: no --allow-unclean (rolling refuses a broker that did not stop cleanly, whatever it is given)."""
    g = p.add_argument_group("plan options")
    add_conversion_options(g)
    g.add_argument(
        "--truncate-tail",
        action="store_true",
        help="drop a torn last entry from a partition's last segment (listed in the plan; the original is kept "
        "until finalize). Damage anywhere else is always refused.",
    )
    g.add_argument(
        "--compact",
        action="append",
        default=[],
        metavar="TOPIC_REGEX=offset|timestamp|header:NAME",
        help="compact the partitions of topics whose whole name matches during their migration, keeping per key the "
        "record with the highest offset, timestamp (ties: offset) or big-endian 8-byte value of header NAME (ties: "
        "offset; a record with the header beats one without) (KIP-280); the record at the log end always stays. "
        "Every partition of such a topic is planned, v2-only ones too, and read in full by `plan`, which shows the "
        "records and bytes kept. Repeatable: the first matching rule applies.",
    )
    g.add_argument(
        "--drop-tombstones-older-than",
        metavar="DURATION",
        help="with --compact: drop deletes (null value, or the KIP-87 flag) whose timestamp (a v0 record's: its "
        "segment's mtime) is older than DURATION (7d, 36h, 90m) before the partition's newest; default: keep them "
        "all, as the cleaner does until delete.retention.ms",
    )
    g.add_argument(
        "--compact-memory-limit",
        metavar="BYTES",
        help="with --compact: refuse a partition whose pass one needs more than this (512M, 2G): 24 bytes per "
        "distinct key for offset, 32 for timestamp, 33 for header, up to 9 more with --drop-tombstones-older-than",
    )
    if unclean:
        g.add_argument("--allow-unclean", action="store_true", help="plan even without a clean-shutdown marker")
    else:
        p.set_defaults(allow_unclean=False)
    g.add_argument("--task-bytes", type=int, default=64 << 20, help="segment bytes per engine task (default 64 MiB)")
    g.add_argument(
        "--task-segments",
        type=int,
        default=DEFAULT_TASK_SEGMENTS,
        help=f"segments per engine task at most (default {DEFAULT_TASK_SEGMENTS}; a smaller log dir gets as many as "
        f"make {MIN_TASKS_PER_LOG_DIR} tasks, at least {SMALL_TASK_SEGMENTS})",
    )
    g.add_argument(
        "--range-bytes",
        type=int,
        default=DEFAULT_RANGE_BYTES,
        help="a segment larger than this is converted as ranges of about this size on several workers at once and "
        "joined in order, byte-identical to a one-worker conversion (default 64 MiB; 0: never split). Not used on "
        "compacted partitions or with --pack-bytes. For uncompressed legacy data the plan records where each range's "
        "bytes go, and ranges write straight into the joined file.",
    )
    g.add_argument("--assume-free-bytes", type=int, help=argparse.SUPPRESS)


def plan_request_from(args: argparse.Namespace, log_dirs: tuple[str, ...], check: bool) -> PlanRequest:
    """The plan options of ``args`` as a PlanRequest; a bad value raises ValueError with the operator's message."""
    options = dataclasses.replace(convert_options(args), truncate_tail=args.truncate_tail)
    if args.range_bytes < 0:
        raise ValueError(f"--range-bytes must be 0 (never split) or a positive size, not {args.range_bytes}")
    return PlanRequest(
        log_dirs=log_dirs,
        options=options,
        topics=args.topics,
        leader_epoch=args.leader_epoch,
        host_map=tuple(tuple(item.split("=", 1)) for item in getattr(args, "host_map", "").split(",") if item),
        allow_unclean=args.allow_unclean,
        check=check,
        task_bytes=args.task_bytes,
        task_segments=args.task_segments,
        free_bytes_cap=args.assume_free_bytes,
        compact=tuple(CompactionRule.parse(text) for text in args.compact),
        drop_tombstones_older_than_ms=(
            parse_duration_ms(args.drop_tombstones_older_than) if args.drop_tombstones_older_than is not None else None
        ),
        compact_memory_limit=parse_memory_bytes(args.compact_memory_limit)
        if args.compact_memory_limit is not None
        else None,
        range_bytes=args.range_bytes or None,
        staging_dirs=_staging_dirs(log_dirs, getattr(args, "staging_dir", None)),
        use_staged=not getattr(args, "no_staged", False),
        reverify_staged=getattr(args, "reverify_staged", False),
        swap_method=None if getattr(args, "swap_method", "auto") == "auto" else ExchangeMethod(args.swap_method),
    )


def _staging_dirs(log_dirs: tuple[str, ...], given: str | None) -> tuple[tuple[str, str], ...]:
    if not given:
        return ()
    staging = tuple(given.split(","))
    if len(staging) != len(log_dirs) or any(not d.strip() for d in staging):
        raise ValueError(f"--staging-dir names {len(staging)} dirs for {len(log_dirs)} log dirs: give one per log dir")
    return tuple(zip(log_dirs, staging))


def run_plan(args: argparse.Namespace) -> int:
    if not args.log_dirs and not (args.scheduler and args.broker_config):
        raise SystemExit(_usage("give --log-dirs (or, with --scheduler, --broker-config)"))
    log_dirs = args.log_dirs.split(",") if args.log_dirs else []
    if any(not d.strip() for d in log_dirs):
        raise SystemExit(_usage("--log-dirs holds an empty path (a doubled or trailing comma?)"))
    try:
        request = plan_request_from(args, tuple(log_dirs), check=args.check)
    except ValueError as exc:
        raise SystemExit(_usage(str(exc))) from None
    if args.manifest:
        if not args.scheduler:
            raise SystemExit(_usage("--manifest keeps each broker's part on its broker: give --scheduler"))
        return plan_manifest_command(args, request)
    request = dataclasses.replace(request, form=form_for(args.output))
    try:
        plan = _plan_cluster(args, request) if args.scheduler else build_plan(request)
    except RefusedError as exc:
        if args.json:  # the refusals as records on stdout; the message (stderr) and exit code as without --json
            result({"refused": [to_json(p) for p in exc.problems]}, True, "")
        raise
    if plan.form != (PlanForm.COLUMNAR if request.form == PlanForm.COLUMNAR else None):  # a cluster plan's merge
        plan = dataclasses.replace(plan, form=request.form if request.form == PlanForm.COLUMNAR else None)
        plan = dataclasses.replace(plan, plan_id=plan_id_of(plan))
    write_plan(plan, args.output)
    est = plan.estimates
    drops = (
        []
        if not columns_of(plan).extra  # a torn tail is a row's rare field: no row has one
        else [
            f"will drop {s.tail_drop.bytes} bytes of a torn entry at byte position {s.tail_drop.position} of "
            f"{p.dir}/{s.file} (after offset {s.tail_drop.last_kept_offset})"
            for d in plan.log_dirs
            for p in d.partitions
            for s in p.segments
            if s.tail_drop
        ]
    )
    text = [f"warning: {w}" for w in plan.warnings] + [f"note: {x}" for x in drops]
    staged, staged_bytes = staged_totals(plan)
    if staged:
        text.append(
            f"cut-over: {staged} segments ({human_bytes(staged_bytes)}) are planned from their "
            f"pre-staged conversions; {est.segments - staged} are converted in the window."
        )
    text += [
        f"plan {plan.plan_id} written to {args.output}: {est.partitions} partitions, {est.segments} segments, "
        f"{human_bytes(est.bytes)} in, about {human_bytes(est.estimated_output_bytes)} out.",
        f"Review it, then: kafka-log-migrate execute --plan {args.output}",
    ]
    if request.form == PlanForm.JSON and est.segments > LARGE_JSON_PLAN_SEGMENTS:
        text.append(
            f"note: a JSON plan of {est.segments} segments is slow to load and large in memory; "
            f"`-o {Path(args.output).with_suffix('.parquet')}` writes it columnar (about 20 bytes a segment)."
        )
    summary = {"plan_id": plan.plan_id, "path": args.output, **to_json(est), "warnings": list(plan.warnings)}
    result(summary, args.json, "\n".join(text))
    return 0


def _plan_cluster(args: argparse.Namespace, request: PlanRequest) -> Plan:
    from migrate.planning.cluster import plan_cluster

    with engine_for(args, engine="dask") as engine:
        return plan_cluster(engine, request, args.broker_config, parse_brokers(args.brokers or ""))


def _usage(message: str) -> int:
    note(f"kafka-log-migrate: error: {message}")
    return 2


def run_execute(args: argparse.Namespace) -> int:
    from migrate.reports import run_report as report  # the summary's table (pyarrow): not for the other verbs here

    if (code := run_manifest_verb(args, Verb.EXECUTE)) is not None:
        return code
    plan = load_plan_for(args)
    plan.refuse_if_planned_elsewhere(socket.gethostname())  # before an engine starts (pipeline.execute checks too)
    progress = Progress(plan, output(), tty=sys.stderr.isatty())
    accelerator = accelerator_state()
    # the report is written before the engine closes: the run is over, and what closing a cluster costs (or a Ctrl-C
    # while it does) must not hold back nor replace the truth about the partitions
    with engine_for(
        args,
        on_segment=progress.segment,
        plan=plan,
        interrupted_close="kafka-log-migrate: interrupted while closing the Dask cluster; the run above is complete, "
        "nothing to resume",
    ) as engine:
        watched = WatchedEngine(engine, progress)
        # the summary of this host's log dirs is read while the last status runs (both only read the state: at
        # 10^6 segments each takes seconds, one core each)
        with progress, ThreadPoolExecutor(1, thread_name_prefix="summary") as pool:
            ahead: list[Future[dict[str, report.SummaryPart | None]]] = []
            outcome = pipeline.execute(
                plan,
                watched,
                accelerator=accelerator,
                require_consistent_replicas=args.require_consistent_replicas,
                replica_peers=_replica_peers(args, plan),
                on_swapped=lambda: ahead.append(pool.submit(report.parts_here, plan)),
            )
            read = ahead[0].result() if ahead else None
        summary = report.run_summary(plan, watched, args.plan, read)
        body = to_json(outcome)
        if summary is not None:
            body["summary"] = report.summary_json(summary)
        lines = report.summary_lines(summary, outcome.cutover) if summary else []
        result(body, args.json, execute_text(outcome, args.plan, lines, planned_at=_planned_at(plan)))
    return 0 if outcome.ok else 1


def _replica_peers(args: argparse.Namespace, plan: Plan) -> tuple[LogDirPlan, ...]:
    """With --brokers: the cluster plan's other brokers' log dirs, whose replicas this run compares with its own
    (read only, through their workers): a canary migrated alone is compared when the others run."""
    if not getattr(args, "brokers", None):
        return ()
    from migrate.planning.plan import load_plan

    ours = {d.key for d in plan.log_dirs}
    return tuple(d for d in load_plan(args.plan).log_dirs if d.key not in ours)


def _planned_at(plan: Plan) -> float | None:
    """When the plan was written (its ``created``, to the second), seconds since 1970."""
    try:
        return calendar.timegm(time.strptime(plan.created, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None


def execute_text(
    report_: ExecuteReport, plan_path: str, summary_lines: list[str] | None = None, planned_at: float | None = None
) -> str:
    t = report_.totals
    growth = f" ({(t.bytes_out - t.bytes_in) / t.bytes_in:+.0%})" if t.bytes_in else ""
    # a skipped segment was done by an earlier run, or left because its partition failed or the run stopped: those
    # left are the ones still planned after the run
    left = sum(p.segments.get(SegmentState.PLANNED.value, 0) for d in report_.log_dirs for p in d.partitions)
    earlier = max(0, t.skipped - left)
    c = report_.cutover
    # a taken segment was converted and verified by a pre-stage pass while the broker ran, not by this run
    counts = (
        [
            f"{c.window_segments} segments converted and verified in the window, "
            f"{c.staged_segments} taken from pre-staging"
        ]
        if c is not None
        else [f"{t.verified} segments converted and verified"]
    )
    counts += [f"{earlier} done by an earlier run"] if earlier else []
    counts += [f"{left} not attempted (their partition failed or the run stopped)"] if left else []
    lines = [
        f"plan {report_.plan_id}: {', '.join(counts)}, {t.refused} refused, {t.failed} failed; {t.records} records, "
        f"{human_bytes(t.bytes_in)} -> {human_bytes(t.bytes_out)}{growth}"
    ]
    if report_.accelerator and report_.accelerator != "active":
        lines.append(
            f"warning: the C accelerator is not running ({report_.accelerator}); conversion is several times slower"
        )
    lines += [f"the state was checked against the files and corrected: {r}" for r in report_.reconciled]
    for d in report_.log_dirs:
        migrated = sum(1 for p in d.partitions if p.state.value == "migrated")
        lines.append(
            f"{d.log_dir}: {migrated} of {len(d.partitions)} partitions migrated; "
            f"fence {'UP' if d.fence_up else 'down'}"
        )
        lines += aligned(
            [
                (p.state.value.upper(), p.partition + (f": {p.problem.message}" if p.problem else ""))
                for p in d.unmigrated[:50]
            ]
        )
        if len(d.unmigrated) > 50:
            lines.append(f"  ... and {len(d.unmigrated) - 50} more (`status --plan {plan_path}` lists them all)")
    for e in report_.errors:
        lines.append(f"error in {e.stage} of {e.log_dir}: {e.message}")
    for div in report_.divergent_replicas:
        lines.append(
            f"warning: replicas of {div.partition} differ across brokers {', '.join(map(str, div.brokers))}: first "
            f"in offsets {div.first_offset}..{div.last_offset} (digests: "
            + ", ".join(f"broker {b} {h[:12]}" for b, h in div.digests.items())
            + ")"
        )
    for u in report_.unchecked_replicas:
        lines.append(
            f"note: replicas of {u.partition} on broker(s) {', '.join(map(str, u.brokers))} were not compared with "
            f"this run's: {u.reason}. The run of those brokers compares theirs with this one's (execute --brokers "
            "... --require-consistent-replicas fails a partition whose replicas differ)."
        )
    lines += cutover_lines(report_, planned_at)
    lines += summary_lines or []
    mixed = [p.partition for d in report_.log_dirs for p in d.partitions if p.state.mixed]
    report_cmd = f"`kafka-log-migrate report --plan {plan_path}` writes the Parquet table and HTML report of the run"
    if report_.ok:
        lines += [
            "Every planned partition is migrated; the originals are kept. Next:",
            f"  1. check the live data: kafka-log-migrate verify --plan {plan_path}",
            "  2. start the broker and watch it (clients, replication, retention)",
            f"  3. once satisfied, delete the originals: kafka-log-migrate finalize --plan {plan_path}",
            f"     (or put them back: kafka-log-migrate rollback --plan {plan_path})",
            f"  {report_cmd}.",
        ]
    elif mixed:
        lines.append(
            f"{len(mixed)} partition(s) are mid-swap, so the fence stays up and no broker can start. Fix the cause "
            f"above, then run `execute --plan {plan_path}` again to finish, or `rollback --plan {plan_path}`."
        )
    else:
        unmigrated = len(report_.unmigrated)
        swapped = any(p.state == PartitionState.MIGRATED for d in report_.log_dirs for p in d.partitions)
        what = [f"{unmigrated} planned partition(s)"] if unmigrated else []
        what += ["the log dirs with errors above"] if report_.errors else []
        undo = (
            f", or `rollback --plan {plan_path}` to put back the partitions it migrated"
            if swapped
            else " (no partition was swapped: the log dirs hold their originals, nothing to roll back)"
        )
        lines.append(
            f"Not migrated: {' and '.join(what) or 'nothing'}. Every partition is wholly old or wholly new. Fix the "
            f"causes above and run `execute --plan {plan_path}` again (it continues with what remains){undo}. "
            f"{report_cmd}."
        )
    return "\n".join(lines)


def cutover_lines(report_: ExecuteReport, planned_at: float | None = None) -> list[str]:
    """The window of a cut-over run, beside a cold run of the same data. ``planned_at``: when the plan was written,
    which tells the operator's own time between the broker's stop and ``plan`` apart from the tool's."""
    c = report_.cutover
    if c is None:
        return []
    lines = [
        f"cut-over: {c.staged_segments} segments ({human_bytes(c.staged_bytes)}) taken from pre-staging, "
        f"{c.window_segments} ({human_bytes(c.window_bytes)}) converted in the window",
    ]
    if c.window_seconds is not None:
        before_plan = ""
        if planned_at is not None and c.stopped_at is not None and planned_at >= c.stopped_at:
            gap = min(planned_at - c.stopped_at, c.window_seconds)
            before_plan = (
                f", of which about {human_seconds(gap)} passed before `plan` wrote the plan (the stop to the plan, "
                "and the plan's own reading; the review until execute comes after)"
            )
        lines.append(
            f"  window since the broker stopped: {human_seconds(c.window_seconds)}{before_plan}; this run: checks "
            f"{human_seconds(c.checks_seconds)}, delta conversion {human_seconds(c.delta_seconds)}, swap "
            f"{human_seconds(c.swap_seconds)}; these stages without pre-staging: about "
            f"{human_seconds(c.cold_seconds)} (what was taken, at the lower of its pre-stage passes' measured "
            "conversion and this window's rate; a cold plan's read of every segment comes on top)"
        )
    lines += [f"  converted anew instead of taken: {f}" for f in c.fallbacks[:20]]
    if len(c.fallbacks) > 20:
        lines.append(f"  ... and {len(c.fallbacks) - 20} more")
    return lines


def verify_lines(c: LiveCheck, plan_path: str = "PLAN") -> list[str]:
    """One log dir's verify for an operator: its verdict first, then every file behind it, then what to do."""
    if c.problems:
        verdict = f"DIFFERENCES: {len(c.problems)} converted file(s) are not what was swapped in"
    elif c.by_broker:
        verdict = (
            f"TAKEN OVER: the converted data that is still there is exact, and the broker has written since the swap "
            f"({len(c.by_broker)} file(s) appended, rolled, truncated, cleaned or deleted)"
        )
    else:
        verdict = "OK: every converted segment is exact"
    lines = [
        f"{c.log_dir}: {verdict}; {c.checked_segments} converted segments read back whole; the log dir is "
        f"{c.phase.description}"
    ]
    lines += [f"  differs: {p}" for p in c.problems]
    lines += [f"  by the broker: {p}" for p in c.by_broker]
    if c.metadata_only:
        lines.append(
            f"  same bytes, another mtime or inode (a broker start resizes and trims its active indexes): "
            f"{len(c.metadata_only)} file(s), e.g. {c.metadata_only[0]}"
        )
    if c.unmigrated:
        lines.append(f"  {len(c.unmigrated)} planned partitions are not migrated, e.g. {c.unmigrated[0]}")
    if c.history and c.phase.value in ("finalized", "rolled-back"):
        lines.append(f"  history: {c.history[-1]}")
    if c.problems and c.phase in (LogDirPhase.EXECUTING, LogDirPhase.MIGRATED):
        lines.append(
            "  next: the originals are kept until finalize: find what wrote to these files (stop the broker), then "
            f"`kafka-log-migrate rollback --plan {plan_path}` puts every original back (a damaged converted file "
            "does not block it); finalize refuses while this verify stands"
        )
    elif c.problems and c.phase == LogDirPhase.FINALIZED:
        lines.append("  next: the originals were deleted by finalize: restore the partitions above from a replica")
    return lines


def run_verify(args: argparse.Namespace) -> int:
    if (code := run_manifest_verb(args, Verb.VERIFY)) is not None:
        return code
    plan = load_plan_for(args)
    with engine_for(args, plan=plan) as engine:
        report = pipeline.verify_live(plan, WatchedEngine(engine), args.plan)
    lines = []
    for c in report.log_dirs:
        lines += verify_lines(c, args.plan)
    lines += [f"error: {e.message}" for e in report.errors]
    result(to_json(report), args.json, "\n".join(lines), page=True)
    if report.errors:
        raise MigrateError("verification could not run: " + report.errors[0].message)
    if any(c.problems for c in report.log_dirs):
        return EXIT_VERIFY_FAILED
    if any(c.by_broker for c in report.log_dirs):
        return EXIT_BROKER_CHANGED
    return 0 if report.ok else 1
