"""``prestage``: convert and verify a running broker's closed legacy segments into a staging tree beside its log
dirs, pass after pass, so that the cut-over after a clean stop has only the delta left."""

from __future__ import annotations

import argparse
import dataclasses

from migrate.codec import to_json
from migrate.commands.engine import add_cluster_options
from migrate.commands.options import add_conversion_options, convert_options
from migrate.commands.output import emit, note
from migrate.model.run_state import Stage
from migrate.prestage.cluster import BrokerPrestage, PrestageJob, prestage_broker
from migrate.prestage.controls import DEFAULT_WINDOW_SECONDS, Controls, ControlSettings, parse_rate
from migrate.prestage.passes import PassReport, PrestageReport, PrestageRequest, run_prestage
from migrate.prestage.priority import Priority, take_priority
from migrate.prestage.replicas import DifferenceKind, StagedReplicaCheck, compare_staged
from migrate.units import human_bytes, human_rate, human_seconds, parse_data_bytes

EXIT_USAGE = 2
EXIT_ABORTED = 6  # stopped by the operator's abort file
DEFAULT_RATE = "50MB"
DEFAULT_MIN_FREE = "10%"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prestage",
        help="convert a running broker's closed segments ahead of the cut-over (writes only beside the log dirs)",
        description="While the broker runs, convert and verify every closed segment (never a partition's highest) "
        "that holds v0/v1 batches into a staging tree on the log dir's filesystem, outside the log dir (default "
        "<parent>/.kafka-log-migrate-staging/<log dir name>/), with the same code and options as execute. Nothing "
        "inside a log dir is created, renamed or changed. A source renamed, unlinked, truncated or rewritten while it "
        "is read is not staged; staging whose source is gone (retention, the cleaner) is removed; a later pass stages "
        "what rolled or changed since. Reads and writes are throttled together; a pause file stops all I/O within a "
        "second, an abort file stops the run leaving no partial staged file. The page cache is left as found.",
    )
    p.add_argument(
        "--log-dirs",
        help="comma-separated log dirs of one broker (its log.dirs); with --scheduler, each broker's own, at the same "
        "paths on every broker",
    )
    p.add_argument(
        "--staging-dir",
        help="the staging tree of each log dir, comma-separated in the order of --log-dirs: on the log dir's "
        "filesystem, outside every log dir (default <parent of log dir>/.kafka-log-migrate-staging/<log dir name>, "
        "where plan and execute look)",
    )
    p.add_argument("--passes", type=int, default=1, help="passes at most (default 1); each stages what changed since")
    p.add_argument(
        "--threshold",
        metavar="BYTES",
        help="stop repeating passes once the closed segments left to stage hold at most this much (e.g. 1G): ready "
        "for the cut-over",
    )
    p.add_argument(
        "--rate",
        default=DEFAULT_RATE,
        help=f"bytes per second read and written together, held over every throttle window (default {DEFAULT_RATE}; "
        "0 for no limit)",
    )
    p.add_argument(
        "--throttle-window",
        type=float,
        default=DEFAULT_WINDOW_SECONDS,
        metavar="SECONDS",
        help=f"the window the rate is held over, within 8%% (default {DEFAULT_WINDOW_SECONDS:g})",
    )
    p.add_argument(
        "--rate-file",
        help="a file holding a rate (as --rate: 20MB, 0 for no limit), re-read within a second of each change: "
        "adjust the throttle while the pass runs; until it exists, --rate holds",
    )
    p.add_argument(
        "--min-free",
        default=DEFAULT_MIN_FREE,
        help="free space to leave on each staging filesystem, which the broker writes to: a percentage of the "
        f"filesystem (10%%) or bytes (50G), 0 for none; checked before each segment and while it is written (default "
        f"{DEFAULT_MIN_FREE.replace('%', '%%')})",
    )
    p.add_argument(
        "--priority",
        choices=("low", "idle", "normal"),
        default="low",
        help="low (default): nice 19 and best-effort I/O at its lowest level; idle: nice 19 and idle I/O (disk time "
        "only when the broker wants none; may starve behind a busy broker); normal: as started",
    )
    p.add_argument("--pause-file", help="while this file exists, no I/O (looked at several times a second)")
    p.add_argument(
        "--abort-file",
        help="when this file appears, stop: the segment in progress is discarded, what was staged before stays "
        "(exit 6)",
    )
    g = p.add_argument_group("conversion options (as for plan: staging is used only when plan's options are equal)")
    add_conversion_options(g)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    g = p.add_argument_group(
        "cluster",
        "pre-stage every broker at once from here, on a Dask cluster with one worker per broker host (as for a "
        "cluster plan): each broker's passes run on its own host in a process of their own, with the options above; "
        "then the replicas are compared on the staged outputs before any broker is cut over",
    )
    g.add_argument("--scheduler", help="address of the cluster's scheduler (tls://HOST:8786)")
    g.add_argument("--broker-config", help="path of server.properties on each broker host: its log.dirs are pre-staged")
    g.add_argument("--brokers", help="the broker ids that must answer, e.g. 1,2,3")
    add_cluster_options(g, brokers=False)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if not args.log_dirs and not (args.scheduler and args.broker_config):
        note("kafka-log-migrate: error: give --log-dirs (or, with --scheduler, --broker-config)")
        return EXIT_USAGE
    log_dirs = tuple(args.log_dirs.split(",")) if args.log_dirs else ()
    staging = tuple(args.staging_dir.split(",")) if args.staging_dir else ()
    if any(not d.strip() for d in log_dirs + staging):
        note("kafka-log-migrate: error: --log-dirs or --staging-dir holds an empty path (a doubled or trailing comma?)")
        return EXIT_USAGE
    try:
        threshold = parse_data_bytes(args.threshold) if args.threshold is not None else None
        if args.passes < 1 or args.throttle_window <= 0:
            raise ValueError("--passes and --throttle-window must be positive")
        request = PrestageRequest(
            log_dirs=log_dirs,
            options=convert_options(args),
            staging_dirs=staging,
            topics=args.topics,
            leader_epoch=args.leader_epoch,
            passes=args.passes,
            threshold_bytes=threshold,
        )
        settings = control_settings(args)
        controls = settings.build(on_pause=note)
    except ValueError as exc:
        note(f"kafka-log-migrate: error: {exc}")
        return EXIT_USAGE
    priority = Priority(args.priority)
    if args.scheduler:
        return run_cluster(args, PrestageJob(request, settings, priority, args.broker_config))
    for problem in take_priority(priority):
        note(f"warning: could not lower the {problem}; the throttle still holds")
    report = run_prestage(request, controls, on_pass=lambda p: None if args.json else note(pass_text(p, controls)))
    body = to_json(dataclasses.asdict(report)) | {"window_totals": controls.window_totals(), "ok": report.ok}
    emit(body, args.json, summary_text(report, controls))
    if report.aborted:  # the operator's own stop, not a failure: what was staged before it stays whole
        return EXIT_ABORTED
    return 0 if report.ok else 1


def control_settings(args: argparse.Namespace) -> ControlSettings:
    """The controls the operator set; ``--min-free``: ``10%`` of the filesystem or bytes (``50G``), ``0`` for no
    floor (a full disk then stops the pass)."""
    text = args.min_free.strip()
    fraction: float | None = None
    min_bytes = 0
    if text.endswith("%"):
        fraction = float(text[:-1]) / 100 or None
    else:
        min_bytes = parse_data_bytes(text)
    return ControlSettings(
        rate=parse_rate(args.rate),
        pause_file=args.pause_file,
        abort_file=args.abort_file,
        window_seconds=args.throttle_window,
        rate_file=args.rate_file,
        min_free_fraction=fraction,
        min_free_bytes=min_bytes,
    )


def run_cluster(args: argparse.Namespace, job: PrestageJob) -> int:
    """Every broker's passes on its own worker at once, then their replicas compared on the staged outputs."""
    from migrate.commands.engine import engine_for, parse_brokers
    from migrate.engines import StageCall  # only a cluster run needs the engines

    brokers = parse_brokers(args.brokers or "")
    with engine_for(args, engine="dask") as engine:
        workers = engine.workers(expect=len(brokers))  # type: ignore[attr-defined]
        calls = [StageCall((job, address), host=address) for address in workers]
        results = engine.map(Stage.PRESTAGE, prestage_broker, calls)
    failed = [f"{c.host}: {r.error}" for c, r in zip(calls, results) if not r.ok]
    done = sorted((r.value for r in results if r.ok), key=lambda b: (b.broker_id is None, b.broker_id or 0))
    found = {b.broker_id for b in done}
    failed += [f"broker {b}: no worker answered (start `dask worker` on its host)" for b in brokers if b not in found]
    check = compare_staged({b.broker_id: list(b.digests) for b in done if b.broker_id is not None})
    body = {
        "brokers": [to_json(dataclasses.replace(b, digests=())) for b in done],
        "failed": failed,
        "replicas": to_json(check),
    }
    emit(body, args.json, "\n".join(cluster_text(done, failed, check)))
    ok = not failed and all(b.ok and b.refusal is None for b in done) and not check.diverged
    stopped = [b for b in done if not b.ok]
    if stopped and all(b.aborted and b.refusal is None for b in stopped) and not failed and not check.diverged:
        return EXIT_ABORTED  # the operator's abort file stopped the brokers that did not finish: nothing failed
    return 0 if ok else 1


def cluster_text(done: list[BrokerPrestage], failed: list[str], check: StagedReplicaCheck) -> list[str]:
    lines = []
    for b in done:
        if b.refusal is not None:
            lines.append(f"broker {b.broker_id or '?'} ({b.worker}): REFUSED: {b.refusal}")
            continue
        state = "ready" if b.ready else ("stopped early" if not b.ok else "done")
        lines.append(
            f"broker {b.broker_id} ({b.host}): {state} after {b.passes} pass(es): staged {b.staged} segments "
            f"({human_bytes(b.staged_bytes)}), {b.kept} kept from before; left {human_bytes(b.left_bytes)} in "
            f"closed segments, {human_bytes(b.active_bytes)} in active ones"
        )
        lines += [f"  {p}" for p in (*b.notes, *b.problems)[:20]]
    lines += [f"error: {f}" for f in failed]
    lines.append(
        f"replicas on the staged outputs: {check.compared} staged segments compared with their peers', "
        f"{check.uncompared} not comparable here (their peers staged other segment boundaries, or none yet: execute "
        "compares those after converting)"
    )
    for d in check.differences:
        groups = " vs ".join("+".join(map(str, g)) for g in d.groups)
        where = f"{d.partition} segment {d.base_offset} (offsets {d.first_offset}..{d.last_offset})"
        if d.kind == DifferenceKind.RECORDS:
            lines.append(
                f"DIVERGED: {where}: brokers {groups} hold different records. Find the right copy before any cut-over "
                "(a replica diverged: reassign or re-replicate the partition from its leader)."
            )
        else:
            lines.append(
                f"warning: {where}: brokers {groups} converted the same records with different timestamps (each "
                "replica's own segment mtime under --timestamps mtime): while the cluster serves both formats the "
                "same offsets would carry different timestamps. Pre-stage and plan with --timestamps none, or accept "
                "it knowingly (rolling asks you to)."
            )
    return lines


def pass_text(done: PassReport, controls: Controls) -> str:
    lines = []
    for d in done.log_dirs:
        broker = (
            "no broker holds its .lock"
            if d.lock_holder is None
            else f"the broker holds its .lock (pid {d.lock_holder or 'unknown'})"
        )
        staged = f"{human_bytes(d.staged_source_bytes)} -> {human_bytes(d.staged_bytes)}"
        lines.append(
            f"pass {done.number}: {d.log_dir} ({broker}): staged {d.staged} segments ({staged}), kept {d.kept}, "
            f"already v2 {d.unchanged}, removed {d.removed} whose source is gone; left: {human_bytes(d.left_bytes)} "
            f"in closed segments, {human_bytes(d.active_bytes)} in active segments (converted at the cut-over); "
            f"staging in {d.staging_root}"
        )
        lines += [f"  rejected: {why}" for why in d.rejected[:20]]
        lines += [f"  REFUSED: {why}" for why in d.refused[:20]]
        lines += [f"  left alone: {why}" for why in d.left_alone[:20]]
        if len(d.left_alone) > 20:
            lines.append(f"  left alone: and {len(d.left_alone) - 20} more (--json lists them all)")
    rate = done.io_bytes / done.seconds if done.seconds else 0.0
    lines.append(
        f"pass {done.number}: {human_bytes(done.io_bytes)} read and written in {human_seconds(done.seconds)} "
        f"({human_rate(rate)})"
    )
    return "\n".join(lines)


def summary_text(report: PrestageReport, controls: Controls) -> str:
    last = report.passes[-1] if report.passes else None
    lines = []
    if report.stopped:
        lines.append(f"stopped: {report.stopped}")
    limit = f" (limit {human_bytes(controls.rate * controls.window_seconds)})" if controls.rate else ""
    lines.append(
        f"{len(report.passes)} pass(es); at most {human_bytes(report.max_window_bytes)} read and written in any "
        f"{controls.window_seconds:g} s window{limit}; paused {human_seconds(controls.paused_seconds)}"
    )
    if last is not None:
        state = "not at the threshold" if last.left_bytes else "everything closed is staged"
        state = "ready" if report.ready else "stopped early" if report.stopped else state
        lines.append(f"{state}: {human_bytes(last.left_bytes)} left in closed segments.")
    if any(d.refused for p in report.passes for d in p.log_dirs):
        lines.append(
            "Some segments were refused (above, with file and byte position): plan will refuse them too. Repair or "
            "leave out their partitions (--topics) before the cut-over."
        )
    lines.append(
        "Staged segments are used by the cut-over (stop the broker cleanly, then plan and execute) only where their "
        "sources are unchanged; run prestage again to catch up on what changed."
    )
    return "\n".join(lines)
