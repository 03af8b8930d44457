"""``rehearse``: the canary-broker rehearsal (fingerprint, plan --check, execute, verify, rollback, compare), timed,
with a projection of the cluster's maintenance window. The logic lives in ``migrate.rehearse`` (the steps and their
table: ``migrate.rehearse.driver``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from migrate.codec import to_json
from migrate.commands.engine import add_engine_options, make_engine
from migrate.commands.migration import add_plan_options, plan_request_from
from migrate.commands.output import emit, note
from migrate.consumers.table import rows
from migrate.engines import Engine
from migrate.rehearse import driver as rehearse
from migrate.rehearse.projection import parse_cluster_bytes
from migrate.rehearse.readers import DEFAULT_ORACLE
from migrate.rehearse.records import BrokerBytes, RehearsalConfig, RehearsalReport
from migrate.rehearse.report import RehearsalPaths
from migrate.reports.columns import aligned
from migrate.units import human_bytes, human_rate, human_seconds, parse_data_bytes

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

DESCRIPTION = """\
Rehearse the migration on one (canary) broker, as KIP-32's upgrade plan does before a whole cluster: fingerprint
every file under the log dirs (path, size, mtime, mode, inode, sha256; directories too), `plan --check` (every entry
read, every CRC checked), `execute`, a full verify (our verifier, an independent scan, Apache Kafka's own reader
through the oracle when Java is there, and kafka-python), `rollback`, and a second fingerprint that must equal the
first exactly. Every step is timed; the report (JSON, -o) projects the maintenance window of every broker and of the
cluster from the measured throughput.

With --clients, the consumers installed on this host (confluent-kafka with its librdkafka, kafka-python, aiokafka, and
Apache Kafka's Java client from --kafka-home) read the data before the conversion and after it, served read-only on
loopback the way a broker serves it (`kafka-log-migrate serve`), every record compared with Kafka's own reader; a
consumer that loses or alters a record after the conversion fails the rehearsal.

The broker must be stopped cleanly, as for a migration. --on-copy DIR rehearses on a copy of the log dirs instead
(segment files hard-linked where the filesystem allows, else reflinked, else copied; the broker's small files always
copied), so the canary's live files are never renamed; keep the canary stopped until the rehearsal ends.
"""

EPILOG = """\
exit codes: 0 every step passed and the rollback was byte-identical; 1 a step failed (the first failing step is
named, and the report says whether the data is back as it was); 2 usage error; 130 interrupted (Ctrl-C: run
`rehearse --resume -o REPORT` to finish, or `rollback --plan PLAN`).

examples:
  kafka-log-migrate rehearse --log-dirs /data/kafka -o rehearsal.json --cluster-bytes 1:120G,2:118G,3:121G
  kafka-log-migrate rehearse --log-dirs /data/kafka --on-copy /data/rehearsal -o rehearsal.json \\
      --broker-bytes 120G --brokers 12
  kafka-log-migrate rehearse --log-dirs /data/kafka --on-copy /data/rehearsal -o rehearsal.json \\
      --clients --kafka-home /opt/kafka --client-python /srv/orders-app/venv/bin/python
  kafka-log-migrate rehearse --resume -o rehearsal.json        # after a crash or Ctrl-C
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rehearse",
        help="rehearse on one broker: migrate, verify, roll back, prove every file identical; time every step",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--log-dirs", help="comma-separated log dirs of the canary broker (its log.dirs)")
    p.add_argument(
        "-o",
        "--output",
        default="rehearsal.json",
        help="the JSON report (default rehearsal.json); its state (.state.json) and plan (.plan.json) go beside it, "
        "outside the log dirs",
    )
    p.add_argument(
        "--on-copy",
        metavar="DIR",
        help="rehearse on a copy made in DIR (new or empty; on the log dirs' filesystem, so segments are hard links)",
    )
    p.add_argument("--resume", action="store_true", help="finish the rehearsal recorded beside -o (after a crash)")
    p.add_argument(
        "--force",
        action="store_true",
        help="let the rollback put the originals back over live files changed after the swap (their writes are lost)",
    )
    p.add_argument(
        "--oracle",
        default=str(DEFAULT_ORACLE),
        help="Apache Kafka's reader (shared/oracle/oracle; default: next to this checkout); 'none' to skip",
    )
    p.add_argument(
        "--independent-reader",
        choices=["kafka-python", "none"],
        default="kafka-python",
        help="a second reader of every partition before and after (default kafka-python, when installed)",
    )
    c = p.add_argument_group("consumers")
    c.add_argument(
        "--clients",
        action="store_true",
        help="this host's consumer libraries read the data before and after the conversion, record by record",
    )
    c.add_argument(
        "--kafka-home",
        metavar="DIR",
        help="a Kafka installation (its libs/ holds kafka-clients): its Java consumer reads too (needs javac)",
    )
    c.add_argument(
        "--client-python",
        metavar="PYTHON",
        action="append",
        default=[],
        help="another interpreter (an application's venv) whose confluent-kafka, kafka-python, aiokafka read too; "
        "repeatable",
    )
    c.add_argument(
        "--clients-idle",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="a consumer that hands over no record and moves no position for this long has stopped (default 10)",
    )
    g = p.add_argument_group("projection")
    g.add_argument(
        "--cluster-bytes",
        metavar="B:SIZE,...",
        help="each broker's bytes to migrate, e.g. 1:120G,2:118G (G = 10^9, Gi = 2^30); `scan --json` prints a "
        "broker's as summary.legacyBytes",
    )
    g.add_argument("--broker-bytes", metavar="SIZE", help="bytes to migrate per broker, with --brokers")
    g.add_argument("--brokers", type=int, help="number of brokers, with --broker-bytes")
    add_plan_options(p)
    add_engine_options(p, full=True, brokers=False)  # a rehearsal is of one broker: --brokers sizes the cluster
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=run, usage_error=p.error)


def config_from_args(args: argparse.Namespace) -> RehearsalConfig:
    """The rehearsal's configuration; raises ValueError with a message for the operator on bad values."""
    log_dirs = (args.log_dirs or "").split(",")
    if not args.log_dirs or any(not d.strip() for d in log_dirs):
        raise ValueError("--log-dirs is required and holds no empty path (a doubled or trailing comma?)")
    request = plan_request_from(args, tuple(log_dirs), check=True)
    if args.cluster_bytes and (args.broker_bytes or args.brokers):
        raise ValueError("give either --cluster-bytes or --broker-bytes with --brokers, not both")
    if bool(args.broker_bytes) != bool(args.brokers):
        raise ValueError("--broker-bytes and --brokers go together")
    if (args.kafka_home or args.client_python) and not args.clients:
        raise ValueError("--kafka-home and --client-python name consumers for --clients, which is not given")
    if args.cluster_bytes:
        cluster = parse_cluster_bytes(args.cluster_bytes)
    elif args.broker_bytes:
        if args.brokers < 1:
            raise ValueError(f"--brokers must be at least 1, not {args.brokers}")
        size = parse_data_bytes(args.broker_bytes)
        cluster = tuple(BrokerBytes(str(i), size) for i in range(1, args.brokers + 1))
    else:
        cluster = ()
    return RehearsalConfig(
        log_dirs=tuple(str(Path(d).resolve()) for d in log_dirs),
        on_copy=str(Path(args.on_copy).resolve()) if args.on_copy else None,
        options=request.options,
        topics=request.topics,
        leader_epoch=request.leader_epoch,
        allow_unclean=request.allow_unclean,
        task_bytes=request.task_bytes,
        task_segments=request.task_segments,
        free_bytes_cap=request.free_bytes_cap,
        compact=request.compact,
        drop_tombstones_older_than_ms=request.drop_tombstones_older_than_ms,
        compact_memory_limit=request.compact_memory_limit,
        range_bytes=request.range_bytes,
        oracle="" if args.oracle == "none" else str(Path(args.oracle).resolve()),
        independent_reader=args.independent_reader,
        cluster=cluster,
        force=args.force,
        clients=args.clients,
        kafka_home=str(Path(args.kafka_home).resolve()) if args.kafka_home else "",
        client_pythons=tuple(args.client_python),
        clients_idle_ms=int(args.clients_idle * 1000),
    )


def run(args: argparse.Namespace) -> int:
    paths = RehearsalPaths.beside(args.output)

    def engine_factory() -> tuple[Engine, str]:  # made only when execute needs it: a LocalCluster takes seconds
        return make_engine(args)

    try:
        if args.resume:
            if args.log_dirs or args.on_copy:
                note(
                    "note: --resume continues with the log dirs, copy and plan options recorded in "
                    f"{paths.state}; --log-dirs and --on-copy are ignored"
                )
            report = rehearse.resume(paths, engine_factory, force=args.force, on_event=_say)
        else:
            try:
                config = config_from_args(args)
            except ValueError as exc:
                args.usage_error(str(exc))
            report = rehearse.start(config, paths, engine_factory, on_event=_say)
    except KeyboardInterrupt:
        note(
            f"kafka-log-migrate: interrupted; the rehearsal's state is in {paths.state}. Run `kafka-log-migrate "
            f"rehearse --resume -o {paths.report}` to finish it (it resumes the step, then rolls back and compares), "
            f"or `kafka-log-migrate rollback --plan {paths.plan}` to put the originals back now."
        )
        return EXIT_INTERRUPTED
    emit(to_json(report), args.json, report_text(report))
    return EXIT_OK if report.ok else EXIT_FAILURE


def _say(event: str) -> None:
    note(f"rehearse: {event}")


def clients_text(report: RehearsalReport) -> list[str]:
    """The clients table: per consumer, what it read of the originals and of the converted data."""
    before, after = report.clients_before, report.clients_after
    either = after or before
    if either is None:
        return []
    reference = either.reference
    lines = [f"clients (records compared with {reference}):"]
    runs = [*(before.verdicts if before else ()), *(after.verdicts if after else ())]
    for row in rows(runs, ["before", "after"], counts=True):
        lines.append(f"  {row.library} {row.version}")
        lines += [f"    {stage}: {cell or 'not run'}" for stage, cell in zip(("before", "after"), row.cells)]
    missing = dict.fromkeys([*(before.missing if before else ()), *(after.missing if after else ())])
    lines += [f"  not run: {m}" for m in missing]
    return lines


def report_text(report: RehearsalReport) -> str:
    hb, hs = human_bytes, human_seconds
    lines = [f"rehearsal {report.id} of {', '.join(report.log_dirs)}"]
    if report.copy is not None:
        lines.append(f"  on a copy in {report.copy.dir}: {report.copy.method}")
    lines += aligned(
        [
            (
                s.name,
                s.status.value.upper(),
                hs(s.seconds)
                + (f", {human_rate(s.bytes_per_second)}" if s.bytes_per_second else "")
                + (f", attempt {s.attempts}" if s.attempts > 1 else ""),
                s.message,
            )
            for s in report.steps
        ]
    )
    if report.growth is not None:
        g = report.growth
        lines.append(
            f"growth: {hb(g.bytes_in)} -> {hb(g.bytes_out)} "
            f"({'+' if g.growth_bytes >= 0 else '-'}{hb(abs(g.growth_bytes))}"
            + (f", {g.growth_ratio:+.1%}" if g.growth_ratio is not None else "")
            + f"); the plan estimated {hb(g.estimated_output_bytes)}; {hb(g.held_until_finalize_bytes)} more disk "
            "until finalize (originals kept)"
        )
    for r in report.refusals[:20]:
        where = f" [{r.file}" + (f" at byte position {r.position}" if r.position is not None else "") + "]"
        lines.append(f"refused in {r.step}:{where if r.file else ''} {r.message}")
    for v in report.readers:
        verdict = "not available" if not v.available else "OK" if v.ok else "FAILED"
        lines.append(f"reader {v.reader} ({v.stage}): {verdict}: {v.detail}")
        lines += [f"    {p}" for p in v.problems[:10]]
    lines += clients_text(report)
    for c in report.fingerprints:
        state = "identical" if c.identical else f"{c.total_changes} DIFFERENCE(S)"
        lines.append(f"fingerprint of the {c.what} {c.after_root}: {state} ({c.entries_after} entries)")
        lines += [f"    {x.path}: {x.change} {x.before} -> {x.after}" for x in c.changes[:10]]
    p = report.projection
    if p is not None:
        lines.append(f"projection from {p.basis}:")
        lines += aligned(
            [
                (r.step, human_rate(r.bytes_per_second) if r.bytes_per_second else "-", f"({r.note})" if r.note else "")
                for r in p.rates
            ],
            right=frozenset({1}),
        )
        for b in p.brokers:
            back = f"; rollback {hs(b.rollback_seconds)}" if b.rollback_seconds is not None else ""
            cut = f"; pre-staged cut-over {hs(b.cutover_seconds)}" if b.cutover_seconds is not None else ""
            lines.append(f"  broker {b.broker}: {hb(b.bytes)} -> window {hs(b.window_seconds)}{cut}{back}")
        if p.cluster_parallel_seconds is not None and p.cluster_serial_seconds is not None:
            lines.append(
                f"  cluster ({len(p.brokers) - 1} brokers): {hs(p.cluster_parallel_seconds)} all at once, "
                f"{hs(p.cluster_serial_seconds)} one after the other"
            )
        if p.cluster_rolling_cutover_seconds is not None:
            lines.append(
                f"  pre-staged, rolling one broker at a time: {hs(p.cluster_rolling_cutover_seconds)} of broker "
                f"downtime in all ({p.cutover_changed_fraction:.0%} of the data changed after each last pass)"
            )
        lines += [f"  note: {c}" for c in p.caveats]
    lines.append(f"report: {report.report_path}" + (f" (HTML: {report.html_report})" if report.html_report else ""))
    lines.append(report.verdict)
    lines.append(report.next_steps)
    return "\n".join(lines)
