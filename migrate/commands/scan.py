"""``scan``: read-only inventory; exits 4 while any legacy data is left."""

from __future__ import annotations

import argparse

from migrate.codec import to_json
from migrate.commands.output import emit, note
from migrate.reports.columns import aligned
from migrate.reports.scan import scan_log_dirs
from migrate.units import human_bytes

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_LEGACY_LEFT = 4


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="inventory log dirs (read-only); certifies partitions v2-only",
        description="Read-only inventory of one broker's log dirs, shaped like kafka-log-dirs --describe JSON, with "
        "bytes and batches per message format. Exits 0 when every partition was read and holds only v2 batches, 4 "
        "while any legacy (v0/v1) data is left, 1 when a log dir or partition could not be read (no certificate then).",
    )
    p.add_argument("--log-dirs", required=True, help="comma-separated log dirs of one broker (log.dirs)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    log_dirs = args.log_dirs.split(",")
    if any(not d.strip() for d in log_dirs):
        note("kafka-log-migrate: error: --log-dirs holds an empty path (a doubled or trailing comma?)")
        return EXIT_USAGE
    report = scan_log_dirs(log_dirs)
    lines = []
    for broker in report.brokers:
        for d in broker.log_dirs:
            who = f" (broker {broker.broker})" if broker.broker is not None else ""
            lines.append(f"log dir {d.log_dir}{who}" + (f": {d.error}" if d.error else ""))
            lines += [f"  warning: {w}" for w in d.warnings]
            lines += aligned(
                [
                    (
                        p.partition,
                        "v2-only" if p.v2_only else "LEGACY",
                        ", ".join(f"v{m} {human_bytes(b)}" for m, b in sorted(p.bytes_by_magic.items())),
                        f"truncated tail at byte position {p.truncated_tail.position}" if p.truncated_tail else "",
                    )
                    for p in d.partitions
                ]
            )
    s = report.summary
    lines.append(f"{s.partitions} partitions, {s.legacy_partitions} with legacy data ({human_bytes(s.legacy_bytes)})")
    unreadable = s.log_dirs_with_errors or s.partitions_with_errors
    if unreadable:
        lines.append("not certified: a log dir or partition above could not be read")
    emit(to_json(report), args.json, "\n".join(lines))
    if unreadable:
        return EXIT_FAILURE
    return 0 if s.v2_only else EXIT_LEGACY_LEFT
