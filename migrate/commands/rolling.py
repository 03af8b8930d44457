"""``rolling``: cut a cluster over broker by broker, each behind a gate (migrate/rolling/)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from migrate.codec import to_json
from migrate.commands.engine import add_cluster_options, engine_for, parse_brokers
from migrate.commands.migration import add_plan_options, plan_request_from
from migrate.errors import MigrateError
from migrate.watch.runlog import note, result

if TYPE_CHECKING:
    from migrate.rolling.driver import RollingReport


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rolling",
        help="cut a running cluster over one broker at a time, each behind a gate",
        description="Before any stop: refuse a broker whose leaders write, or may write, v0/v1 batches "
        "(inter.broker.protocol.version below 3.0, read through --bootstrap-server) and every refusal a broker's plan "
        "would meet that can be told while it runs (an earlier migration not finalized). Then for each broker of "
        "--brokers in order: wait for the gate (Kafka's Admin API at "
        "--bootstrap-server: no under-replicated or offline partition, none that stopping this broker would put "
        "under min.insync.replicas, no reassignment in flight; and/or --gate-command), run --stop-command, wait for "
        "its log dirs' .lock to be released and the clean-shutdown marker to appear (refused otherwise), plan and "
        "execute its log dirs on its own Dask worker, run --start-command, and wait for the gate again. Stops at the "
        "first failure, naming the broker and what to run next; never goes on to the next broker after a failure. "
        "After the last broker, every broker's log dirs are scanned through its worker: exit 0 only when the cluster "
        "is v2-only, 4 when a partition holds v0/v1 batches (each named), 1 on any failure.",
    )
    p.add_argument("--brokers", required=True, help="broker ids in the order to cut over, the canary first: 1,2,3")
    p.add_argument("--log-dirs", help="comma-separated log dirs, at the same paths on every broker")
    p.add_argument("--broker-config", help="path of server.properties on each broker host (its log.dirs)")
    p.add_argument(
        "--run-dir", required=True, help="where each broker's plan is written (broker-<id>.plan.json); keep it"
    )
    p.add_argument("--stop-command", required=True, help="stops a broker, e.g. 'systemctl stop kafka@{broker}'")
    p.add_argument("--start-command", required=True, help="starts it again, e.g. 'systemctl start kafka@{broker}'")
    g = p.add_argument_group("gate (at least one)")
    g.add_argument("--bootstrap-server", help="Kafka's bootstrap servers, for the Admin API gate (host:9092,...)")
    g.add_argument(
        "--admin-config",
        help="properties for the admin client: security.protocol, sasl.mechanism, sasl.plain.username, "
        "sasl.plain.password, ssl.cafile, ssl.certfile, ssl.keyfile, ssl.password",
    )
    g.add_argument(
        "--gate-command",
        help="the operator's own gate, run through the shell with {broker} replaced: exit 0 = go, its output shown "
        "(Cruise Control's or Strimzi's checks)",
    )
    g.add_argument("--gate-timeout", type=float, default=600.0, help="seconds to wait for a gate to open (600)")
    g.add_argument("--gate-interval", type=float, default=10.0, help="seconds between two gate checks (10)")
    g.add_argument("--gate-command-timeout", type=float, default=60.0, help="seconds one gate command may take (60)")
    g = p.add_argument_group("waits")
    g.add_argument(
        "--shutdown-timeout",
        type=float,
        default=300.0,
        help="seconds to wait after the stop command for the .lock to be released and the marker written (300)",
    )
    g.add_argument(
        "--command-timeout", type=float, default=600.0, help="seconds a stop or start command may take (600)"
    )
    p.add_argument(
        "--accept-per-broker-timestamps",
        action="store_true",
        help="allow --timestamps mtime (the default of plan): v0 records then get each broker's own segment mtime "
        "as their timestamp, so replicas of the same offsets differ in timestamps while both formats are served",
    )
    p.add_argument("--require-consistent-replicas", action="store_true", help="as execute's")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_plan_options(p, unclean=False)
    g = p.add_argument_group("cluster")
    g.add_argument("--scheduler", required=True, help="the Dask scheduler with one worker per broker host")
    add_cluster_options(g, brokers=False)
    p.set_defaults(handler=run_rolling)


def run_rolling(args: argparse.Namespace) -> int:
    from migrate.rolling.driver import RollingRun, RollingSettings, refuse_unsafe_options
    from migrate.rolling.kafka_admin import AdminApiGate, client_options_from
    from migrate.rolling.operator_gate import CommandGate, Gate

    if not args.log_dirs and not args.broker_config:
        raise SystemExit(_usage("give --log-dirs or --broker-config"))
    if not args.bootstrap_server and not args.gate_command:
        raise SystemExit(
            _usage(
                "a rolling run needs a gate: --bootstrap-server (Kafka's Admin API) and/or --gate-command (yours). "
                "Stopping brokers without one can take partitions offline."
            )
        )
    try:
        request = plan_request_from(args, tuple(args.log_dirs.split(",")) if args.log_dirs else (), check=False)
    except ValueError as exc:
        raise SystemExit(_usage(str(exc))) from None
    refuse_unsafe_options(request.options, args.accept_per_broker_timestamps)
    brokers = parse_brokers(args.brokers)
    if not brokers or len(set(brokers)) != len(brokers):
        raise MigrateError(f"--brokers {args.brokers}: give each broker id once, in the order to cut over")
    gates: list[Gate] = []
    if args.bootstrap_server:
        options = client_options_from(args.admin_config) if args.admin_config else {}
        gates.append(AdminApiGate(args.bootstrap_server, client_options=options))
    if args.gate_command:
        gates.append(CommandGate(args.gate_command, args.gate_command_timeout))
    settings = RollingSettings(
        brokers=brokers,
        request=request,
        stop_command=args.stop_command,
        start_command=args.start_command,
        run_dir=Path(args.run_dir),
        broker_config=args.broker_config,
        gate_timeout_s=args.gate_timeout,
        gate_interval_s=args.gate_interval,
        release_timeout_s=args.shutdown_timeout,
        command_timeout_s=args.command_timeout,
        require_consistent_replicas=args.require_consistent_replicas,
    )
    with engine_for(args, engine="dask") as engine:
        report = RollingRun(engine, settings, gates, say=note).run()
    result(to_json(report), args.json, "\n".join(outcome_lines(report)))
    return outcome_code(report)


EXIT_LEGACY_LEFT = 4  # as scan's: legacy (v0/v1) data is left


def outcome_code(report: RollingReport) -> int:
    if not report.ok:
        return 1
    if report.v2_only:
        return 0
    return EXIT_LEGACY_LEFT if any(s.partitions for s in report.scanned) else 1


def outcome_lines(report: RollingReport) -> list[str]:
    """Per broker, then the last line: v2-only only when every broker's scan says so."""
    lines = [
        f"broker {b.broker}: {'converted' if b.ok else 'FAILED'}" + (f" (plan {b.plan_path})" if b.plan_path else "")
        for b in report.brokers
    ]
    if report.refused:
        lines.append(report.refused)
    if report.not_started:
        lines.append(f"not started: broker(s) {', '.join(map(str, report.not_started))}")
    if not report.ok:
        return lines
    scanned = ", ".join(s.worker for s in report.scanned)
    legacy = [(s.worker, p) for s in report.scanned for p in s.partitions]
    unreadable = [u for s in report.scanned for u in s.unreadable]
    for worker, p in legacy[:50]:
        lines.append(f"  legacy data: {p.partition} in {p.log_dir} on {worker}: {p.legacy_bytes} B of v0/v1 batches")
    if len(legacy) > 50:
        lines.append(f"  ... and {len(legacy) - 50} more partitions (--json lists every one)")
    lines += [f"  not read: {u}" for u in unreadable[:20]]
    after = (
        "Per broker: `kafka-log-migrate verify --plan <run dir>/broker-<id>.plan.json --scheduler ...`; once "
        "satisfied, `finalize` each plan (or `rollback` one, its broker stopped)."
    )
    if report.v2_only:
        lines.append(
            f"Every broker is converted and back, and the cluster is v2-only: the log dirs of {scanned} hold v2 "
            f"batches only. {after}"
        )
    elif legacy:
        names = ", ".join(sorted({p.partition for _, p in legacy})[:10])
        lines.append(
            f"Every broker is converted and back, but the cluster is NOT v2-only: {len(legacy)} partition(s) hold "
            f"v0/v1 batches again ({names}{', ...' if len(legacy) > 10 else ''}), written by leaders that still "
            "write a legacy format and copied by their followers. Raise inter.broker.protocol.version to 3.0 or "
            "higher on every broker (a plain rolling restart), `finalize` each plan of this run, then run `rolling` "
            "again for what is left."
        )
    else:
        lines.append(
            f"Every broker is converted and back, but the cluster is not certified v2-only: a log dir or partition "
            f"of {scanned} could not be read (above). Run `kafka-log-migrate scan` on that broker once it is fixed."
        )
    return lines


def _usage(message: str) -> int:
    note(f"kafka-log-migrate: error: {message}")
    return 2
