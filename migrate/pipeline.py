"""The migration as an operator runs it: execute (prepare, convert, swap), rollback, finalize, status, verify.

Stages run on an engine; each finishes everywhere before the next starts, so nothing live changes before every
segment of the run has been converted and verified. One run at a time holds a plan's state (``RunLock``). A run's
outcome is what the state stores say afterwards, never what a stage hoped: ``execute`` is ok only when every
planned partition of every log dir is migrated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrate.engines import CallResult, Engine, Fold, StageCall
from migrate.errors import MigrateError
from migrate.model.plan_tree import LogDirPlan, Plan, TaskPlan
from migrate.model.run_state import LogDirPhase, LogDirStatus, Stage
from migrate.model.stage_reports import (
    ArchiveCopy,
    ConvertTaskResult,
    CutoverReport,
    Divergence,
    ExecuteReport,
    FinalizeReport,
    LeaveReport,
    RangePart,
    ReplicaDigest,
    ReplicaRange,
    RollbackReport,
    SegmentFold,
    StageError,
    StateChunk,
    StatusReport,
    UncheckedReplica,
    VerifyReport,
)
from migrate.prestage.cutover import staging_held
from migrate.run.run_lock import RunLock
from migrate.run.state import StateStore
from migrate.run.workspace import durable_file, write_durably
from migrate.stages.compact import compact_partition
from migrate.stages.convert import convert_task
from migrate.stages.finalize import (
    ARCHIVE_CHUNK_BYTES,
    finalize_log_dir,
    forget_log_dir,
    set_dir_mtime,
    state_snapshot,
)
from migrate.stages.inspect import (
    join_live_checks,
    join_statuses,
    receive_archive_piece,
    status_from,
    status_log_dir,
    verify_live_log_dir,
)
from migrate.stages.join import join_segment
from migrate.stages.prepare import prepare_log_dir
from migrate.stages.replicas import (
    DEFAULT_BUCKET_OFFSETS,
    common_range,
    compare,
    fail_divergent,
    peer_replica_digests,
    peer_replica_ranges,
    replica_digests,
    replica_ranges,
)
from migrate.stages.rollback import rollback_check_log_dir, rollback_log_dir
from migrate.stages.swap import swap_log_dir

# the calls status and verify make of a log dir (each a run of its partitions): one per this many planned segments,
# up to MAX_SHARDS (more than a host's cores, so that a run of big partitions does not hold the others back)
SHARD_SEGMENTS = 4096
MAX_SHARDS = 8


def _per_log_dir(plan: Plan, keys: list[str] | None = None, *extra: Any) -> list[StageCall]:
    """A call per log dir (named by its key), pinned to the host that owns it."""
    return [StageCall((d.key, *extra), d.host, plan, d.key) for d in plan.log_dirs if keys is None or d.key in keys]


def _errors(stage: Stage, calls: list[StageCall], results: list[CallResult]) -> list[StageError]:
    """The calls that could not run, each named by its log dir."""
    return [StageError(stage, c.log_dir, r.error, r.error_type) for c, r in zip(calls, results) if not r.ok]


def _local_log_dirs(plan: Plan) -> list[str]:
    """Log dirs on this host, whose run lock this process holds for the whole run. A remote broker's log dir (its
    host is named in the plan) is reached only through its worker; the same path here is another machine's."""
    return [d.log_dir for d in plan.log_dirs if d.host is None and os.path.isdir(d.log_dir)]


def _local_staging(plan: Plan) -> list[tuple[str, str]]:
    """The staging trees of this host's log dirs that a cut-over takes from: (log dir, staging dir) each."""
    local = set(_local_log_dirs(plan))
    return [(d.log_dir, d.staging_dir) for d in plan.log_dirs if d.staging_dir is not None and d.log_dir in local]


def execute(
    plan: Plan,
    engine: Engine,
    accelerator: str = "",
    require_consistent_replicas: bool = False,
    replica_peers: tuple[LogDirPlan, ...] = (),
    on_swapped: Callable[[], object] | None = None,
) -> ExecuteReport:
    """``on_swapped``: called once the swap stage is over, as the last status (read-only) begins: what only reads the
    state (the run's summary) can run beside it."""
    stage_seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: Stage) -> None:
        nonlocal clock
        now = time.perf_counter()
        stage_seconds[stage.value] = round(now - clock, 3)
        clock = now

    plan.refuse_if_planned_elsewhere(socket.gethostname())
    errors: list[StageError] = []
    with (
        RunLock(_local_log_dirs(plan), plan.plan_id, "execute"),
        staging_held(_local_staging(plan), "cut-over (execute)"),
    ):
        calls = _per_log_dir(plan)
        results = engine.map(Stage.PREPARE, prepare_log_dir, calls)
        lap(Stage.PREPARE)
        errors += _errors(Stage.PREPARE, calls, results)
        ready = [c.log_dir for c, r in zip(calls, results) if r.ok and r.value.phase != LogDirPhase.FINALIZED]
        changed = [x for r in results if r.ok for x in r.value.changed]
        errors += [
            StageError(
                Stage.PREPARE,
                c.log_dir,
                f"{len(r.value.changed)} partition(s) have live files that are neither their originals nor the outputs "
                f"swapped in (a broker wrote to them?), e.g. {r.value.changed[0]}. They are left as they are: "
                "`rollback --force` puts their originals back and loses those writes.",
                "SourceChangedError",
            )
            for c, r in zip(calls, results)
            if r.ok and r.value.changed
        ]
        reconciled = tuple(
            f"{c.log_dir}: {line}" for c, r in zip(calls, results) if r.ok for line in r.value.reconciled
        )

        # pass one of compaction, a task per partition planned with --compact: its survivors must be stored before
        # any of its segments is converted (a partition it refuses fails alone and convert skips it)
        calls = [
            StageCall((d.key, p.name), d.host, plan, d.key)
            for d in plan.log_dirs
            if d.key in ready
            for p in d.partitions
            if p.compaction is not None
        ]
        figures = SegmentFold()
        refused: set[tuple[str, str, int]] = set()  # convert reports them again, as skipped: counted once
        if calls:
            results = engine.map(Stage.COMPACT, compact_partition, calls)
            lap(Stage.COMPACT)
            errors += _errors(Stage.COMPACT, calls, results)
            for i, r in enumerate(results):
                if r.ok and r.value.refusal is not None:
                    o = r.value.refusal
                    figures.add(o, (0, i, 0))
                    refused.add((o.log_dir, o.partition, o.base_offset))

        run = uuid.uuid4().hex[:12]  # names the files this run's range tasks share with their joins
        tasks = [t for t in plan.tasks if t.log_dir in ready]
        hosts = {d.key: d.host for d in plan.log_dirs}
        calls = [StageCall((t.id, run), hosts[t.log_dir], plan, t.log_dir) for t in tasks]
        results = engine.map(Stage.CONVERT, convert_task, calls, _folding(figures, 1, refused))
        lap(Stage.CONVERT)
        stopped = {c.log_dir for c, r in zip(calls, results) if not r.ok}
        errors += _errors(Stage.CONVERT, calls, results)
        # segments converted in ranges: one join each, once all their ranges are back, records the segment
        calls = _join_calls(plan, hosts, tasks, results, stopped, run)
        if calls:
            results = engine.map(Stage.JOIN, join_segment, calls, _folding(figures, 2))
            lap(Stage.JOIN)
            errors += _errors(Stage.JOIN, calls, results)
            stopped |= {c.log_dir for c, r in zip(calls, results) if not r.ok}
        stopped |= figures.io_stopped

        divergences, unchecked = compare_replicas(plan, engine, [d for d in ready if d not in stopped], replica_peers)
        if divergences:
            lap(Stage.REPLICAS)
            if require_consistent_replicas:
                calls = _per_log_dir(plan, [d for d in ready if d not in stopped], list(divergences))
                errors += _errors(Stage.REPLICAS, calls, engine.map(Stage.REPLICAS, fail_divergent, calls))

        calls = [StageCall((d.key, d.key not in stopped), d.host, plan, d.key) for d in plan.log_dirs if d.key in ready]
        results = engine.map(Stage.SWAP, swap_log_dir, calls)
        lap(Stage.SWAP)
        swapped_at = time.time()
        errors += _errors(Stage.SWAP, calls, results)
        errors += [
            StageError(Stage.SWAP, r.value.log_dir, r.value.stopped.message, "io-error")
            for r in results
            if r.ok and r.value.stopped is not None
        ]
        if on_swapped is not None:
            on_swapped()
        final = status(plan, engine, shard_segments=SHARD_SEGMENTS)  # the workers are up: every core reads
        errors += final.errors
    migrated_everywhere = final.every_planned_partition_migrated(plan)
    return ExecuteReport(
        plan_id=plan.plan_id,
        engine=engine.name,
        ok=migrated_everywhere and not errors and not changed,
        totals=figures.totals(),
        log_dirs=final.log_dirs,
        errors=tuple(errors),
        stage_seconds=stage_seconds,
        problems=figures.problems,
        accelerator=accelerator,
        divergent_replicas=tuple(divergences),
        unchecked_replicas=tuple(unchecked),
        reconciled=reconciled,
        cutover=cutover_report(plan, figures, stage_seconds, swapped_at, cold_cores=_cold_cores(engine)),
    )


def _folding(figures: SegmentFold, stage: int, counted: set[tuple[str, str, int]] | None = None) -> Fold:
    """A convert or join stage's fold: each call's outcomes added to ``figures`` as the call comes back (``stage``
    orders its outcomes after an earlier stage's; ``counted``: segments an earlier stage reported, skipped here), and
    only its range part kept (what its segment's join needs)."""
    lock = threading.Lock()  # the Dask engine folds in its driver and feeder threads

    def fold(index: int, r: CallResult) -> CallResult:
        if not r.ok:
            return r
        value: ConvertTaskResult = r.value
        with lock:
            for position, o in enumerate(value.outcomes):
                if not counted or (o.log_dir, o.partition, o.base_offset) not in counted:
                    figures.add(o, (stage, index, position))
        return CallResult(True, ConvertTaskResult(range_part=value.range_part)) if value.outcomes else r

    return fold


def _cold_cores(engine: Engine) -> int:
    """The cores a cold run of a plan on ``engine`` converts with: this process alone for the serial engine, else
    every core of this host (a LocalCluster's workers and the driver; a cluster's broker host is taken to be alike)."""
    return 1 if engine.name == "serial" else os.cpu_count() or 1


def cutover_report(
    plan: Plan,
    figures: SegmentFold,
    stage_seconds: dict[str, float],
    swapped_at: float,
    cold_cores: int = 1,
) -> CutoverReport | None:
    """For a plan that found pre-staged conversions: what was taken, what the window converted, and the window."""
    if not any(d.staging_dir for d in plan.log_dirs):
        return None
    stops = [d.stopped_at_ns for d in plan.log_dirs if d.stopped_at_ns is not None]
    stopped_at = min(stops) / 1e9 if stops else None
    seconds = {stage: stage_seconds.get(stage.value, 0.0) for stage in (Stage.PREPARE, Stage.CONVERT, Stage.JOIN)}
    delta = seconds[Stage.CONVERT] + seconds[Stage.JOIN]
    swap = stage_seconds.get(Stage.SWAP.value, 0.0)
    return CutoverReport(
        staged_segments=figures.staged_segments,
        staged_bytes=figures.staged_bytes,
        window_segments=figures.window_segments,
        window_bytes=figures.window_bytes,
        fallbacks=figures.fallbacks,
        stopped_at=stopped_at,
        window_seconds=round(swapped_at - stopped_at, 3) if stopped_at is not None else None,
        checks_seconds=seconds[Stage.PREPARE],
        delta_seconds=round(delta, 3),
        swap_seconds=swap,
        cold_seconds=round(seconds[Stage.PREPARE] + swap + _cold_conversion(figures, delta, cold_cores), 3),
    )


def _cold_conversion(figures: SegmentFold, delta: float, cores: int) -> float:
    """What converting the staged segments too would have cost this run: the window's own conversions, plus the
    lower of two measures of what was taken: the conversion seconds the pre-stage passes measured for it (their
    throttle and pause waits left out), spread over the cores a cold run would use (all of them once the whole
    conversion is worth a LocalCluster's workers, about a second of one core's work, else the driver's one), and
    its bytes at this window's own rate. The passes also read cold sources, fsync and index what they stage: on
    their seconds alone, spread over the window's parallelism, the estimate said 2.3 s where a cold run's stages
    took 1.3 s on a 2-core broker."""
    from migrate.engines.dask import LOCAL_SECONDS_WORTH_WORKERS  # the engine's own threshold

    work = figures.done_work_seconds
    measured = work / delta if delta > 0 else 1.0
    workers = max(1.0, measured, float(cores) if figures.staged_seconds + work > LOCAL_SECONDS_WORTH_WORKERS else 1.0)
    taken = figures.staged_seconds / workers
    if figures.window_bytes > 0 and delta > 0:
        taken = min(taken, figures.staged_bytes * delta / figures.window_bytes)
    return delta + taken


def _join_calls(
    plan: Plan,
    hosts: dict[str, str | None],
    tasks: list[TaskPlan],
    results: list[CallResult],
    stopped: set[str],
    run: str,
) -> list[StageCall]:
    """A join per segment whose every range came back, in a log dir that goes on (``results``: the tasks')."""
    parts: dict[tuple[str, str, int], list[RangePart]] = {}
    for task, r in zip(tasks, results):
        part = r.value.range_part if r.ok else None
        if part is not None:
            ref = task.segments[0]
            parts.setdefault((part.log_dir, ref.partition, ref.base_offset), []).append(part)
    return [
        StageCall((key, name, base, found, run), hosts[key], plan, key)
        for (key, name, base), found in parts.items()
        if key not in stopped and len(found) == found[0].count
    ]


def compare_replicas(
    plan: Plan,
    engine: Engine,
    keys: list[str],
    peers: tuple[LogDirPlan, ...] = (),
    bucket: int = DEFAULT_BUCKET_OFFSETS,
) -> tuple[list[Divergence], list[UncheckedReplica]]:
    """Compare the replicas of every partition planned on several brokers of ``plan`` (the log dirs ``keys``): each
    broker's offset range first, then digests of the range they all hold; a divergence names the partition, the
    brokers and the first differing offsets. Also against ``peers``: log dirs of the cluster plan on brokers outside
    this run (``--brokers``), read only through their own workers. A canary migrated alone is compared by the later
    run of the others, and the run says which replicas it could not compare (a peer unreachable or unreadable)."""
    holders: dict[str, list[tuple[str, int | None]]] = {}
    for d in plan.log_dirs:
        if d.key in keys:
            for p in d.partitions:
                holders.setdefault(p.name, []).append((d.key, d.broker_id))
    ours = set(holders)
    peer_of = {d.key: d for d in peers}
    for d in peers:
        for p in d.partitions:
            if p.name in ours:
                holders[p.name].append((d.key, d.broker_id))
    # a partition planned on several brokers: its replicas (two log dirs of one broker hold no replicas of each other)
    groups = {name: [k for k, _ in hs] for name, hs in sorted(holders.items()) if len({b for _, b in hs}) > 1}
    if not groups:
        return [], []
    broker_of = {k: b for hs in holders.values() for k, b in hs}
    per_key: dict[str, list[str]] = {}
    for name, ks in groups.items():
        for k in ks:
            per_key.setdefault(k, []).append(name)
    hosts = {d.key: d.host for d in (*plan.log_dirs, *peers)}
    unread: dict[str, str] = {}  # log dir key -> why it could not be read

    def collect(
        stage: Stage, fns: tuple[Callable[..., Any], Callable[..., Any]], calls: tuple[list[StageCall], list[StageCall]]
    ) -> list[Any]:
        out = []
        for fn, batch in zip(fns, calls):  # one plan per map: the run's calls carry it, the peers' none
            for c, r in zip(batch, engine.map(stage, fn, batch) if batch else []):
                if r.ok:
                    out += r.value
                else:
                    unread.setdefault(c.log_dir, r.error)
        return out

    def split(make: Callable[[str, list[str]], tuple[Any, ...]]) -> tuple[list[StageCall], list[StageCall]]:
        own = [StageCall(make(k, ns), hosts[k], plan, k) for k, ns in per_key.items() if k not in peer_of]
        theirs = [StageCall(make(k, ns), hosts[k], None, k) for k, ns in per_key.items() if k in peer_of]
        return own, theirs

    def range_args(k: str, names: list[str]) -> tuple[Any, ...]:
        return (k, names) if k not in peer_of else (peer_of[k], plan.plan_id, names)

    ranges: dict[str, list[ReplicaRange]] = {}
    for rr in collect(Stage.REPLICA_RANGES, (replica_ranges, peer_replica_ranges), split(range_args)):
        ranges.setdefault(rr.partition, []).append(rr)
    unchecked: list[UncheckedReplica] = []
    spans: dict[str, tuple[int, int]] = {}
    for name, ks in groups.items():
        answered = ranges.get(name, [])
        missing = [k for k in ks if k in unread]
        if missing:
            unchecked.append(
                UncheckedReplica(
                    name,
                    tuple(broker_of[k] for k in missing),
                    "; ".join(f"broker {broker_of[k]} ({k}) could not be read: {unread[k]}" for k in missing),
                )
            )
        if len({r.broker_id for r in answered}) < 2 or len(answered) != len(ks) - len(missing):
            continue
        span = common_range(answered)
        if span is None:
            unchecked.append(
                UncheckedReplica(name, tuple(r.broker_id for r in answered), "the replicas hold no offsets in common")
            )
        else:
            spans[name] = span

    def digest_args(k: str, names: list[str]) -> tuple[Any, ...]:
        chosen = [(n, *spans[n]) for n in names if n in spans]
        if k not in peer_of:
            return (k, chosen, bucket)
        return (peer_of[k], plan.plan_id, chosen, bucket, plan.options.digest)

    digests: dict[str, list[ReplicaDigest]] = {}
    for rd in collect(Stage.REPLICA_DIGESTS, (replica_digests, peer_replica_digests), split(digest_args)):
        digests.setdefault(rd.partition, []).append(rd)
    for name in spans:
        got = {r.broker_id for r in digests.get(name, [])}
        lost = [k for k in groups[name] if k in unread and broker_of[k] not in got]
        if lost and not any(u.partition == name for u in unchecked):
            why = "; ".join(f"broker {broker_of[k]} ({k}) could not be read: {unread[k]}" for k in lost)
            unchecked.append(UncheckedReplica(name, tuple(broker_of[k] for k in lost), why))
    return [diverged for rs in digests.values() if (diverged := compare(rs)) is not None], unchecked


def archive_dir(plan_path: str | Path) -> Path:
    return Path(f"{plan_path}.state")


def archive_path(plan_path: str | Path, key: str) -> Path:
    return archive_dir(plan_path) / (key.strip("/").replace("/", "_").replace(":", "_") + ".db")


def _archive(
    plan: Plan, engine: Engine, plan_path: str | Path, log_dirs: list[str]
) -> tuple[dict[str, str], list[StageError]]:
    """Copy each finished log dir's state beside the plan (durably): the archived log dirs (key: archive path), and
    the log dirs whose state could not be copied (it stays in the log dir; the same command again copies it).

    A database grows by about 1 KB per segment (1 GB at 10^6), so it travels in pieces of ``ARCHIVE_CHUNK_BYTES``
    and the driver holds one piece at a time: the first pieces of all log dirs in one map, each written as it
    arrives (a small database is whole in it); a bigger one's pieces after, one log dir at a time."""
    if not log_dirs:
        return {}, []
    archive_dir(plan_path).mkdir(exist_ok=True)
    calls = _per_log_dir(plan, log_dirs)
    whole: set[int] = set()

    def keep_small(i: int, r: CallResult) -> CallResult:
        if not r.ok or r.value is None:
            return r
        if len(r.value.data) < r.value.size:
            return CallResult(True, dataclasses.replace(r.value, data=b""))
        try:
            write_durably(archive_path(plan_path, calls[i].log_dir), r.value.data)
        except OSError as exc:
            return CallResult(False, error=f"{archive_path(plan_path, calls[i].log_dir)}: {exc}", error_type="OSError")
        whole.add(i)
        return CallResult(True, dataclasses.replace(r.value, data=b""))

    firsts = engine.map(Stage.ARCHIVE, state_snapshot, calls, keep_small)
    errors = _errors(Stage.ARCHIVE, calls, firsts)
    archived: dict[str, str] = {}
    for i, (call, r) in enumerate(zip(calls, firsts)):
        if not r.ok or r.value is None:
            continue
        target = archive_path(plan_path, call.log_dir)
        if i not in whole:
            try:
                _archive_pieces(plan, engine, call, r.value, target)
            except (OSError, MigrateError) as exc:
                errors.append(StageError(Stage.ARCHIVE, call.log_dir, str(exc), type(exc).__name__))
                continue
        archived[call.log_dir] = str(target)
    return archived, [
        dataclasses.replace(e, message=f"{e.message}. Its state stays in the log dir; run the same command again")
        for e in errors
    ]


def _archive_pieces(plan: Plan, engine: Engine, call: StageCall, first: StateChunk, target: Path) -> None:
    """A database bigger than one piece, into ``target`` a piece at a time, every piece of the file ``first`` saw."""
    with durable_file(target) as f:
        offset = 0
        while offset < first.size:
            piece_call = StageCall((call.log_dir, offset, first.stamp), call.host, plan, call.log_dir)
            piece = engine.map(Stage.ARCHIVE, state_snapshot, [piece_call])[0]
            if not piece.ok or piece.value is None:
                raise MigrateError(piece.error or f"{target}: the state database is gone from the log dir")
            if not piece.value.data:
                raise MigrateError(f"{target}: the state database ended at byte {offset}, before its {first.size}")
            f.write(piece.value.data)
            offset += len(piece.value.data)
            del piece  # the next piece is read while this one would still be held


def _leave(
    plan: Plan, engine: Engine, stage: Stage, fn: Callable[..., Any], *extra: Any
) -> tuple[list[Any], list[StageError]]:
    """``stage`` on every log dir: the reports of the calls that ran, and the errors of those that could not."""
    calls = _per_log_dir(plan, None, *extra)
    results = engine.map(stage, fn, calls)
    return [r.value for r in results if r.ok], _errors(stage, calls, results)


def _ended_here(plan_path: str | Path | None, key: str) -> tuple[LogDirPhase, Path] | None:
    """For a log dir where no run of the plan has state: the phase its last run ended in, from the state archived
    beside the plan (finalize and rollback archive it before removing it from the log dir)."""
    if plan_path is None:
        return None
    path = archive_path(plan_path, key)
    if not path.exists():
        return None
    with StateStore.open_file(path) as store:
        return store.phase, path


def rollback(plan: Plan, engine: Engine, plan_path: str | Path | None = None, force: bool = False) -> LeaveReport:
    """Check every live file of every log dir first; roll back only if none changed (or ``force``)."""
    with RunLock(_local_log_dirs(plan), plan.plan_id, "rollback"):
        calls = _per_log_dir(plan)
        checks = engine.map(Stage.ROLLBACK_CHECK, rollback_check_log_dir, calls)
        errors = _errors(Stage.ROLLBACK_CHECK, calls, checks)
        changed = [x for r in checks if r.ok for x in r.value[0]]
        if errors or (changed and not force):
            return LeaveReport("rollback", False, errors=tuple(errors), refused=tuple(changed))
        checked = {c.log_dir: r.value[1] for c, r in zip(calls, checks) if r.ok}
        reports: list[RollbackReport]
        reports, errors = _leave(plan, engine, Stage.ROLLBACK, rollback_log_dir, force)
        # what the check found and corrected (a rebuilt database, stale states) is told with what the rollback did
        reports = [dataclasses.replace(r, reconciled=(*checked.get(r.log_dir, ()), *r.reconciled)) for r in reports]
        done = [r.log_dir for r in reports if r.phase == LogDirPhase.ROLLED_BACK]
        reports, ended = _explain_absent(reports, plan_path)
        errors += ended
        archived: dict[str, str] = {}
        if plan_path is not None:
            archived, unarchived = _archive(plan, engine, plan_path, done)
            errors += unarchived
            engine.map(Stage.FORGET, forget_log_dir, _per_log_dir(plan, list(archived)))
    # last, once our lock file is gone too: the log dir's own mtime as it was planned
    engine.map(Stage.MTIME, set_dir_mtime, _per_log_dir(plan, done))
    # NEW: no state of this plan here and none archived: never executed, nothing to put back
    ok = (
        not errors
        and len(reports) == len(plan.log_dirs)
        and all(r.phase in (LogDirPhase.ROLLED_BACK, LogDirPhase.NEW) for r in reports)
    )
    return LeaveReport(
        "rollback", ok, rollbacks=tuple(reports), errors=tuple(errors), archived=tuple(archived.values())
    )


def _explain_absent(
    reports: list[RollbackReport], plan_path: str | Path | None
) -> tuple[list[RollbackReport], list[StageError]]:
    """A log dir with no state of the plan ("new") may have ended its run already: say so from the archive."""
    out: list[RollbackReport] = []
    errors: list[StageError] = []
    for r in reports:
        ended = _ended_here(plan_path, r.log_dir) if r.phase == LogDirPhase.NEW else None
        if ended is None:
            out.append(r)
        elif ended[0] == LogDirPhase.FINALIZED:
            errors.append(
                StageError(
                    Stage.ROLLBACK,
                    r.log_dir,
                    f"this plan was finalized here (its state is archived in {ended[1]}): the originals are deleted, "
                    "so there is nothing to roll back to. Restore the partitions from a replica if they must be "
                    "legacy again.",
                    "MigrateError",
                )
            )
        else:
            note = f"rolled back earlier; its state is archived in {ended[1]}"
            out.append(RollbackReport(r.log_dir, ended[0], (), reconciled=(note,)))
    return out, errors


def finalize(plan: Plan, engine: Engine, plan_path: str | Path | None = None, partial: bool = False) -> LeaveReport:
    with RunLock(_local_log_dirs(plan), plan.plan_id, "finalize"):
        reports: list[FinalizeReport]
        reports, errors = _leave(plan, engine, Stage.FINALIZE, finalize_log_dir, partial)
        done = [r.log_dir for r in reports if r.phase == LogDirPhase.FINALIZED]
        explained: list[FinalizeReport] = []
        for r in reports:
            if r.phase != LogDirPhase.NEW:
                explained.append(r)
                continue
            ended = _ended_here(plan_path, r.log_dir)
            if ended is not None and ended[0] == LogDirPhase.FINALIZED:
                explained.append(
                    FinalizeReport(r.log_dir, ended[0], (), reconciled=(f"finalized earlier; state in {ended[1]}",))
                )
                continue
            why = (
                "this plan was rolled back here: the originals are live and nothing converted is left to keep; run "
                "`execute` to migrate again, then finalize"
                if ended is not None
                else f"no run of plan {plan.plan_id} here to finalize: nothing was converted (run `execute` first)"
            )
            errors.append(StageError(Stage.FINALIZE, r.log_dir, why, "MigrateError"))
        archived: dict[str, str] = {}
        if plan_path is not None:
            archived, unarchived = _archive(plan, engine, plan_path, done)
            errors += unarchived
            engine.map(Stage.FORGET, forget_log_dir, _per_log_dir(plan, list(archived)))
    finished = [r for r in explained if r.phase == LogDirPhase.FINALIZED]
    ok = not errors and len(finished) == len(plan.log_dirs)
    return LeaveReport(
        "finalize", ok, finalizes=tuple(explained), errors=tuple(errors), archived=tuple(archived.values())
    )


def status(
    plan: Plan, engine: Engine, plan_path: str | Path | None = None, shard_segments: int | None = None
) -> StatusReport:
    """Every log dir's state: from the log dir while a run has state there, else from the archive beside the plan.
    With ``shard_segments``, a big log dir is read by several calls, each a run of its partitions
    (``log_dir_shards``), joined here: execute's last status, whose engine has its workers up and whose driver reads
    the run's summary meanwhile. Without, one call a log dir: the verb on its own runs in one process."""
    calls = [
        StageCall((d.key, (i, n)), d.host, plan, d.key)
        for d in plan.log_dirs
        for n in [log_dir_shards(d, shard_segments) if shard_segments else 1]
        for i in range(n)
    ]
    shards, errors = _shards_by_log_dir(Stage.STATUS, calls, engine.map(Stage.STATUS, status_log_dir, calls))
    statuses: list[LogDirStatus] = []
    not_started: list[str] = []
    for log_dir, parts in shards.items():
        joined = join_statuses(parts)
        if joined is not None:
            statuses.append(joined)
            continue
        archived = archive_path(plan_path, log_dir) if plan_path is not None else None
        if archived is not None and archived.exists():
            with StateStore.open_file(archived) as store:
                statuses.append(status_from(store, log_dir, fence_up=False))
        else:
            not_started.append(log_dir)
    return StatusReport(plan.plan_id, tuple(statuses), tuple(not_started), tuple(errors))


def _send_archive(plan: Plan, engine: Engine, d: LogDirPlan, archived: Path) -> ArchiveCopy | StageError:
    """The archive of ``d`` to its host, a piece (``ARCHIVE_CHUNK_BYTES``) per call, for a verify there: the driver
    holds one piece at a time, and no message carries more."""
    token = uuid.uuid4().hex
    digest = hashlib.sha256()
    offset = 0
    with open(archived, "rb") as f:
        while True:
            data = f.read(ARCHIVE_CHUNK_BYTES)
            if not data and offset:
                break
            digest.update(data)
            call = StageCall((d.key, token, offset, data), d.host, plan, d.key)
            (r,) = engine.map(Stage.VERIFY, receive_archive_piece, [call])
            if not r.ok:
                (error,) = _errors(Stage.VERIFY, [call], [r])
                return dataclasses.replace(
                    error, message=f"sending {archived} (at byte {offset}) to its host for verify: {error.message}"
                )
            offset += len(data)
            if len(data) < ARCHIVE_CHUNK_BYTES:
                break
    return ArchiveCopy(token, offset, digest.hexdigest())


def _shards_by_log_dir(
    stage: Stage, calls: list[StageCall], results: list[CallResult]
) -> tuple[dict[str, list[Any]], list[StageError]]:
    """The values of a log dir's runs (``log_dir_shards``) in call order, by log dir, leaving out a log dir of which
    a run failed (half a report would read as the whole), and the errors, one a log dir (its runs fail alike)."""
    shards: dict[str, list[Any]] = {}
    failed: dict[str, StageError] = {}
    for call, r in zip(calls, results, strict=True):
        if r.ok:
            shards.setdefault(call.log_dir, []).append(r.value)
        elif call.log_dir not in failed:
            (failed[call.log_dir],) = _errors(stage, [call], [r])
    return {key: parts for key, parts in shards.items() if key not in failed}, list(failed.values())


def log_dir_shards(d: LogDirPlan, shard_segments: int | None = None) -> int:
    """Calls a log dir's status and verify are cut into: one up to ``shard_segments`` (``SHARD_SEGMENTS``) planned
    segments, then one more per as many, up to ``MAX_SHARDS``: a broker's one log dir is read on every core (one
    call of verify re-read 10^5 tiny segments in 15 s on one of two), and the engine balances the runs of unequal
    partitions."""
    segments = sum(len(p.segments) for p in d.partitions)
    return max(1, min(MAX_SHARDS, segments // (shard_segments or SHARD_SEGMENTS)))


def verify_live(plan: Plan, engine: Engine, plan_path: str | Path | None = None) -> VerifyReport:
    """Re-check every log dir's live files; after finalize or rollback, against the state archived beside the plan.
    A big log dir is checked by several calls, each a run of its partitions (``log_dir_shards``), joined here."""
    calls = []
    errors: list[StageError] = []
    run = uuid.uuid4().hex[:12]  # the calls of this verify, as the state records their outcomes
    for d in plan.log_dirs:
        archived = archive_path(plan_path, d.key) if plan_path is not None else None
        n = log_dir_shards(d)
        if archived is None or not archived.exists():
            calls += [StageCall((d.key, None, None, (i, n), run), d.host, plan, d.key) for i in range(n)]
        elif engine.shares_files:  # opened where it is: a copy is ~2 KB a segment, 2 GB at 10^6, held twice
            calls += [StageCall((d.key, None, str(archived), (i, n)), d.host, plan, d.key) for i in range(n)]
        else:  # a copy sent to the host, read by one call there and removed by it
            sent = _send_archive(plan, engine, d, archived)
            if isinstance(sent, StageError):
                errors.append(sent)
            else:
                calls.append(StageCall((d.key, sent), d.host, plan, d.key))
    shards, failed = _shards_by_log_dir(Stage.VERIFY, calls, engine.map(Stage.VERIFY, verify_live_log_dir, calls))
    errors += failed
    checks = [join_live_checks(parts) for parts in shards.values()]
    ok = not errors and all(not c.problems and not c.unmigrated for c in checks)
    return VerifyReport(ok, tuple(checks), tuple(errors))
