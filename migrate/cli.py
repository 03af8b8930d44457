"""The ``kafka-log-migrate`` command line: verbs that mirror kafka-reassign-partitions (plan, execute, verify).

Exit codes: 0 ok; 1 failure (bad data, refused, a stage failed); 2 usage error; 3 verification found differences;
4 scan found legacy data left.
"""

from __future__ import annotations

import argparse
import sys

from migrate import __version__
from migrate.commands import demo, dump, maintenance, migration, scan
from migrate.errors import MigrateError

COMMANDS = [scan, migration, maintenance, dump, demo]
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

EPILOG = """exit codes:
  0  success
  1  failure: bad input (file and byte position named), refused (what to do is named), or a stage failed
  2  usage error
  3  verify found differences between live data and what was swapped in
  4  scan found legacy (v0/v1) data left

typical run (brokers stopped):
  kafka-log-migrate scan --log-dirs /data/kafka
  kafka-log-migrate plan --log-dirs /data/kafka -o plan.json      # changes nothing; review plan.json
  kafka-log-migrate execute --plan plan.json                      # convert, verify, swap (originals kept)
  kafka-log-migrate verify --plan plan.json                       # re-check the live data
  kafka-log-migrate rollback --plan plan.json                     # ...or put every original back
  kafka-log-migrate finalize --plan plan.json                     # delete the originals when satisfied
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-log-migrate",
        description="Offline up-conversion of Kafka log segments from message format v0/v1 to v2 (or v1).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kafka-log-migrate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except MigrateError as exc:
        print(f"kafka-log-migrate: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print("kafka-log-migrate: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
