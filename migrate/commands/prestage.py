"""``prestage``: convert and verify a running broker's closed legacy segments into a staging tree beside its log
dirs, pass after pass, so that the cut-over after a clean stop has only the delta left."""

from __future__ import annotations

import argparse
import dataclasses

from migrate.codec import to_json
from migrate.commands.options import add_conversion_options, convert_options
from migrate.commands.output import emit, note
from migrate.prestage.controls import DEFAULT_WINDOW_SECONDS, Controls, SpaceFloor, parse_rate
from migrate.prestage.passes import PassReport, PrestageReport, PrestageRequest, run_prestage
from migrate.prestage.priority import IoClass, lower_priority
from migrate.units import human_bytes, parse_data_bytes

EXIT_USAGE = 2
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
    p.add_argument("--log-dirs", required=True, help="comma-separated log dirs of one broker (its log.dirs)")
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
    p.add_argument("--abort-file", help="when this file appears, stop: the segment in progress is discarded")
    g = p.add_argument_group("conversion options (as for plan: staging is used only when plan's options are equal)")
    add_conversion_options(g)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    log_dirs = tuple(args.log_dirs.split(","))
    staging = tuple(args.staging_dir.split(",")) if args.staging_dir else ()
    if any(not d.strip() for d in log_dirs + staging):
        note("kafka-log-migrate: error: --log-dirs or --staging-dir holds an empty path (a doubled or trailing comma?)")
        return EXIT_USAGE
    try:
        rate = parse_rate(args.rate)
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
        controls = Controls(
            rate,
            args.pause_file,
            args.abort_file,
            args.throttle_window,
            on_pause=note,
            rate_file=args.rate_file,
            space_floor=parse_min_free(args.min_free),
        )
    except ValueError as exc:
        note(f"kafka-log-migrate: error: {exc}")
        return EXIT_USAGE
    if args.priority != "normal":
        io_class = IoClass.IDLE if args.priority == "idle" else IoClass.BEST_EFFORT
        for problem in lower_priority(io_class):
            note(f"warning: could not lower the {problem}; the throttle still holds")
    report = run_prestage(request, controls, on_pass=lambda p: None if args.json else note(pass_text(p, controls)))
    body = to_json(dataclasses.asdict(report)) | {"window_totals": controls.window_totals(), "ok": report.ok}
    emit(body, args.json, summary_text(report, controls))
    return 0 if report.ok else 1


def parse_min_free(text: str) -> SpaceFloor | None:
    """``10%`` of the filesystem or bytes (``50G``); ``0``: no floor, a full disk stops the pass instead."""
    text = text.strip()
    if text in ("0", "0%"):
        return None
    if text.endswith("%"):
        return SpaceFloor(fraction=float(text[:-1]) / 100)
    return SpaceFloor(fraction=0.0, min_bytes=parse_data_bytes(text))


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
    rate = done.io_bytes / done.seconds if done.seconds else 0.0
    lines.append(
        f"pass {done.number}: {human_bytes(done.io_bytes)} read and written in {done.seconds:.1f} s "
        f"({human_bytes(rate)}/s)"
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
        f"{controls.window_seconds:g} s window{limit}; paused {controls.paused_seconds:.1f} s"
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
