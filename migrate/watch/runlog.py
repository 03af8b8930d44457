"""The record of a run: every message it printed, timestamped, in a file beside the plan; and its progress lines.

``RunLog`` is what ``execute``, ``verify``, ``rollback`` and ``finalize`` write through: each message goes to the
terminal (stderr for messages and progress, stdout for the result) and, with a UTC timestamp, to
``<plan>.logs/<verb>-<time>.log``, which the first and the last line of the output name. The loggers of Dask,
Tornado, Bokeh and the tool go to that file only while the run lasts (a LocalCluster's worker records reach them
through ``migrate.watch.worker_logs.ForwardWorkerLogs``), so the terminal carries the tool's own messages, and an
unexpected error's traceback is in the file, never lost.

``Progress`` turns finished segments into a line: bytes done of the total, MB/s, ETA and failures so far, by the
same fold as the migration page (``migrate.watch.tally``). On a
terminal one line is rewritten in place; without one (nohup, systemd, CI) a line is printed every few seconds. It is
fed as segments finish (the serial engine's ``on_segment``; on Dask, the client's subscription to the workers'
segment events) and by the outcomes each convert or join call returns, as it comes back, so an engine without a
live feed (Spark) still advances it; a segment counts once however it arrives (``SeenSegments``: a bit per planned
segment, not a set of keys).

``migrate.engines.watched.WatchedEngine`` feeds it: each stage is logged with its duration and errors, the
progress line names it, and an unexpected exception's traceback is logged where it happens (the worker's records
travel to the run log) before the engine reports the error as a message.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np

from migrate import __version__
from migrate.errors import MigrateError
from migrate.model.plan_columns import SegmentRows
from migrate.model.plan_tree import PartitionPlan, Plan, SegmentPlan
from migrate.model.run_state import RangeProgress, SegmentOutcome, Stage
from migrate.model.stage_reports import ConvertTaskResult
from migrate.units import human_bytes, human_rate, human_seconds
from migrate.watch.events import plan_event, segment_event
from migrate.watch.pipes import silence_stdout
from migrate.watch.tally import RunProgress

CAPTURED_LOGGERS = ("distributed", "tornado", "bokeh", "migrate", "py.warnings")
PROGRESS_INTERVAL_SECONDS = 5.0  # without a terminal: one line this often
TTY_REFRESH_SECONDS = 0.5

_current: RunLog | None = None


def current() -> RunLog | None:
    """The run log of the command running in this process, if it keeps one."""
    return _current


def adopt_new_loggers() -> None:
    """Loggers configured since the run log opened (``distributed``'s, on its import) write to it, not the terminal."""
    if _current is not None:
        _current.take_over_loggers()


def note(message: str) -> None:
    """A message for the operator: stderr, and the run log when there is one."""
    if _current is not None:
        _current.note(message)
    else:
        print(message, file=sys.stderr, flush=True)


def emit(text: str) -> None:
    """The command's result on stdout, and in the run log when there is one."""
    if _current is not None:
        _current.emit(text)
    else:
        _print_result(text, sys.stdout)


def _print_result(text: str, stdout: TextIO) -> None:
    """A reader of stdout that goes away (``| head``) loses the rest of the result, not the verb's exit code."""
    try:
        print(text, file=stdout, flush=True)
    except BrokenPipeError:
        silence_stdout()


def stamp(at: float | None = None) -> str:
    at = time.time() if at is None else at
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"


def run_log_path(plan_path: str | Path, verb: str, at: float | None = None) -> Path:
    """``<plan>.logs/<verb>-<UTC second>.log``: the name a run's log is opened under first (``open_run_log``)."""
    at = time.time() if at is None else at
    return Path(f"{plan_path}.logs") / f"{verb}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(at))}.log"


def open_run_log(path: Path) -> tuple[Path, TextIO]:
    """A file of this run's own: ``path``, or where another run took it in the same second, ``<name>-2.log``,
    ``-3``, ... Each is created exclusively (O_EXCL), so two runs never write into one file, interleaved."""
    for n in range(1, 10_000):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        except FileExistsError:
            continue
        return candidate, open(fd, "a", encoding="utf-8")
    raise MigrateError(f"{path.parent}: 10,000 run logs named {path.stem}-N: remove old ones")


def _captured_names() -> list[str]:
    """Our loggers, and those below them that have handlers of their own (Dask configures several)."""
    children = [
        name
        for name, log in list(logging.root.manager.loggerDict.items())
        if isinstance(log, logging.Logger)
        and log.handlers
        and any(name.startswith(prefix + ".") for prefix in CAPTURED_LOGGERS)
    ]
    return [*CAPTURED_LOGGERS, *sorted(children)]


class _FileHandler(logging.Handler):
    def __init__(self, log: RunLog) -> None:
        super().__init__(logging.NOTSET)
        self.log = log
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.write(f"{record.levelname} {record.name}: {self.format(record)}", at=record.created)
        except Exception:
            self.handleError(record)


class RunLog:
    """Messages to the terminal and, timestamped, to ``path``; Dask's and our loggers to ``path`` only."""

    def __init__(
        self,
        path: Path,
        command: str,
        argv: list[str] | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        self.path = path
        self.command = command
        self.argv = argv if argv is not None else [command]
        self._stdout = stdout
        self._stderr = stderr
        self._file: TextIO | None = None
        self._lock = threading.Lock()
        self._saved: dict[str, tuple[list[logging.Handler], bool, int]] = {}
        self._previous: RunLog | None = None
        self._handler = _FileHandler(self)

    @classmethod
    def beside(cls, plan_path: str | Path, verb: str, argv: list[str] | None = None) -> RunLog:
        return cls(run_log_path(plan_path, verb), verb, argv)

    @property
    def stdout(self) -> TextIO:
        return self._stdout or sys.stdout  # looked up late: a test harness replaces sys.stdout

    @property
    def stderr(self) -> TextIO:
        return self._stderr or sys.stderr

    def write(self, message: str, at: float | None = None) -> None:
        """The file only: one timestamped line per line of ``message``."""
        with self._lock:
            if self._file is None:
                return
            when = stamp(at)
            for line in message.splitlines() or [""]:
                self._file.write(f"{when} {line}\n")
            self._file.flush()

    def note(self, message: str) -> None:
        print(message, file=self.stderr, flush=True)
        self.write(message)

    def emit(self, text: str) -> None:
        self.write(text)
        _print_result(text, self.stdout)

    def rewrite(self, line: str, final: bool = False) -> None:
        """A terminal's progress line, rewritten in place (the file gets ``note``'s lines, less often)."""
        print(f"\r{line}\033[K", end="\n" if final else "", file=self.stderr, flush=True)

    def exception(self, message: str, exc: BaseException) -> None:
        """An unexpected error: its traceback in the file, where it can be read and reported."""
        self.write(message + "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())

    def __enter__(self) -> RunLog:
        global _current
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self._file = open_run_log(self.path)
        self.write(f"kafka-log-migrate {' '.join(self.argv)} (version {__version__})")
        self.take_over_loggers()
        logging.getLogger("migrate").setLevel(logging.INFO)
        logging.captureWarnings(True)  # Python warnings (Dask's "port in use" ...) go to py.warnings, so to the file
        self._previous, _current = _current, self
        self.note(f"run log: {self.path}")
        return self

    def take_over_loggers(self) -> None:
        """Our loggers and Dask's into the file, once each. Importing ``distributed`` gives its loggers terminal
        handlers, and it is imported only where a cluster starts (0.5-0.9 s that a serial or driver-only verb
        skips), so the Dask engine calls this again after its import (``adopt_new_loggers``)."""
        for name in _captured_names():
            if name in self._saved:
                continue
            log = logging.getLogger(name)
            self._saved[name] = (list(log.handlers), log.propagate, log.level)
            # terminal handlers give way to the file; others (Dask's in-memory ones for its dashboard) stay
            for h in list(log.handlers):
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                    log.removeHandler(h)
            if name in CAPTURED_LOGGERS or not log.propagate:
                log.addHandler(self._handler)
                log.propagate = False

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        global _current
        if exc is not None and not isinstance(exc, (MigrateError, KeyboardInterrupt, SystemExit)):
            self.exception("unexpected error", exc)
        self.note(f"run log: {self.path}")
        _current = self._previous
        logging.captureWarnings(False)
        for name, (handlers, propagate, level) in self._saved.items():
            log = logging.getLogger(name)
            for h in list(log.handlers):
                log.removeHandler(h)
            for h in handlers:
                log.addHandler(h)
            log.propagate = propagate
            log.setLevel(level)
        self._saved.clear()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


# --- progress ---------------------------------------------------------------------------------------------------


class ProgressOutput(Protocol):
    def note(self, message: str) -> None: ...  # a line of its own, on stderr and in the run log

    def write(self, message: str) -> None: ...  # the run log only

    def rewrite(self, line: str, final: bool = False) -> None: ...  # a terminal's line, rewritten in place


class SeenSegments:
    """Which of a plan's segments were counted already: a bit per planned segment, in a bytearray per partition
    (found by its base offset among the partition's segments, in the plan's order), not a set of keys: a million
    segments cost 125 KB here, not the ~200 MB of a million tuples. A segment the plan does not name (none should
    come) is remembered by its key."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.bits: dict[tuple[str, str], bytearray] = {}
        self.unplanned: set[tuple[str, str, int]] = set()
        # the last partition asked of, its segments' positions by base offset: segments come a partition at a time
        self._last: tuple[tuple[str, str], dict[int, int]] | None = None

    def _where(self, log_dir: str, partition: str, base_offset: int) -> tuple[bytearray, int] | None:
        key = (log_dir, partition)
        bits = self.bits.get(key)
        last = self._last
        if bits is not None and last is not None and last[0] == key:
            index = last[1].get(base_offset)
            return None if index is None else (bits, index)
        try:
            part = self.plan.partition(log_dir, partition)
        except (KeyError, ValueError):
            return None
        index = _position(part, base_offset)
        if index is None:
            return None
        if bits is None:
            bits = self.bits[key] = bytearray((len(part.segments) + 7) // 8)
        self._last = (key, {base: i for i, base in enumerate(part.sizes_by_base())})
        return bits, index

    def has(self, log_dir: str, partition: str, base_offset: int) -> bool:
        where = self._where(log_dir, partition, base_offset)
        if where is None:
            return (log_dir, partition, base_offset) in self.unplanned
        bits, index = where
        return bool(bits[index >> 3] & (1 << (index & 7)))

    def add(self, log_dir: str, partition: str, base_offset: int) -> bool:
        """Mark the segment seen; whether it was new."""
        where = self._where(log_dir, partition, base_offset)
        if where is None:
            key = (log_dir, partition, base_offset)
            new = key not in self.unplanned
            self.unplanned.add(key)
            return new
        bits, index = where
        mask = 1 << (index & 7)
        if bits[index >> 3] & mask:
            return False
        bits[index >> 3] |= mask
        return True


def _position(part: PartitionPlan, base_offset: int) -> int | None:
    """The segment's index in ``part.segments`` (ordered by base offset), or None if it has none there."""
    segments = part.segments
    if isinstance(segments, SegmentRows):  # a columnar plan's: a search in its base offsets, no record built per probe
        rows = segments.rows
        bases = segments.columns.ints["base_offset"][rows.start : rows.stop]
        index = int(np.searchsorted(bases, base_offset))
        return index if index < len(bases) and int(bases[index]) == base_offset else None
    index = bisect.bisect_left(segments, base_offset, key=_base_offset)
    return index if index < len(segments) and segments[index].base_offset == base_offset else None


def _base_offset(segment: SegmentPlan) -> int:
    return segment.base_offset


class Progress:
    """Finished segments of a plan, as a line: bytes done of the total, MB/s, ETA, failures so far.

    Without a terminal, a line of its own every ``interval`` seconds; on a terminal, one line rewritten in place
    (and a line in the run log every ``interval``). The figures are the dashboard's fold (``RunProgress``) of the
    segments fed here, each counted once however often it arrives. Thread-safe: segments arrive on the Dask client's
    event thread while the ticker prints. ``clock`` is injectable so that tests drive time instead of waiting for it."""

    def __init__(
        self,
        plan: Plan,
        out: ProgressOutput,
        tty: bool = False,
        interval: float = PROGRESS_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.out = out
        self.tty = tty
        self.interval = interval
        self.clock = clock
        self.total_segments = plan.estimates.segments
        self.stage_name = ""
        self.fold = RunProgress(plan.plan_id, clock)
        self.fold.plan(plan_event(plan))
        self.fold.throughput.begin(clock())  # until the conversion starts (``stage``)
        self.seen = SeenSegments(plan)
        self.last_line = -float("inf")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def done_bytes(self) -> int:
        """Every finished segment's bytes, whatever its outcome, and converted ranges': what is left is the ETA's."""
        with self._lock:
            return self.fold.sum().finished.bytes

    @property
    def done_segments(self) -> int:
        with self._lock:
            return self.fold.sum().finished.segments

    def segment(self, o: SegmentOutcome | RangeProgress) -> None:
        with self._lock:
            if isinstance(o, SegmentOutcome):
                if not self.seen.add(o.log_dir, o.partition, o.base_offset):
                    return
            elif self.seen.has(o.log_dir, o.partition, o.base_offset):
                return  # a range of a segment counted already
            self.fold.segment(segment_event(o, self.plan))

    def returned(self, stage: Stage, value: Any) -> None:
        """What a call that ran returned, as each call comes back: for a convert or join call its outcomes, what a
        live feed missed (Spark has none; skipped segments are not fed). The stage says what its value is (one
        result record per stage)."""
        if stage not in (Stage.CONVERT, Stage.JOIN):
            return
        converted: ConvertTaskResult = value
        for o in converted.outcomes:
            self.segment(o)

    def stage(self, name: str) -> None:
        with self._lock:
            if name == "convert" and self.fold.throughput.first_work is None:
                self.fold.throughput.begin(self.clock())  # the rate is the conversion's, not the engine's start-up's
            self.stage_name = name

    def line(self, now: float | None = None, ending: str | None = None) -> str:
        """The progress line; ``ending``: the last line's first word, where the run did not finish cleanly
        ("interrupted", "stopped", "ended"): its bytes and share are then those converted, failed segments apart, so
        that a run that failed or was cut short never reads "(100%)"."""
        now = self.clock() if now is None else now
        with self._lock:
            totals = self.fold.sum()
            rate = self.fold.rate(now)
            eta = self.fold.eta(now) if totals.pending.bytes else 0.0
        total, done, segments = totals.planned.bytes, totals.finished.bytes, totals.finished.segments
        if ending is not None:  # what this run converted: neither the failed nor the skipped (done before, or left)
            done, segments = totals.verified.bytes + totals.in_ranges, totals.verified.segments
        share = done / total if total else 1.0
        head = ending or self.stage_name or "starting"
        what = " converted by this run" if ending is not None else ""
        timing = "" if ending is not None else f", {'ETA unknown' if eta is None else f'ETA {human_seconds(eta)}'}"
        skipped = f", {totals.skipped.segments} skipped" if ending is not None and totals.skipped.segments else ""
        return (
            f"{head}: {human_bytes(done)} of {human_bytes(total)}{what} ({_share(share)}), "
            f"{segments} of {self.total_segments} segments, {human_rate(rate)}{timing}, "
            f"{totals.failed.segments} failed{skipped}"
        )

    def tick(self, final: bool = False, ending: str | None = None) -> None:
        """Show the line: on a terminal at every tick; as a line of its own (in the run log too) every ``interval``
        seconds, and once more at the end."""
        now = self.clock()
        due = final or now - self.last_line >= self.interval
        if not (due or self.tty):
            return
        line = self.line(now, ending)
        if self.tty:
            self.out.rewrite(line, final)
        if due:
            self.last_line = now
            if self.tty:
                self.out.write(line)
            else:
                self.out.note(line)

    def _run(self) -> None:
        while not self._stop.wait(TTY_REFRESH_SECONDS if self.tty else min(self.interval, 1.0)):
            self.tick()

    def __enter__(self) -> Progress:
        self.last_line = self.clock()  # the first line after one interval, not at once
        self._thread = threading.Thread(target=self._run, name="kafka-log-migrate-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc is not None and not isinstance(exc, KeyboardInterrupt) and not self.done_segments:
            return  # refused before any work (the error says why): a line of zeros would add nothing
        if exc is not None:
            ending: str | None = "interrupted" if isinstance(exc, KeyboardInterrupt) else "stopped"
        else:
            ending = "ended" if self.fold.sum().failed.segments else None
        self.stage("finished")
        self.tick(final=True, ending=ending)


def _share(share: float) -> str:
    """A share as a whole percentage that says 100% only when all of it is there (99.6% is "99%")."""
    return "99%" if 0.995 <= share < 1.0 else f"{share:.0%}"


def result(data: Any, as_json: bool, text: str, page: bool = False) -> None:
    """A command's result: JSON for machines or text for people, on stdout (and in the run log). ``page``: text
    longer than the terminal goes through the operator's pager ($PAGER, else less) when stdout is a terminal; in
    full, unpaged, anywhere else."""
    import json

    if as_json:
        emit(json.dumps(data, indent=2))
        return
    if page and sys.stdout.isatty() and text.count("\n") + 1 > shutil.get_terminal_size().lines - 2:
        import pydoc

        if _current is not None:
            _current.write(text)
        pydoc.pager(text)
        return
    emit(text)


class _Terminal:
    """Progress output when no run log is kept: the terminal only."""

    def note(self, message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def write(self, message: str) -> None:
        pass

    def rewrite(self, line: str, final: bool = False) -> None:
        print(f"\r{line}\033[K", end="\n" if final else "", file=sys.stderr, flush=True)


def output() -> ProgressOutput:
    """Where progress lines go: the run log of this command, or the terminal alone."""
    return _current if _current is not None else _Terminal()
