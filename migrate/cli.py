"""The ``kafka-log-migrate`` command line: verbs that mirror kafka-reassign-partitions (plan, execute, verify).

Each verb lives in a module of ``migrate.commands`` whose ``register(subparsers)`` adds its parser(s) and sets
``handler`` (``Namespace -> exit code``); adding a verb is an entry in ``VERBS`` (and its module in
``COMMAND_MODULES``). A run imports only its own verb's module: ``plan`` does not load the report's Parquet library,
nor ``execute`` the rehearsal or dump code.

Exit codes: 0 ok; 1 failure (bad data, refused, a stage failed); 2 usage error; 3 verification found differences;
4 scan found legacy data left; 5 verification found the broker's own changes since the swap; 6 prestage stopped by
its abort file; 130 interrupted (Ctrl-C). A reader of stdout that goes away (``| head``) does not change them.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from typing import NoReturn

# numpy's OpenBLAS starts a thread per core as numpy is imported, and each spins about 0.1 s of CPU waiting for work
# that never comes (the tool does no linear algebra): in the driver and in every worker, taken from the cores
# converting at a run's start. Before the first import of numpy (below); an operator's setting stays.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from migrate import __version__
from migrate.errors import MigrateError
from migrate.watch import runlog
from migrate.watch.pipes import silence_stdout

# their order in --help
COMMAND_MODULES = (
    "scan",
    "prestage",
    "migration",
    "rolling",
    "maintenance",
    "report",
    "rehearse",
    "serve",
    "dump",
    "demo",
)
VERBS: dict[str, str] = {  # verb -> the module of migrate.commands that registers it
    "scan": "scan",
    "prestage": "prestage",
    "plan": "migration",
    "execute": "migration",
    "rolling": "rolling",
    "verify": "migration",
    "status": "maintenance",
    "rollback": "maintenance",
    "finalize": "maintenance",
    "report": "report",
    "rehearse": "rehearse",
    "serve": "serve",
    "dump": "dump",
    "demo": "demo",
}
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C

DESCRIPTION = """\
Up-conversion of Kafka log segments from message format v0/v1 to v2, pre-staged beside running brokers and cut over
broker by broker. In the order an operator runs it: scan finds the legacy data; rehearse migrates one canary broker
and rolls it back, timing every step; prestage converts and verifies closed segments while the broker runs, outside
its log dirs; rolling stops, cuts over and starts each broker in turn (plan and execute do the same for brokers
already stopped); verify re-checks the live files; finalize deletes the originals, or rollback puts them back."""

EPILOG = """exit codes:
  0  success
  1  failure: bad input (file and byte position named), refused (what to do is named), or a stage failed
  2  usage error
  3  verify found differences between live data and what was swapped in that no broker operation explains
  4  scan found legacy (v0/v1) data left (rolling: its scan after the last broker)
  5  verify found the converted data intact and the broker's own changes since the swap (appends, rolls,
     truncation, cleaning, retention): listed, not differences
  6  prestage stopped by its --abort-file (the operator's stop: what was staged before it stays whole)
  130  interrupted (Ctrl-C): run the same command again to resume
  A reader of stdout that goes away early (`scan --json | head`) does not change the code: the verdict was
  reached before the output was written (`dump`, which prints as it reads, exits 1 then).

execute, verify, rollback and finalize keep a run log beside the plan (plan.json.logs/), named in the first
and last lines of their output.

typical rolling migration (brokers running):
  kafka-log-migrate scan --log-dirs /data/kafka                   # exit 4 while v0/v1 data is left
  kafka-log-migrate prestage --log-dirs /data/kafka               # on each broker host, while it runs
  kafka-log-migrate rolling --scheduler tls://HOST:8786 --tls-dir tls/ --brokers 1,2,3 --log-dirs /data/kafka \\
      --run-dir run/ --bootstrap-server kafka1:9092 \\
      --stop-command 'systemctl stop kafka@{broker}' --start-command 'systemctl start kafka@{broker}'

typical run of stopped brokers:
  kafka-log-migrate scan --log-dirs /data/kafka
  kafka-log-migrate plan --log-dirs /data/kafka -o plan.json      # changes nothing; review plan.json
  kafka-log-migrate execute --plan plan.json                      # convert, verify, swap (originals kept)
  kafka-log-migrate verify --plan plan.json                       # re-check the live data
  kafka-log-migrate report --plan plan.json                       # per-segment Parquet and an HTML report
  kafka-log-migrate rollback --plan plan.json                     # ...or put every original back
  kafka-log-migrate finalize --plan plan.json                     # delete the originals when satisfied

let consumers read a converted copy before any broker runs on it (read-only, loopback):
  kafka-log-migrate serve --log-dirs /data/rehearsal/kafka-logs

inspect one segment (read-only, kafka-dump-log.sh fields; --json for Kafka's dump schema):
  kafka-log-migrate dump --deep-iteration /data/kafka/orders-0/00000000000000000000.log
"""


class Parser(argparse.ArgumentParser):
    """A usage error is one line, what is wrong and where the options are listed, not the verb's whole usage above
    it (25 lines for ``plan``, the one that matters last)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (`{self.prog} --help` lists every option)\n")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """Every verb's parser, or only ``verb``'s (what a run of that verb needs: the other modules stay unimported)."""
    parser = Parser(
        prog="kafka-log-migrate",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kafka-log-migrate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (VERBS[verb],) if verb in VERBS else COMMAND_MODULES:
        importlib.import_module(f"migrate.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(words[0] if words else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits itself: 2 after a usage error, 0 after --help or --version
        return _exit_code(exc)
    log = _run_log(args, words)
    if log is None:
        return _run(args)
    with log:
        return _run(args)


def console_main() -> NoReturn:
    """The installed command (and ``python -m migrate.cli``): ``main``, then the process's exit."""
    code = main()
    # Everything is closed and flushed; what is left goes back to the system with the process. Frozen, the ~150,000
    # objects that Dask and its dashboard leave are not walked again by the interpreter's collections at exit:
    # 0.3 s of a short run's wall time. Only here: a test calling main() many times must keep collecting.
    gc.freeze()
    sys.exit(code)


def _run_log(args: argparse.Namespace, argv: list[str]) -> runlog.RunLog | None:
    """The run log of a verb that keeps one (``run_log`` in its defaults), beside its plan."""
    plan = getattr(args, "plan", None)
    if not getattr(args, "run_log", False) or not plan or not os.path.isfile(plan):
        return None  # no plan file: the verb refuses at once, with nothing to record
    log = runlog.RunLog.beside(plan, args.command, argv)
    try:
        log.path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"kafka-log-migrate: warning: no run log ({exc}); messages go to the terminal only", file=sys.stderr)
        return None
    return log


def _run(args: argparse.Namespace) -> int:
    """The verb's handler; every refusal or error becomes a message (in the run log too) and an exit code."""
    try:
        return int(args.handler(args))
    except SystemExit as exc:
        return _exit_code(exc)
    except MigrateError as exc:
        runlog.note(f"kafka-log-migrate: error: {exc}")
        return EXIT_FAILURE
    except BrokenPipeError:
        silence_stdout()
        return EXIT_FAILURE
    except OSError as exc:  # a file that cannot be opened or written: the message says which and why
        runlog.note(f"kafka-log-migrate: error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        runlog.note("kafka-log-migrate: interrupted; run the same command again to resume")
        return EXIT_INTERRUPTED
    except Exception as exc:
        log = runlog.current()
        if log is None:
            raise  # no run log to keep the traceback: Python prints it
        log.exception("unexpected error", exc)
        runlog.note(
            f"kafka-log-migrate: error: unexpected {type(exc).__name__}: {exc}. This is a bug in kafka-log-migrate; "
            f"its traceback is in {log.path}: please report it with that file"
        )
        return EXIT_FAILURE


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter would exit with for ``exc`` (a message is printed and means 1), as a return value."""
    if exc.code is None:
        return EXIT_OK
    if isinstance(exc.code, int):
        return exc.code
    runlog.note(str(exc.code))
    return EXIT_FAILURE


if __name__ == "__main__":
    console_main()
