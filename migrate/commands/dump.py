"""``dump``: print segments and their indexes the way ``kafka-dump-log.sh`` does, or as JSON lines.

Read-only. Like Kafka's tool, it reads on past a damaged entry (printed with ``isvalid: false``) and reports index
mismatches and offset gaps on stderr after all files. Unlike it, it exits 1 when any file is not entirely valid: a
partial last entry ("Found N invalid bytes at the end of FILE"), an invalid entry (named on stderr with file and byte
position), an entry header Kafka's reader throws on (reading stops there), or an index that does not match its log
or fails the sanity check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from migrate.errors import MigrateError
from migrate.reports.dump import index_files, log_lines, log_read

EXIT_OK = 0
EXIT_INVALID = 1
# compact, like the oracle's lines (so the two diff cleanly); one encoder, as json.dumps builds one per call
_JSON = json.JSONEncoder(separators=(",", ":"))
UNSUPPORTED = {".txnindex": "transaction index", ".snapshot": "producer state snapshot"}
INDEX_HINT = (
    "Kafka trusts the index files of segments below the recovery point, so a bad entry sends fetches or timestamp "
    "lookups to the wrong place. With the broker stopped, delete this segment's .index and .timeindex: Kafka rebuilds "
    "both from the .log at start-up."
)

DESCRIPTION = """\
Print Kafka log segments and their index files the way kafka-dump-log.sh (DumpLogSegments) does: the same field
names and order, read-only. A file's type comes from its suffix: .index (offset index), .timeindex (time index);
anything else is read as a log segment. Every log entry is checked by this tool's reader (CRCs, decompression,
offsets); a bad entry is printed with "isvalid: false" and reading goes on after it, as Kafka's tool does.

Index files are checked against the .log beside them (same base offset, same directory): DumpLogSegments' checks
(each offset index entry names the last offset of the entry at its position; each time index entry the largest
timestamp of the entry holding its offset) and the structure Kafka's lookups rely on (whole entries, offsets not
below the base offset, increasing entries). Problems go to stderr after all files, naming each bad entry by its
number (from 0) and its byte in the index file.
"""

EPILOG = """\
exit codes: 0 every file is valid; 1 something is not (a partial last entry, an invalid entry, an index problem,
an unreadable or unsupported file: all named on stderr); 2 usage error.

examples:
  kafka-log-migrate dump --deep-iteration /data/kafka/orders-0/00000000000000000000.log
  kafka-log-migrate dump --files 00000000000000000000.log,00000000000000000000.index --print-data-log
  kafka-log-migrate dump --verify-index-only /data/kafka/orders-0/*.index /data/kafka/orders-0/*.timeindex
  kafka-log-migrate dump --index-sanity-check /data/kafka/orders-0/00000000000000000000.index
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump",
        help="print segments and indexes like kafka-dump-log.sh (read-only)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="log segment (.log) or index (.index, .timeindex) files, dumped in the order given",
    )
    p.add_argument(
        "--files",
        dest="files_csv",
        action="append",
        metavar="F1,F2",
        help="comma-separated files, as kafka-dump-log.sh takes them (may be repeated; dumped after any FILE)",
    )
    p.add_argument(
        "--deep-iteration",
        action="store_true",
        help="print every record of every log entry (legacy compressed wrappers are opened), and report "
        "non-consecutive offsets on stderr",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and value (' key: K payload: V', decoded as UTF-8 with malformed bytes "
        "replaced, as Kafka's default StringDecoder does; a null key or value is left out); implies "
        "--deep-iteration",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="for .index/.timeindex files: check the entries against the .log beside them without printing them",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="for .index/.timeindex files: only check their structure (whole entries, offsets not below the base "
        "offset, increasing entries; Kafka's sanityCheck and more), without reading the log; prints 'FILE passed "
        "sanity check.' or names every bad entry on stderr",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines instead of text: for logs the Kafka oracle's dump keys (batch/record/trailing/error; "
        "with --print-data-log also key_hex/value_hex); for indexes index/timeindex/problem lines; a file line "
        "before each file when several are given",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive_int,
        metavar="N",
        help="read only the first N bytes of each log file; an entry cut at byte N is left out, not reported",
    )
    p.add_argument(
        "--max-message-size",
        type=_positive_int,
        metavar="N",
        help="accepted for kafka-dump-log.sh compatibility and ignored: this tool always reads whole entries",
    )
    p.set_defaults(handler=run, usage_error=p.error)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


@dataclass
class _Run:
    """What one ``dump`` invocation prints and remembers across files."""

    args: argparse.Namespace
    out: TextIO
    status: int = EXIT_OK
    # reported on stderr after all files, as DumpLogSegments does: index problems, then offset gaps
    index_problems: dict[str, list[index_files.IndexProblem]] = field(default_factory=dict)
    gaps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    logs: dict[str, index_files.LogLayout | None] = field(default_factory=dict)  # .log beside indexes, read once

    def text(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.out.write(line + "\n")

    def json(self, lines: Iterable[dict]) -> None:
        for line in lines:
            self.out.write(_JSON.encode(line) + "\n")

    def error(self, message: str) -> None:
        """A problem on stderr, after what was printed so far (which comes first in a terminal)."""
        self.out.flush()
        print(f"kafka-log-migrate: error: {message}", file=sys.stderr)
        self.status = EXIT_INVALID


def run(args: argparse.Namespace) -> int:
    paths = list(args.files)
    for csv in args.files_csv or []:
        paths += [p for p in csv.split(",") if p]
    if not paths:
        args.usage_error("at least one FILE (or --files F1,F2) is required")
    for path in paths:  # before printing anything, so that a typo does not leave half an output
        if Path(path).is_dir():
            raise MigrateError(f"{path} is a directory: pass its segment files, e.g. {path}/*.log")
        if not Path(path).exists():
            raise MigrateError(f"no such file: {path}")
    state = _Run(args, sys.stdout)
    for path in paths:
        if args.json and len(paths) > 1:
            state.json([log_lines.file_json(path, os.path.getsize(path))])
        elif not args.json:
            state.text([f"Dumping {path}"])
        suffix = Path(path).suffix
        if suffix == ".index":
            _offset_index(state, path)
        elif suffix == ".timeindex":
            _time_index(state, path)
        elif suffix in UNSUPPORTED:
            state.error(
                f"{path}: this tool does not dump a {UNSUPPORTED[suffix]} ({suffix}); use Kafka's "
                f"kafka-dump-log.sh --files {path}"
            )
        else:
            _log(state, path)
    state.out.flush()
    _report_after_all_files(state)
    return state.status


def _report_after_all_files(state: _Run) -> None:
    for path, problems in state.index_problems.items():
        for line in index_files.problem_blocks(path, problems):
            print(line, file=sys.stderr)
    for path, problems in state.index_problems.items():
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        print(f"kafka-log-migrate: error: {path}: {count} (listed above). {INDEX_HINT}", file=sys.stderr)
    for path, pairs in state.gaps.items():  # like DumpLogSegments, and not an error: compaction leaves gaps
        print(f"Non-consecutive offsets in {path}", file=sys.stderr)
        for previous, following in pairs:
            print(f"  {previous} is followed by {following}", file=sys.stderr)


# --- log segments ------------------------------------------------------------------------------------------------


def _log(state: _Run, path: str) -> None:
    args = state.args
    with open(path, "rb") as src:
        file_size = os.fstat(src.fileno()).st_size
        data = src.read() if args.max_bytes is None else src.read(args.max_bytes)
    read = log_read.read_log(data, log_read.log_base_offset(Path(path).name))
    # an entry cut by --max-bytes is the reader's limit, not damage in the file
    tail = read.tail if len(data) == file_size else None
    deep = args.deep_iteration or args.print_data_log
    invalid = iter(read.invalid)
    # stderr names each invalid entry right after its lines, so a terminal shows the two together
    if args.json:
        lines = log_lines.json_lines(read, deep, args.print_data_log)
        for line in lines:
            state.json([line])
            if line["type"] == "batch" and not line["valid"]:
                state.error(str(_located(next(invalid).error, path, stopped=False)))
    else:
        state.text(log_lines.starting_offset_lines(path))
        for view, error in read.views():
            state.text([log_lines.entry_text(view, valid=error is None)])
            if deep:
                state.text(log_lines.record_text(view, record, args.print_data_log) for record in view.records())
            if error is not None:
                state.error(str(_located(error, path, stopped=False)))
    if tail is not None:
        if args.json:
            state.json([log_lines.trailing_json(tail)])
        else:
            state.text([log_lines.trailing_text(tail, Path(path).name)])
        state.status = EXIT_INVALID
    if read.error is not None:
        if args.json:
            state.json([log_lines.error_json(read.error, file_size)])
        state.error(str(_located(read.error, path, stopped=True)))
    if deep and not args.json:
        found = log_read.offset_gaps(read)
        if found:
            state.gaps[os.path.abspath(path)] = found


def _located(error: log_read.ReadError, path: str, stopped: bool) -> log_read.ReadError:
    """The reader's error, naming ``path``, with advice that fits what dump did."""
    if stopped:
        hint = (
            "Kafka's reader cannot go past this entry header either: nothing after it was read, and Kafka's log "
            "recovery would truncate the segment here. If it is damaged, restore it from a replica before migrating."
        )
    else:
        hint = (
            "The entry is printed above with isvalid: false and the dump went on after it. Kafka's log recovery "
            "would truncate the segment at this entry: restore the segment from a replica before migrating."
        )
    # an error's own advice is kept when it has one; the generic one (run dump) is replaced, as dump is what ran
    generic = (None, getattr(type(error), "default_hint", None))
    specific = error.hint if error.hint not in generic else None
    return type(error)(error.reason, position=error.position, offset=error.offset, path=path, hint=specific or hint)


# --- index files -------------------------------------------------------------------------------------------------


def _index_base(state: _Run, path: str) -> int | None:
    base = log_read.segment_base_offset(Path(path).name)
    if base is None:
        state.error(
            f"{path}: cannot tell the segment's base offset from the file name (Kafka names index files "
            "<20-digit base offset>.index / .timeindex); copy or rename it to its segment's name and dump that"
        )
    return base


def _offset_index(state: _Run, path: str) -> None:
    base = _index_base(state, path)
    if base is None:
        return
    data = Path(path).read_bytes()
    entries = index_files.offset_index_entries(data, base)
    if state.args.index_sanity_check:
        _sanity(state, path, index_files.offset_index_sanity(data, base), empty=not entries)
        return
    if not entries and not data:
        _say(state, f"{path} is empty.", {"type": "empty"})
        return
    problems = index_files.offset_index_sanity(data, base)
    log = _log_beside(state, path)
    if log is not None:
        problems += index_files.verify_offset_index(entries, log)
    if not state.args.verify_index_only:
        if state.args.json:
            state.json(map(index_files.offset_index_json, entries))
        else:
            state.text(map(index_files.offset_index_text, entries))
    _collect(state, path, problems)


def _time_index(state: _Run, path: str) -> None:
    base = _index_base(state, path)
    if base is None:
        return
    data = Path(path).read_bytes()
    if state.args.index_sanity_check:
        _sanity(state, path, index_files.time_index_sanity(data, base), empty=False)
        return
    entries = index_files.time_index_entries(data, base)
    problems = index_files.time_index_sanity(data, base)
    if entries:
        log = _log_beside(state, path)
        offset_index = Path(path).with_suffix(".index")
        # as in Kafka, positions come from the offset index; without one every search starts at byte 0
        offset_entries = []
        if offset_index.exists():
            offset_entries = index_files.offset_index_entries(offset_index.read_bytes(), base)
        if log is not None:
            problems += index_files.verify_time_index(entries, offset_entries, log)
    if not state.args.verify_index_only:
        if state.args.json:
            state.json(map(index_files.time_index_json, entries))
        else:
            state.text(map(index_files.time_index_text, entries))
    _collect(state, path, problems)


def _sanity(state: _Run, path: str, problems: list[index_files.IndexProblem], empty: bool) -> None:
    if state.args.json:
        state.json(map(index_files.problem_json, problems))
        state.json([{"type": "sanity", "passed": not problems}])
    elif not problems:
        state.text([f"{path} is empty." if empty else f"{path} passed sanity check."])
    if problems:
        state.out.flush()
        for line in index_files.problem_blocks(path, problems):
            print(line, file=sys.stderr)
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        state.error(f"{path} failed the index sanity check: {count} (listed above). {INDEX_HINT}")


def _collect(state: _Run, path: str, problems: list[index_files.IndexProblem]) -> None:
    if not problems:
        return
    if state.args.json:
        state.json(map(index_files.problem_json, problems))
    state.index_problems.setdefault(os.path.abspath(path), []).extend(problems)
    state.status = EXIT_INVALID


def _say(state: _Run, text: str, json_line: dict) -> None:
    if state.args.json:
        state.json([json_line])
    else:
        state.text([text])


def _log_beside(state: _Run, index_path: str) -> index_files.LogLayout | None:
    """The ``.log`` an index belongs to, read once per run; None (and an error) when it cannot be read."""
    log_path = str(Path(index_path).with_suffix(".log"))
    if log_path in state.logs:
        return state.logs[log_path]
    layout = None
    try:
        data = Path(log_path).read_bytes()
    except FileNotFoundError:
        state.error(
            f"{index_path}: its log segment {log_path} does not exist, so the entries cannot be checked against "
            "it. Dump the index where its .log is, or use --index-sanity-check to check its structure alone."
        )
    else:
        read = log_read.read_log(data, log_read.log_base_offset(Path(log_path).name))
        layout = index_files.LogLayout.of(Path(log_path).name, len(data), read)
        if read.error is not None or read.invalid:
            state.error(
                f"{index_path}: its log segment {log_path} has invalid entries, so the index was checked against "
                f"what could be read of it. Run `kafka-log-migrate dump {log_path}` to see where the log is damaged."
            )
    state.logs[log_path] = layout
    return layout
