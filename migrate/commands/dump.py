"""``dump``: print segments the way ``kafka-dump-log.sh`` does, or as JSON lines in the Kafka oracle's schema.

Read-only. Exit 1 when any file is not entirely valid: a partial last entry (printed as Kafka prints it, "Found N
invalid bytes at the end of FILE") or a corrupt entry (entries before it are printed, then the error, naming file
and byte position, on stderr). Our reader stops at the first corrupt entry, where Kafka's tool prints the entry
with ``isvalid: false`` and reads on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from migrate import dump
from migrate.errors import CorruptRecordError, MigrateError

EXIT_OK = 0
EXIT_INVALID = 1
# compact, like the oracle's lines (so the two diff cleanly); one encoder, as json.dumps builds one per call
_JSON = json.JSONEncoder(separators=(",", ":"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dump",
        help="print segments like kafka-dump-log.sh (read-only)",
        description="Print log segments with kafka-dump-log.sh's field names (DumpLogSegments), every entry "
        "validated by this tool's reader (CRCs, decompression, offsets). Exits 1 if a file has a partial last "
        "entry or a corrupt entry.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="segment files (.log), dumped in the order given")
    p.add_argument(
        "--files", dest="files_csv", metavar="F1,F2", help="comma-separated files, as kafka-dump-log.sh takes them"
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only every entry")
    p.add_argument(
        "--print-data-log", action="store_true", help="print keys and values as UTF-8 text (implies --deep-iteration)"
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="JSON lines with the Kafka oracle's dump keys (batch/record/trailing/error; a file line before each "
        "file when several are given); with --print-data-log also key_hex/value_hex",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive_int,
        metavar="N",
        help="read only the first N bytes of each file; an entry cut at byte N is left out, not reported",
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


def run(args: argparse.Namespace) -> int:
    paths = list(args.files)
    if args.files_csv:
        paths += [p for p in args.files_csv.split(",") if p]
    if not paths:
        args.usage_error("at least one FILE (or --files F1,F2) is required")
    for path in paths:  # before printing anything, so that a typo does not leave half an output
        if Path(path).is_dir():
            raise MigrateError(f"{path} is a directory: pass its segment files, e.g. {path}/*.log")
        if not Path(path).exists():
            raise MigrateError(f"no such file: {path}")
    deep = args.deep_iteration or args.print_data_log
    out = sys.stdout
    status = EXIT_OK
    gaps: dict[str, list[tuple[int, int]]] = {}
    for path in paths:
        with open(path, "rb") as src:
            file_size = os.fstat(src.fileno()).st_size
            data = src.read() if args.max_bytes is None else src.read(args.max_bytes)
        read = dump.read_segment_bytes(data)
        # an entry cut by --max-bytes is the reader's limit, not damage in the file
        tail = read.tail if len(data) == file_size else None
        error = None if read.error is None else _located(read.error, path)
        if args.json:
            if len(paths) > 1:
                _write_json(out, [dump.file_json(path, file_size)])
            _write_json(out, dump.json_lines(read.entries, deep, args.print_data_log))
            if tail is not None:
                _write_json(out, [dump.trailing_json(tail)])
            if error is not None:
                _write_json(out, [dump.error_json(error, file_size)])
        else:
            _write_text(out, dump.header_lines(path))
            _write_text(out, dump.text_lines(read.entries, deep, args.print_data_log))
            if tail is not None:
                _write_text(out, [dump.trailing_text(tail, Path(path).name)])
            if deep:
                found = dump.offset_gaps(read.entries)
                if found:
                    gaps[os.path.abspath(path)] = found
        if error is not None:
            out.flush()  # the entries before the corrupt one come first, as they do in the file
            print(f"kafka-log-migrate: error: {error}", file=sys.stderr)
        if tail is not None or error is not None:
            status = EXIT_INVALID
    out.flush()
    # like DumpLogSegments: after all files, on stderr, and not an error (compaction leaves gaps)
    for path, pairs in gaps.items():
        print(f"Non-consecutive offsets in {path}", file=sys.stderr)
        for previous, following in pairs:
            print(f"  {previous} is followed by {following}", file=sys.stderr)
    return status


def _located(error: CorruptRecordError, path: str) -> CorruptRecordError:
    """The reader's error, naming ``path``; the default advice (run dump) is replaced, as dump is what ran."""
    hint = error.hint or (
        "The entries before it are printed above; Kafka's log recovery would truncate the segment here. If it is "
        "damaged, restore it from a replica before migrating."
    )
    return type(error)(error.reason, position=error.position, offset=error.offset, path=path, hint=hint)


def _write_text(out: TextIO, lines: Iterable[str]) -> None:
    for line in lines:
        out.write(line + "\n")


def _write_json(out: TextIO, lines: Iterable[dict]) -> None:
    for line in lines:
        out.write(_JSON.encode(line) + "\n")
