"""``serve``: log dirs served read-only over the Kafka protocol (``migrate.serve``), so that consumer applications
can read a converted copy (or the originals) before any broker runs on it."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from migrate.commands.output import note
from migrate.errors import MigrateError
from migrate.kafka.lock import lock_holder

EXIT_OK = 0

DESCRIPTION = """\
Serve log dirs read-only over the Kafka protocol, the way a broker's fetch path serves them: the segment files'
bytes, unchanged, from the entry that holds the fetch offset, cut at the fetch's limits (KIP-74's whole first entry
included). Point a consumer's bootstrap.servers at the address it prints: Metadata, ListOffsets, Fetch (versions 4
to 16) and, for consumers that join a group, a coordinator of one-member groups (commits kept in memory only). It
is not a broker: it takes no writes (a produce is refused), opens no file for writing, and serves the files as they
are when it starts (stop the broker first, or serve a copy: `rehearse --on-copy`, or a converted copy of a plan's
log dirs).

It listens on 127.0.0.1 unless --host names another address, which it refuses without --allow-remote: anyone who
reaches the port reads the data.
"""

EPILOG = """\
examples:
  kafka-log-migrate serve --log-dirs /data/rehearsal/kafka-logs                  # prints bootstrap.servers=...
  kafka-log-migrate serve --log-dirs /data/copy --port 19092
  kafka-console-consumer.sh --bootstrap-server 127.0.0.1:19092 --topic orders --from-beginning
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve log dirs read-only over the Kafka protocol, for consumers to read before a broker runs on them",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--log-dirs", required=True, help="comma-separated log dirs of one broker (or their copies)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free one, printed)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="listen on a --host that is not a loopback address (anyone who reaches it reads the data)",
    )
    p.add_argument("--advertised-host", help="the host clients are told to connect to (default: --host)")
    p.set_defaults(handler=run, usage_error=p.error)


def run(args: argparse.Namespace) -> int:
    from migrate.serve.server import Endpoint, is_loopback  # only this verb needs the endpoint

    log_dirs = args.log_dirs.split(",")
    if any(not d.strip() for d in log_dirs):
        args.usage_error("--log-dirs holds an empty path (a doubled or trailing comma?)")
    if not args.allow_remote and not is_loopback(args.host):
        args.usage_error(
            f"--host {args.host} is not a loopback address: anyone who reaches it could read the served data. "
            "Pass --allow-remote to listen there anyway."
        )
    for d in log_dirs:
        holder = lock_holder(d)
        if holder is not None:
            raise MigrateError(
                f"{d}/.lock is held{f' by process {holder}' if holder else ''}: a broker is running on this log dir "
                "and changes its files under the endpoint. Point consumers at that broker, or serve a copy."
            )
    endpoint = Endpoint(
        log_dirs,
        args.host,
        args.port,
        allow_remote=args.allow_remote,
        advertised_host=args.advertised_host,
        on_note=lambda text: note(f"serve: {text}"),
    )
    partitions = len(endpoint.log.partitions)
    for warning in endpoint.log.warnings:
        note(f"serve: warning: {warning}")
    stop = threading.Event()

    def stopped(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, stopped)
    endpoint.start()
    print(
        f"serving {partitions} partitions of {', '.join(str(d) for d in endpoint.log.log_dirs)} read-only on "
        f"{endpoint.host}:{endpoint.port}: bootstrap.servers={endpoint.bootstrap} (Ctrl-C to stop)",
        flush=True,
    )
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        endpoint.close()
    answered = ", ".join(f"{n} {name}" for name, n in sorted(endpoint.responder.counts.items())) or "no requests"
    note(f"serve: stopped; answered {answered}")
    sys.stdout.flush()
    return EXIT_OK
