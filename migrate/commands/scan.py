"""``scan``: read-only inventory; exits 4 while any legacy data is left."""

from __future__ import annotations

import argparse

from migrate.commands.output import emit
from migrate.scan import scan_log_dirs

EXIT_LEGACY_LEFT = 4


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="inventory log dirs (read-only); certifies partitions v2-only",
        description="Read-only inventory of one broker's log dirs, shaped like kafka-log-dirs --describe JSON, with "
        "bytes and batches per message format. Exits 4 while any legacy (v0/v1) data is left.",
    )
    p.add_argument("--log-dirs", required=True, help="comma-separated log dirs of one broker (log.dirs)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    report = scan_log_dirs([d for d in args.log_dirs.split(",") if d])
    lines = []
    for broker in report["brokers"]:
        for d in broker["logDirs"]:
            lines.append(f"log dir {d['logDir']} (broker {broker['broker']}): {d['error'] or ''}")
            lines += [f"  warning: {w}" for w in d.get("warnings", [])]
            for p in d["partitions"]:
                state = "v2-only" if p["v2Only"] else "LEGACY"
                magics = " ".join(f"v{m}:{b}B" for m, b in sorted(p["bytesByMagic"].items()))
                tail = f" truncated tail at {p['truncatedTail']['position']}" if p["truncatedTail"] else ""
                lines.append(f"  {p['partition']:<40} {state:<8} {magics}{tail}")
    s = report["summary"]
    lines.append(f"{s['partitions']} partitions, {s['legacyPartitions']} with legacy data ({s['legacyBytes']} bytes)")
    emit(report, args.json, "\n".join(lines))
    return 0 if s["v2Only"] else EXIT_LEGACY_LEFT
