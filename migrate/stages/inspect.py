"""status and verify: read-only views of a log dir's run, from its state store and its live files."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
from dataclasses import replace
from pathlib import Path

from migrate.codec import to_json
from migrate.errors import LocatedError, MigrateError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import Plan
from migrate.model.run_state import (
    EVERY_PARTITION,
    EventKind,
    Fate,
    LiveVerdict,
    LogDirPhase,
    LogDirStatus,
    PartitionRange,
    PartitionState,
    SegmentState,
)
from migrate.model.stage_reports import ArchiveCopy, LiveCheck
from migrate.run import fence
from migrate.run.partition.after import cleaned_partitions
from migrate.run.partition.reconcile import open_reconciled
from migrate.run.run_lock import running
from migrate.run.state import StateStore
from migrate.segment.verify import verify_segment
from migrate.stages.common import locate, partition_after


def status_log_dir(plan: Plan, key: str, shard: tuple[int, int] = (0, 1)) -> LogDirStatus | None:
    """Where every planned partition stands, by the state database checked against the files (read-only: what
    the files say otherwise is reported, and corrected by the next execute or rollback); None when no run of the
    plan ever changed this log dir. ``shard`` (i, n): only the partitions of the i-th of n runs of the planned names
    (``shard_range``), so that n calls check a big log dir on every core; ``join_statuses`` puts them together."""
    entry, log_dir = locate(plan, key)
    within = shard_range([p.name for p in entry.partitions], shard)
    store, reconciled = open_reconciled(plan, key, entry, log_dir, write=False, within=within)
    live = running(log_dir, plan.plan_id)
    if store is None:
        if not reconciled.lines:
            return None
        return LogDirStatus(key, LogDirPhase.EXECUTING, fence.is_up(log_dir), (), (), reconciled.lines, live)
    with store:
        return status_from(store, key, fence.is_up(log_dir), reconciled.lines, live, within)


def status_from(
    store: StateStore,
    log_dir: str,
    fence_up: bool,
    reconciled: tuple[str, ...] = (),
    live: str | None = None,
    within: PartitionRange = EVERY_PARTITION,
) -> LogDirStatus:
    return LogDirStatus(
        log_dir,
        store.phase,
        fence_up,
        tuple(store.partition_statuses(log_dir, within)),
        tuple(store.history()),
        reconciled,
        live,
    )


def shard_range(names: list[str], shard: tuple[int, int]) -> PartitionRange:
    """The names from the first of ``shard_names(names, shard)`` up to the first of the next run: the runs cover
    every name, planned or not, exactly once (a run with no planned name covers none)."""
    i, n = shard
    if not 0 <= i < n:
        raise MigrateError(f"status: shard {i} of {n} does not exist (a client of another version of the tool?)")
    if n == 1:
        return EVERY_PARTITION
    ordered = sorted(names)
    if not ordered:
        return EVERY_PARTITION if i == 0 else PartitionRange("", "")  # the second: no name is both >= "" and < ""

    def start(j: int) -> str:
        return ordered[j * len(ordered) // n]

    return PartitionRange(start(i) if i > 0 else None, start(i + 1) if i + 1 < n else None)


def join_statuses(shards: list[LogDirStatus | None]) -> LogDirStatus | None:
    """One log dir's status from its shards' (in shard order): their partitions in name order, and what the files
    said otherwise, each run's lines with its partitions (one call tells every correction before the changed files)
    and a line of the whole log dir, such as a database to be rebuilt, once."""
    found = [s for s in shards if s is not None]
    if not found:
        return None
    first = found[0]
    return LogDirStatus(
        first.log_dir,
        first.phase,
        first.fence_up,
        tuple(p for s in found for p in s.partitions),
        first.history,
        tuple(dict.fromkeys(line for s in found for line in s.reconciled)),
        first.running,
    )


def verify_live_log_dir(
    plan: Plan,
    key: str,
    archived: ArchiveCopy | None = None,
    archive_file: str | None = None,
    shard: tuple[int, int] = (0, 1),
    run: str = "",
) -> LiveCheck:
    """Judge every migrated partition's live files (``_check_live``); partitions not migrated are listed, not
    checked. Where the run's state is in the log dir, the outcome is recorded there (``run``: the verify's token,
    shared by its calls): a failed verify since the last swap blocks finalize. After finalize or rollback the state
    has left the log dir: the copy beside the plan tells what was done, and the live files are checked against it:
    ``archive_file``, its path where this host reads it, or ``archived``, the copy ``receive_archive_piece`` put
    together on this host (removed once read, whatever the outcome). ``shard`` (i, n): only the i-th of n runs of
    the log dir's partitions by name (``shard_names``), so that n calls check a big log dir on every core;
    ``join_live_checks`` puts their results back together."""
    entry, log_dir = locate(plan, key)
    if StateStore.exists(log_dir, plan.plan_id):
        if archived is not None:
            _remove_copy(plan.plan_id, archived.token)
        with StateStore.open(log_dir, plan.plan_id) as store:
            check = _check_live(plan, key, store, shard)
            if run:
                first = check.problems[0] if check.problems else ""
                verdict = LiveVerdict(run, not check.problems, len(check.problems), first)
                store.record_event(EventKind.LIVE_VERIFIED, **to_json(verdict))
            return check
    if archive_file is not None:
        with StateStore.open_file(Path(archive_file)) as store:
            return _check_archived(plan, key, store, shard)
    if archived is None:  # no run of the plan has started here: every partition of this run of them is unmigrated
        return LiveCheck(key, LogDirPhase.NEW, 0, (), tuple(shard_names([p.name for p in entry.partitions], shard)))
    path = received_copy_path(plan.plan_id, archived.token)
    try:
        _check_copy(path, archived)
        with StateStore.open_file(path) as store:
            return _check_archived(plan, key, store)
    finally:
        _remove_copy(plan.plan_id, archived.token)


_TOKEN_RE = re.compile(r"^[0-9a-f]{16,64}$")


def received_copy_path(plan_id: str, token: str) -> Path:
    """Where the pieces of an archive sent to this host are put together: this host's temporary directory, never a
    log dir; ``token`` (hex, chosen by the client for one verify) keeps two verifies' copies apart."""
    if not _TOKEN_RE.match(token) or not _TOKEN_RE.match(plan_id.lower()):
        raise MigrateError(f"refusing an archive copy named {plan_id!r}/{token!r}: expected hex tokens")
    return Path(tempfile.gettempdir()) / f"kafka-log-migrate-verify-{plan_id}-{token}.db"


def receive_archive_piece(plan: Plan, key: str, token: str, offset: int, data: bytes) -> int:
    """Write ``data`` at ``offset`` of this host's copy of ``key``'s archived state (the first piece creates it,
    exclusively, owner-only); returns the bytes written. A piece is at most ``ARCHIVE_CHUNK_BYTES``: the client never
    holds, nor sends, a whole archive (~2 KB a segment, 2 GB at 10^6)."""
    path = received_copy_path(plan.plan_id, token)
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if offset == 0 else 0)
    fd = os.open(path, flags, 0o600)
    try:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], offset + written)
    finally:
        os.close(fd)
    return written


def _check_copy(path: Path, archived: ArchiveCopy) -> None:
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while piece := f.read(1 << 20):
                digest.update(piece)
                size += len(piece)
    except FileNotFoundError:
        pass
    if (size, digest.hexdigest()) != (archived.size, archived.sha256):
        raise MigrateError(
            f"{path}: the copy of the archived state sent to this host is {size} bytes with sha256 "
            f"{digest.hexdigest()[:16]}..., the archive is {archived.size} bytes with sha256 "
            f"{archived.sha256[:16]}...: "
            "a piece went to another host or was lost on the way. Nothing was checked; run `verify` again."
        )


def _remove_copy(plan_id: str, token: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(received_copy_path(plan_id, token))


def _check_archived(plan: Plan, key: str, store: StateStore, shard: tuple[int, int] = (0, 1)) -> LiveCheck:
    if store.phase == LogDirPhase.ROLLED_BACK:  # the originals are live again: nothing migrated to check
        return LiveCheck(key, store.phase, 0, (), (), tuple(store.history()))
    return _check_live(plan, key, store, shard)


def shard_names(names: list[str], shard: tuple[int, int]) -> list[str]:
    """The i-th of n runs of ``names`` in name order (i, n = ``shard``): every name in exactly one run, and the runs
    in order make the whole sorted list, so that their checks joined read as one call's."""
    i, n = shard
    if not 0 <= i < n:
        raise MigrateError(f"verify: shard {i} of {n} does not exist (a client of another version of the tool?)")
    ordered = sorted(names)
    return ordered[i * len(ordered) // n : (i + 1) * len(ordered) // n]


def join_live_checks(checks: list[LiveCheck]) -> LiveCheck:
    """One log dir's check from its shards' (in shard order): their segments, problems and unmigrated partitions,
    each in the order one call would have listed them."""
    first = checks[0]
    return LiveCheck(
        first.log_dir,
        first.phase,
        sum(c.checked_segments for c in checks),
        tuple(p for c in checks for p in c.problems),
        tuple(n for c in checks for n in c.unmigrated),
        first.history,
        tuple(x for c in checks for x in c.by_broker),
        tuple(x for c in checks for x in c.metadata_only),
    )


def _check_live(plan: Plan, key: str, store: StateStore, shard: tuple[int, int] = (0, 1)) -> LiveCheck:
    """Every migrated partition's files judged against what its swap put there (``migrate.run.partition.after``):
    the converted segments still as swapped are read back whole (every CRC, both digests, both indexes); what the
    broker did since is listed apart; only converted bytes changed where no broker operation explains it, or a
    segment that does not read back as it should, is a problem."""
    problems: list[str] = []
    by_broker: list[str] = []
    metadata_only: list[str] = []
    checked = 0
    every = store.partition_states()
    states = {n: every[n] for n in shard_names(list(every), shard)}
    unmigrated = sorted(n for n, s in states.items() if s != PartitionState.MIGRATED)
    cleaned = cleaned_partitions(plan.log_dir(key).log_dir)
    for name in sorted(n for n, s in states.items() if s == PartitionState.MIGRATED):
        part = plan.partition(key, name)
        after = partition_after(plan, key, name, cleaned, store)
        if after is None:
            by_broker.append(f"{part.dir}: gone since the swap (the broker deleted the partition)")
            continue
        fates = {f.name: f for f in after.files}
        problems += [f"{part.dir}/{f.name}: {f.detail}" for f in after.rewritten]
        by_broker += [f"{part.dir}/{f.name}: {f.fate}: {f.detail}".rstrip(": ") for f in after.by_broker]
        metadata_only += [f"{part.dir}/{f.name}" for f in after.files if f.metadata_only]
        options = plan.options.for_partition(part.leader_epoch)
        for row in store.segments_of(name):
            result = row.result
            if row.state != SegmentState.SWAPPED or result is None or not result.outputs:
                continue
            names = [segment_name(row.base, kind) for kind, _ in result.outputs]
            names += [segment_name(p.base_offset, kind) for p in result.parts or () for kind, _ in p.outputs]
            if any(fates.get(n) is None or fates[n].fate != Fate.UNCHANGED for n in names):
                continue  # the broker's now (judged above), or rewritten (a problem above): not read back
            checked += 1
            live = result.outputs.paths_in(part.dir, row.base)
            # a split source's later outputs are live under their own names
            parts = tuple(replace(s, outputs=s.outputs.paths_in(part.dir, s.base_offset)) for s in result.parts or ())
            try:
                check = verify_segment(replace(result, outputs=live, parts=parts or None), options, mtimes=False)
            except LocatedError as exc:  # its advice is for a source segment: verify's own follows the verdict
                where = exc.where()
                problems.append(f"{name}/{row.base}: {exc.reason}" + (f" ({where})" if where else ""))
                continue
            except OSError as exc:
                problems.append(f"{name}/{row.base}: {exc}")
                continue
            problems += [f"{name}/{row.base}: {x}" for x in check.problems]
    if store.phase == LogDirPhase.FINALIZED:
        unmigrated = []  # finalize --partial left them as they were on purpose; the history says how many
    return LiveCheck(
        key,
        store.phase,
        checked,
        tuple(problems),
        tuple(unmigrated),
        tuple(store.history()),
        tuple(by_broker),
        tuple(metadata_only),
    )
