"""The run's state of one log dir: a SQLite database beside the data, so each broker stays self-describing.

Why SQLite and not a journal of lines: a transaction groups a task's segment outcomes (one commit per task, not one
fsync per event); a full disk fails a commit cleanly (SQLITE_FULL rolls the transaction back) instead of tearing a
line that poisons every later read; status is an indexed query instead of a re-fold of the whole history, so the cost
per event stays constant at 10^5 segments. WAL with ``synchronous=FULL`` makes every commit durable before it
returns: what a rollback must know is committed before the rename it describes.

The file is ``<log dir>/.kafka-log-migrate-<plan id>.db`` (with SQLite's ``-wal`` and ``-shm`` while open): a hidden
regular file in the log dir root, which Kafka's loader ignores. Tables:

    meta(key, value)                          plan id, phase, whether Kafka's .lock existed
    partitions(name, state, problem, ...)     one row per planned partition: PartitionState, and from its swap on
                                              its two directories (PartitionExchange)
    segments(partition, base, state, ...)     one row per planned segment: SegmentState and its conversion result
    events(id, time, kind, partition, ...)    the history, append-only: EventKind
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from migrate.codec import dumps_compact, from_json, loads_text, to_json
from migrate.errors import MigrateError, StateWriteError
from migrate.model.plan_tree import LogDirPlan
from migrate.model.run_state import (
    EVERY_PARTITION,
    EventKind,
    LiveVerdict,
    LogDirPhase,
    PartitionExchange,
    PartitionRange,
    PartitionState,
    PartitionStatus,
    Problem,
    SegmentOutcome,
    SegmentResult,
    SegmentState,
)
from migrate.run import faults
from migrate.run.workspace import fsync_dir, state_path

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS partitions(
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    problem TEXT,
    exchange TEXT,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS segments(
    partition TEXT NOT NULL,
    base INTEGER NOT NULL,
    state TEXT NOT NULL,
    result TEXT,
    problem TEXT,
    source_bytes INTEGER NOT NULL DEFAULT 0,
    output_bytes INTEGER NOT NULL DEFAULT 0,
    records INTEGER NOT NULL DEFAULT 0,
    convert_seconds REAL NOT NULL DEFAULT 0,
    verify_seconds REAL NOT NULL DEFAULT 0,
    updated REAL NOT NULL,
    PRIMARY KEY(partition, base)
);
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    partition TEXT,
    base INTEGER,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS partitions_by_state ON partitions(state);
CREATE INDEX IF NOT EXISTS segments_by_state ON segments(state);
"""


def _within(column: str, within: PartitionRange) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (to append after a WHERE) and its parameters for ``column`` in ``within``: SQLite orders
    TEXT by its UTF-8 bytes, which is Python's order of the names."""
    where = ""
    bounds: tuple[str, ...] = ()
    if within.first is not None:
        where, bounds = f" AND {column} >= ?", (within.first,)
    if within.end is not None:
        where, bounds = where + f" AND {column} < ?", (*bounds, within.end)
    return where, bounds


BUSY_TIMEOUT_MS = 120_000  # workers of one host commit task results into one database, one at a time


@dataclass(frozen=True)
class SegmentRow:
    """A segment's row as stored: its JSON columns are decoded on first use only, since status and the swap each
    need one of them at most (decoding every result of 10^6 rows is most of what such a verb would cost)."""

    partition: str
    base: int
    state: SegmentState
    result_text: str | None
    problem_text: str | None

    @cached_property
    def result(self) -> SegmentResult | None:
        return from_json(SegmentResult, loads_text(self.result_text)) if self.result_text else None

    @cached_property
    def problem(self) -> Problem | None:
        return from_json(Problem, json.loads(self.problem_text)) if self.problem_text else None


@dataclass(frozen=True)
class ResultColumns:
    """The figures of a stored SegmentResult the run's report shows, read from its JSON without building the whole
    record (the report reads every planned segment's)."""

    batches_out: int
    magics_in: dict[str, int]
    first_offset: int | None
    last_offset: int | None
    mtime_timestamped_records: int
    truncated_tail_bytes: int
    output_count: int  # as SegmentResult.output_count

    @classmethod
    def of(cls, text: str) -> ResultColumns:
        data = loads_text(text)
        return cls(
            data.get("batches_out", 0),
            data.get("magics_in") or {},
            data.get("first_offset"),
            data.get("last_offset"),
            data.get("mtime_timestamped_records", 0),
            data.get("truncated_tail_bytes", 0),
            (1 if data.get("outputs") else 0) + len(data.get("parts") or ()),
        )


def _json(value: Any) -> str | None:
    return None if value is None else _dumps(to_json(value))


def _dumps(data: Any) -> str:
    return dumps_compact(data)


def _write_error(exc: BaseException, path: Path) -> StateWriteError:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "full" in text:
        advice = "The filesystem is full: free space on it, then run `execute` again to resume (or `rollback`)."
    elif isinstance(exc, OSError):
        from migrate.model.run_state import _os_error_text

        return StateWriteError(f"cannot record the run's state in {path}: {_os_error_text(exc)}")
    else:
        advice = "Check the disk (dmesg) and free space, then run the same command again; it resumes."
    return StateWriteError(f"cannot record the run's state in {path}: {text}. {advice}")


class StateHealth(str, enum.Enum):
    """What the state database of a log dir and plan is, before anything trusts it."""

    MISSING = "missing"
    EMPTY = "empty"  # created, nothing committed (a crash before the first commit)
    UNREADABLE = "unreadable"  # truncated, overwritten, not SQLite, or its tables gone
    OTHER_PLAN = "other-plan"  # a database of another plan copied to this name
    OK = "ok"

    def __str__(self) -> str:
        return self.value


class StateStore:
    """The state of one log dir for one plan. Open with ``StateStore.open``; every write is one transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn
        # the file this connection writes: a database deleted or replaced under a run must stop it, not be written
        # into a file nobody will read again
        st = os.stat(path)
        self._identity = (st.st_dev, st.st_ino)

    @classmethod
    def health(cls, log_dir: str | Path, plan_id: str) -> StateHealth:
        path = state_path(log_dir, plan_id)
        if not path.exists():
            return StateHealth.MISSING
        # read-only, and leaving no trace: a database in WAL mode opened read-only gets -wal and -shm files that
        # only a writer removes, so where no -wal exists (no connection is open, everything is in the main file)
        # it is read as immutable, which creates neither; a -wal present is a run's, read through it as SQLite does
        immutable = "" if Path(f"{path}-wal").exists() else "&immutable=1"
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro{immutable}", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error:
            return StateHealth.UNREADABLE
        try:
            tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not tables:
                return StateHealth.EMPTY
            if not {"meta", "partitions", "segments", "events"} <= tables:
                return StateHealth.UNREADABLE
            row = conn.execute("SELECT value FROM meta WHERE key='plan_id'").fetchone()
            if row is None:
                return StateHealth.EMPTY
            if row[0] != plan_id:
                return StateHealth.OTHER_PLAN
            conn.execute("SELECT count(*) FROM segments").fetchone()  # reads every page of the table: torn shows
            return StateHealth.OK
        except sqlite3.Error:
            return StateHealth.UNREADABLE
        finally:
            conn.close()

    @classmethod
    def quarantine(cls, log_dir: str | Path, plan_id: str) -> Path:
        """Move an unusable database aside (kept for whoever investigates, a hidden file Kafka ignores) so that a
        new one can be rebuilt from the files; returns where it went."""
        path = state_path(log_dir, plan_id)
        aside = path.with_name(f"{path.name}.unusable-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        for suffix in ("-wal", "-shm", ""):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        fsync_dir(log_dir)
        return aside

    # --- opening ---------------------------------------------------------------------------------------------

    @classmethod
    def exists(cls, log_dir: str | Path, plan_id: str) -> bool:
        return state_path(log_dir, plan_id).exists()

    @classmethod
    def open(cls, log_dir: str | Path, plan_id: str, create: bool = False) -> StateStore:
        path = state_path(log_dir, plan_id)
        if not create and not path.exists():
            raise MigrateError(f"{log_dir}: no state of plan {plan_id} here (no run of it has started)")
        return cls.open_file(path)

    @classmethod
    def open_file(cls, path: Path) -> StateStore:
        conn = None
        try:
            conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()  # a full disk must not leave the file open (an unmount, a retry)
            raise _write_error(exc, path) from exc
        return cls(path, conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, name: str) -> Iterator[sqlite3.Connection]:
        """One durable transaction; ``commit:<name>`` is a fault point right after it is durable."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _write_error(exc, self.path) from exc
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == self._identity
        except FileNotFoundError:
            same = False
        if not same:
            self.conn.execute("ROLLBACK")
            raise StateWriteError(
                f"the run's state database {self.path} was deleted or replaced while this run was using it, so this "
                "run stopped before recording anything more. The files are the truth: run the same command again "
                "(`execute` or `rollback` with the same plan); it rebuilds the state from each partition's swap "
                "record and backups."
            )
        try:
            yield self.conn
            faults.point(f"before:commit:{name}")
            self.conn.execute("COMMIT")
        except BaseException as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise _write_error(exc, self.path) from exc
            raise
        faults.point(f"commit:{name}")

    def _event(
        self, db: sqlite3.Connection, kind: EventKind, partition: str | None = None, base: int | None = None, **detail
    ) -> None:
        db.execute(
            "INSERT INTO events(time, kind, partition, base, detail) VALUES (?, ?, ?, ?, ?)",
            (time.time(), kind.value, partition, base, json.dumps(detail, default=str) if detail else None),
        )

    def initialize(self, plan_id: str, entry: LogDirPlan, lock_existed: bool) -> None:
        """Record every planned partition and segment as planned, once, at the first prepare."""
        now = time.time()
        with self.transaction("initialized") as db:
            if self.get_meta("plan_id") is not None:
                return
            db.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [
                    ("plan_id", plan_id),
                    ("log_dir", entry.log_dir),
                    ("lock_existed", "1" if lock_existed else "0"),
                    ("phase", LogDirPhase.EXECUTING.value),
                    ("created", str(now)),
                ],
            )
            db.executemany(
                "INSERT INTO partitions(name, state, updated) VALUES (?, ?, ?)",
                [(p.name, PartitionState.PLANNED.value, now) for p in entry.partitions],
            )
            db.executemany(
                "INSERT INTO segments(partition, base, state, updated) VALUES (?, ?, ?, ?)",
                [
                    (p.name, identity[0], SegmentState.PLANNED.value, now)
                    for p in entry.partitions
                    for identity in p.identities()
                ],
            )
            self._event(db, EventKind.PREPARED, partitions=len(entry.partitions))

    def set_meta(self, key: str, value: str, event: EventKind | None = None, **detail: Any) -> None:
        with self.transaction(event.value if event else f"meta-{key}") as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
            if event is not None:
                self._event(db, event, **detail)

    def set_phase(self, phase: LogDirPhase, event: EventKind | None = None, **detail: Any) -> None:
        self.set_meta("phase", phase.value, event, **detail)

    def record_event(self, kind: EventKind, **detail: Any) -> None:
        with self.transaction(kind.value) as db:
            self._event(db, kind, **detail)

    def record_outcomes(self, outcomes: list[SegmentOutcome]) -> None:
        """A task's results: every segment's outcome and the resulting partition states, in one transaction."""
        if not outcomes:
            return
        now = time.time()
        states = {
            "verified": SegmentState.VERIFIED,
            "unchanged": SegmentState.UNCHANGED,
            "refused": SegmentState.REFUSED,
            "failed": SegmentState.FAILED,
        }
        kinds = {
            SegmentState.VERIFIED: EventKind.SEGMENT_VERIFIED,
            SegmentState.UNCHANGED: EventKind.SEGMENT_UNCHANGED,
            SegmentState.REFUSED: EventKind.SEGMENT_REFUSED,
            SegmentState.FAILED: EventKind.SEGMENT_FAILED,
        }
        # encoded before the transaction, written with one executemany each: the write lock, which the host's other
        # workers wait for, is held for the inserts alone
        rows: list[tuple[Any, ...]] = []
        events: list[tuple[Any, ...]] = []
        touched: dict[str, Problem | None] = {}
        for o in outcomes:
            state = states.get(o.outcome.value)
            if state is None:
                continue
            rows.append(
                (
                    state.value,
                    o.result_text if o.result_text is not None else _json(o.result),
                    _json(o.problem),
                    o.source_bytes,
                    o.output_bytes,
                    o.records,
                    o.convert_seconds,
                    o.verify_seconds,
                    now,
                    o.partition,
                    o.base_offset,
                )
            )
            detail = json.dumps({"problem": o.problem.message}, default=str) if o.problem else None
            events.append((now, kinds[state].value, o.partition, o.base_offset, detail))
            if o.problem is not None and touched.get(o.partition) is None:
                touched[o.partition] = o.problem
            else:
                touched.setdefault(o.partition, None)
        with self.transaction("outcomes") as db:
            db.executemany(
                "UPDATE segments SET state=?, result=?, problem=?, source_bytes=?, output_bytes=?, records=?, "
                "convert_seconds=?, verify_seconds=?, updated=? WHERE partition=? AND base=?",
                rows,
            )
            db.executemany("INSERT INTO events(time, kind, partition, base, detail) VALUES (?, ?, ?, ?, ?)", events)
            for name, problem in touched.items():
                self._settle_partition(db, name, problem, now)

    def _settle_partition(self, db: sqlite3.Connection, name: str, problem: Problem | None, now: float) -> None:
        counts = dict(db.execute("SELECT state, count(*) FROM segments WHERE partition=? GROUP BY state", (name,)))
        bad = counts.get(SegmentState.REFUSED.value, 0) + counts.get(SegmentState.FAILED.value, 0)
        if bad:
            if problem is None:
                row = db.execute(
                    "SELECT problem FROM segments WHERE partition=? AND problem IS NOT NULL LIMIT 1", (name,)
                ).fetchone()
                problem = from_json(Problem, json.loads(row[0])) if row else None
            state = PartitionState.FAILED
        elif set(counts) <= {SegmentState.VERIFIED.value, SegmentState.UNCHANGED.value}:
            state = PartitionState.READY
        else:
            state = PartitionState.CONVERTING
        db.execute(
            "UPDATE partitions SET state=?, problem=?, updated=? WHERE name=?",
            (state.value, _json(problem), now, name),
        )
        if state == PartitionState.FAILED:
            self._event(db, EventKind.PARTITION_FAILED, name, problem=problem.message if problem else None)

    def fail_partition(self, name: str, problem: Problem) -> None:
        """A partition that must not be swapped (a live file changed): untouched, failed, retried by the next run;
        wholly original, so it has no directories of a swap to find."""
        with self.transaction("partition-failed") as db:
            db.execute(
                "UPDATE partitions SET state=?, problem=?, exchange=NULL, updated=? WHERE name=?",
                (PartitionState.FAILED.value, _json(problem), time.time(), name),
            )
            self._event(db, EventKind.PARTITION_FAILED, name, problem=problem.message)

    def reset_for_retry(self, keep_verified: Iterable[tuple[str, int]]) -> int:
        """At the start of a run: failed and refused segments, and verified ones whose staged files are gone, are
        planned again; their partitions too. Returns how many segments were reset."""
        keep = set(keep_verified)
        now = time.time()
        with self.transaction("reset") as db:
            # only partitions whose swap has not begun: a swapping one's staged files are (partly) live already
            rows = db.execute(
                "SELECT s.partition, s.base, s.state FROM segments s JOIN partitions p ON p.name = s.partition "
                "WHERE s.state IN (?, ?, ?) AND p.state IN (?, ?, ?, ?)",
                (
                    SegmentState.REFUSED.value,
                    SegmentState.FAILED.value,
                    SegmentState.VERIFIED.value,
                    PartitionState.PLANNED.value,
                    PartitionState.CONVERTING.value,
                    PartitionState.READY.value,
                    PartitionState.FAILED.value,
                ),
            ).fetchall()
            reset = [
                (now, part, base)
                for part, base, state in rows
                if state != SegmentState.VERIFIED.value or (part, base) not in keep
            ]
            db.executemany(
                "UPDATE segments SET state='planned', result=NULL, problem=NULL, updated=? "
                "WHERE partition=? AND base=?",
                reset,
            )
            parts = {p for _, p, _ in reset}
            parts.update(
                name
                for (name,) in db.execute("SELECT name FROM partitions WHERE state=?", (PartitionState.FAILED.value,))
            )
            for name in parts:
                self._settle_partition(db, name, None, now)
            return len(reset)

    def begin_exchange(self, batch: list[tuple[str, PartitionExchange]]) -> None:
        """Before the first rename of a batch: each partition's two directories, and the partitions SWAPPING. One
        commit for the whole batch; after it, a crash leaves them SWAPPING, and both recoveries find the directories
        by these identities wherever the crash left them."""
        now = time.time()
        with self.transaction("swap-begun") as db:
            db.executemany(
                "UPDATE partitions SET state=?, exchange=?, updated=? WHERE name=?",
                [(PartitionState.SWAPPING.value, _json(exchange), now, name) for name, exchange in batch],
            )
            db.executemany(
                "INSERT INTO events(time, kind, partition, base, detail) VALUES (?, ?, ?, NULL, NULL)",
                [(now, EventKind.SWAP_BEGUN.value, name) for name, _ in batch],
            )

    def adopt_exchange(
        self,
        name: str,
        exchange: PartitionExchange,
        state: PartitionState,
        results: list[tuple[int, SegmentResult]],
        why: str,
    ) -> None:
        """A partition whose files show a swap this database does not know (it lost its last commits, or was
        rebuilt): its directories and converted segments as the swap record states them, and the state the files
        say (swapping: execute finishes it and rollback undoes it; migrated: done)."""
        now = time.time()
        segment_state = SegmentState.SWAPPED if state == PartitionState.MIGRATED else SegmentState.VERIFIED
        with self.transaction("state-corrected") as db:
            db.executemany(
                "UPDATE segments SET result=?, state=?, problem=NULL, updated=? WHERE partition=? AND base=?",
                [(_json(result), segment_state.value, now, name, base) for base, result in results],
            )
            db.execute(
                "UPDATE partitions SET state=?, exchange=?, problem=NULL, updated=? WHERE name=?",
                (state.value, _json(exchange), now, name),
            )
            self._event(db, EventKind.STATE_CORRECTED, name, why=why)

    def set_partitions(
        self, names: list[str], state: PartitionState, event: EventKind, segment_state: SegmentState | None = None
    ) -> None:
        now = time.time()
        # a partition wholly original again (rolled back, or its swap stopped before anything moved) has no
        # directories of a swap to find any more
        keeps_exchange = state not in (PartitionState.ROLLED_BACK, PartitionState.PLANNED, PartitionState.READY)
        with self.transaction(event.value) as db:
            db.executemany(
                "UPDATE partitions SET state=?, problem=NULL, updated=?"
                + ("" if keeps_exchange else ", exchange=NULL")
                + " WHERE name=?",
                [(state.value, now, n) for n in names],
            )
            if segment_state is not None:
                db.executemany(
                    "UPDATE segments SET state=?, updated=? WHERE partition=? AND state IN (?, ?)",
                    [
                        (segment_state.value, now, n, SegmentState.VERIFIED.value, SegmentState.SWAPPED.value)
                        for n in names
                    ],
                )
            for n in names:
                self._event(db, event, n)

    def reset_rolled_back(self, names: list[str]) -> None:
        """Partitions a rollback restored are planned again when execute is run after it."""
        now = time.time()
        with self.transaction("replanned") as db:
            db.executemany(
                "UPDATE partitions SET state='planned', problem=NULL, exchange=NULL, updated=? WHERE name=?",
                [(now, n) for n in names],
            )
            db.executemany(
                "UPDATE segments SET state='planned', result=NULL, problem=NULL, updated=? WHERE partition=?",
                [(now, n) for n in names],
            )

    # --- reading ---------------------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @property
    def phase(self) -> LogDirPhase:
        value = self.get_meta("phase")
        return LogDirPhase(value) if value else LogDirPhase.NEW

    @property
    def lock_existed(self) -> bool | None:
        value = self.get_meta("lock_existed")
        return None if value is None else value == "1"

    def partition_states(self, names: Iterable[str] | None = None) -> dict[str, PartitionState]:
        """Every partition's state, or those of ``names`` (each found by its key): a convert task asks for its few
        partitions, not the log dir's 10^4 once per task (at 10^6 segments that read 39 M rows in all)."""
        if names is None:
            return {n: PartitionState(s) for n, s in self.conn.execute("SELECT name, state FROM partitions")}
        out: dict[str, PartitionState] = {}
        for name in names:
            row = self.conn.execute("SELECT state FROM partitions WHERE name=?", (name,)).fetchone()
            if row is not None:
                out[name] = PartitionState(row[0])
        return out

    def partitions_in(self, *states: PartitionState) -> list[str]:
        marks = ",".join("?" * len(states))
        rows = self.conn.execute(
            f"SELECT name FROM partitions WHERE state IN ({marks}) ORDER BY name", [s.value for s in states]
        )
        return [n for (n,) in rows]

    def segment_states(self, partitions: Iterable[str] | None = None) -> dict[tuple[str, int], SegmentState]:
        if partitions is None:
            rows = self.conn.execute("SELECT partition, base, state FROM segments")
            return {(p, b): SegmentState(s) for p, b, s in rows}
        out: dict[tuple[str, int], SegmentState] = {}
        for name in partitions:
            for b, s in self.conn.execute("SELECT base, state FROM segments WHERE partition=?", (name,)):
                out[(name, b)] = SegmentState(s)
        return out

    def segments_of(self, partition: str) -> list[SegmentRow]:
        rows = self.conn.execute(
            "SELECT partition, base, state, result, problem FROM segments WHERE partition=? ORDER BY base",
            (partition,),
        )
        return [self._row(r) for r in rows]

    def exchange_of(self, partition: str) -> PartitionExchange | None:
        """The partition's two directories, from its swap on (None before it, and after a rollback)."""
        row = self.conn.execute("SELECT exchange FROM partitions WHERE name=?", (partition,)).fetchone()
        return from_json(PartitionExchange, json.loads(row[0])) if row and row[0] else None

    def exchanges(
        self, within: PartitionRange = EVERY_PARTITION
    ) -> dict[str, tuple[PartitionState, PartitionExchange]]:
        """(state, directories) of every partition whose swap began, by name: one query for the log dir."""
        where, bounds = _within("name", within)
        rows = self.conn.execute(
            "SELECT name, state, exchange FROM partitions WHERE exchange IS NOT NULL" + where + " ORDER BY name",
            bounds,
        )
        return {
            name: (PartitionState(state), from_json(PartitionExchange, json.loads(text))) for name, state, text in rows
        }

    def verified_texts_of(self, partition: str) -> list[tuple[int, str | None]]:
        """(base, result JSON) of the partition's verified segments, by base offset: what its swap reads (no
        SegmentRow per segment)."""
        return self.conn.execute(
            "SELECT base, result FROM segments WHERE partition=? AND state=? ORDER BY base",
            (partition, SegmentState.VERIFIED.value),
        ).fetchall()

    def converted_results(self) -> Iterator[tuple[str, int, SegmentResult]]:
        """Every segment this run converted, swapped in or not yet."""
        rows = self.conn.execute(
            "SELECT partition, base, result FROM segments WHERE state IN (?, ?) ORDER BY partition, base",
            (SegmentState.VERIFIED.value, SegmentState.SWAPPED.value),
        )
        for part, base, result in rows:
            yield part, base, from_json(SegmentResult, loads_text(result))

    def verified_results(self) -> Iterator[tuple[str, int, SegmentResult]]:
        """Every verified segment not yet swapped in, with its result."""
        rows = self.conn.execute(
            "SELECT partition, base, result FROM segments WHERE state=? AND result IS NOT NULL "
            "ORDER BY partition, base",
            (SegmentState.VERIFIED.value,),
        )
        for part, base, result in rows:
            yield part, base, from_json(SegmentResult, loads_text(result))

    @staticmethod
    def _row(r: tuple) -> SegmentRow:
        part, base, state, result, problem = r
        return SegmentRow(part, base, SegmentState(state), result, problem)

    def partition_statuses(self, log_dir: str, within: PartitionRange = EVERY_PARTITION) -> list[PartitionStatus]:
        counts: dict[str, dict[str, int]] = {}
        where, bounds = _within("partition", within)
        for part, state, n in self.conn.execute(
            "SELECT partition, state, count(*) FROM segments WHERE 1" + where + " GROUP BY 1, 2", bounds
        ):
            counts.setdefault(part, {})[state] = n
        out = []
        where, bounds = _within("name", within)
        for name, state, problem, updated in self.conn.execute(
            "SELECT name, state, problem, updated FROM partitions WHERE 1" + where + " ORDER BY name", bounds
        ):
            out.append(
                PartitionStatus(
                    log_dir,
                    name,
                    PartitionState(state),
                    counts.get(name, {}),
                    from_json(Problem, json.loads(problem)) if problem else None,
                    updated,
                )
            )
        return out

    def history(self, limit: int = 50) -> list[str]:
        """The log dir's milestones, newest last: runs, fence, swaps and rollbacks, failures (not every segment, nor
        each call of a verify of the live files: a verify reports itself, and its record is finalize's to read)."""
        skip = (EventKind.SEGMENT_VERIFIED.value, EventKind.SEGMENT_UNCHANGED.value, EventKind.LIVE_VERIFIED.value)
        rows = self.conn.execute(
            f"SELECT time, kind, partition, detail FROM events WHERE kind NOT IN ({','.join('?' * len(skip))}) "
            "ORDER BY id DESC LIMIT ?",
            (*skip, limit),
        ).fetchall()
        out = []
        for at, kind, part, detail in reversed(rows):
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
            text = f"{stamp} {kind}" + (f" {part}" if part else "")
            if detail:
                text += " " + ", ".join(f"{k}={v}" for k, v in json.loads(detail).items())
            out.append(text)
        return out

    def totals(self) -> dict[str, int]:
        row = self.conn.execute(
            "SELECT count(*), coalesce(sum(source_bytes),0), coalesce(sum(output_bytes),0), coalesce(sum(records),0) "
            "FROM segments WHERE state IN ('verified', 'swapped', 'unchanged')"
        ).fetchone()
        return {"segments": row[0], "source_bytes": row[1], "output_bytes": row[2], "records": row[3]}

    def checkpoint(self) -> None:
        """Everything committed moved into the database file itself (the WAL emptied): the file alone is then the
        whole state, to archive beside the plan."""
        try:
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            raise _write_error(exc, self.path) from exc

    # --- reading for reports (read-only) ---------------------------------------------------------------------

    def segment_records(self) -> list[tuple[Any, ...]]:
        """Every planned segment as stored: (partition, base, state, result JSON, problem JSON, source_bytes,
        output_bytes, records, convert_seconds, verify_seconds), by partition and base offset."""
        return self.conn.execute(
            "SELECT partition, base, state, result, problem, source_bytes, output_bytes, records, convert_seconds, "
            "verify_seconds FROM segments ORDER BY partition, base"
        ).fetchall()

    def partition_records(self) -> list[tuple[str, str, str | None]]:
        """(name, state, problem JSON) of every planned partition."""
        return self.conn.execute("SELECT name, state, problem FROM partitions ORDER BY name").fetchall()

    def segment_figures(self) -> list[tuple[str, str, bool, int, int, int, int, int]]:
        """The run summary's sums without a row per segment in Python (a broker holds up to 10^6): per partition,
        segment state and whether a result is stored, (partition, state, has result, segments, source_bytes,
        output_bytes, records, largest mtime_timestamped_records of one segment)."""
        return self.conn.execute(
            "SELECT partition, state, result IS NOT NULL AS stored, COUNT(*), COALESCE(SUM(source_bytes), 0), "
            "COALESCE(SUM(output_bytes), 0), COALESCE(SUM(records), 0), "
            "COALESCE(MAX(json_extract(result, '$.mtime_timestamped_records')), 0) "
            "FROM segments GROUP BY partition, state, stored"
        ).fetchall()

    def segment_problems(self) -> list[tuple[str, int, str]]:
        """(partition, base, problem JSON) of every segment with a problem, by partition and base offset."""
        return self.conn.execute(
            "SELECT partition, base, problem FROM segments WHERE problem IS NOT NULL ORDER BY partition, base"
        ).fetchall()

    def failed_verify_since_swap(self) -> tuple[float, list[LiveVerdict]] | None:
        """The last verify of the live files since the last partition was swapped in, where it failed: when, and
        its failed calls; None where it passed, or none ran since."""
        rows = self.conn.execute(
            "SELECT time, detail FROM events WHERE kind=? AND id > "
            "(SELECT COALESCE(MAX(id), 0) FROM events WHERE kind=?) ORDER BY id",
            (EventKind.LIVE_VERIFIED.value, EventKind.PARTITION_MIGRATED.value),
        ).fetchall()
        verdicts = [(at, from_json(LiveVerdict, json.loads(text))) for at, text in rows]
        failed = [v for _, v in verdicts if v.run == verdicts[-1][1].run and not v.ok] if verdicts else []
        return (verdicts[-1][0], failed) if failed else None

    def last_event_time(self, kinds: Iterable[EventKind], start: float, limit: float) -> float | None:
        """The time of the latest event of ``kinds`` in [start, limit)."""
        names = [k.value for k in kinds]
        row = self.conn.execute(
            f"SELECT MAX(time) FROM events WHERE kind IN ({','.join('?' * len(names))}) AND time >= ? AND time < ?",
            [*names, start, limit],
        ).fetchone()
        return None if row is None else row[0]

    def event_records(self, kinds: Iterable[EventKind]) -> list[tuple[float, str, str | None, int | None]]:
        """(time, kind, partition, base) of the events of ``kinds``, oldest first."""
        names = [k.value for k in kinds]
        return self.conn.execute(
            f"SELECT time, kind, partition, base FROM events WHERE kind IN ({','.join('?' * len(names))}) ORDER BY id",
            names,
        ).fetchall()


def remove_state_files(log_dir: str | Path, plan_id: str) -> None:
    path = state_path(log_dir, plan_id)
    for suffix in ("-wal", "-shm", ""):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
