"""Pre-stage passes over a running broker's log dirs: every closed segment (never a partition's highest base
offset: Kafka appends to it) whose staging is missing or stale is staged; staging whose source is gone is removed.

Each log dir's staging tree is opened without following any link, held with a lock for the whole run, and scanned
before a pass writes or deletes anything in it (``migrate.prestage.tree``): a planted link, a hard link, a directory
where a file should be, or one of the broker's own files refuses the pass, naming it. A pass then sweeps the tree: a
partition dir gone from the log dir (deleted, renamed ``-delete``, moved to another log dir) and a segment gone from
its partition (retention or the cleaner renamed it ``.deleted``) lose their staging, each file only where a record of
this tool names it by device and inode, and nothing is ever staged again for a name that is gone. Files no record
names are left alone and reported. Then, per closed segment, a record whose source and staged files still have their
recorded identities is kept (stat only: the edge digest is read at the cut-over, where it matters); anything else is
staged again. After the pass a stat-only look says what is left: the bytes of closed segments with no usable staging
(rolled, replaced or rejected during the pass) and the active segments' bytes, which only the cut-over can convert.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.errors import LocatedError, LogDirAccessError, MalformedLogDirFileError, MigrateError, ModelError
from migrate.kafka.layout import Partition, inspect_log_dir
from migrate.kafka.lock import lock_holder
from migrate.kafka.names import segment_name
from migrate.kafka.properties import leader_epoch_entries
from migrate.model.plan_tree import ConvertOptions
from migrate.prestage.controls import Aborted, Controls, SpaceFloorReached
from migrate.prestage.identity import FileIdentity
from migrate.prestage.location import StagingPlaceError
from migrate.prestage.record import (
    PENDING_RE,
    RECORD_RE,
    StagedSegment,
    judge_staged,
    read_record,
    record_name,
    remove_pending,
    remove_staged,
)
from migrate.prestage.stage import StageOutcome, StageResult, StagingWriteError, stage_segment
from migrate.prestage.staged_index import (
    INDEX_NAMES,
    StagedIndex,
    new_row,
    options_digest,
    read_index,
    remove_index,
    row_staged,
    row_stands,
    standing_row,
    write_index,
)
from migrate.prestage.tree import NodeId, PartitionStaging, StagingTree


@dataclass(frozen=True)
class PrestageRequest:
    log_dirs: tuple[str, ...]
    options: ConvertOptions = field(default_factory=ConvertOptions)
    staging_dirs: tuple[str, ...] = ()  # one per log dir; empty: each log dir's default
    topics: str | None = None  # regex over topic names
    leader_epoch: int | None = None  # None: per partition, the first entry of its leader-epoch-checkpoint (as plan)
    passes: int = 1
    threshold_bytes: int | None = None  # stop repeating once this little is left to stage


@dataclass
class LogDirPass:
    log_dir: str
    staging_root: str
    lock_holder: int | None  # the pid holding Kafka's .lock (0: held, pid unknown); None: no broker holds it
    staged: int = 0
    staged_source_bytes: int = 0
    staged_bytes: int = 0
    unchanged: int = 0  # already in the target format: recorded, nothing staged
    kept: int = 0  # staged by an earlier pass and still usable
    removed: int = 0  # staging dropped because its source is gone
    rejected: list[str] = field(default_factory=list)  # changed while read: staged again by the next pass
    refused: list[str] = field(default_factory=list)  # bytes that cannot be converted (plan will refuse them too)
    left_alone: list[str] = field(default_factory=list)  # files in the staging tree no record of this tool names
    left_bytes: int = 0  # closed segments without usable staging after the pass
    active_bytes: int = 0  # the partitions' highest segments: converted at the cut-over


@dataclass
class PassReport:
    number: int
    log_dirs: list[LogDirPass]
    seconds: float = 0.0
    io_bytes: int = 0  # read and written through the throttle during the pass

    @property
    def left_bytes(self) -> int:
        return sum(d.left_bytes for d in self.log_dirs)


@dataclass
class PrestageReport:
    passes: list[PassReport] = field(default_factory=list)
    ready: bool = False  # the threshold was reached
    stopped: str = ""  # why the run stopped early (abort file, a write error)
    aborted: bool = False  # stopped by the operator's abort file
    max_window_bytes: int = 0  # the most bytes read and written within any throttle window

    @property
    def ok(self) -> bool:
        return not self.stopped and not any(d.refused for p in self.passes for d in p.log_dirs)


@dataclass
class _Target:
    log_dir: Path
    tree: StagingTree
    scanned: dict[str, Partition] | None = None  # the partitions listed for the scan just made, for the next pass

    @property
    def root(self) -> Path:
        return self.tree.root


def run_prestage(
    request: PrestageRequest, controls: Controls, on_pass: Callable[[PassReport], None] | None = None
) -> PrestageReport:
    """Pass after pass (at most ``request.passes``; fewer once ``threshold_bytes`` is reached), until done, aborted or
    a write into the staging tree fails. Refuses (StagingPlaceError) a staging place Kafka would trip over or a tree
    that holds what a pass must not touch, and (StagingTreeBusyError) a tree another pass holds."""
    targets = resolve_targets(request)
    try:
        for target in targets:
            target.tree.lock("prestage pass", claim=False)
        for target in targets:  # every tree checked before any is written, its lock file included
            target.scanned = _scan(target)
        for target in targets:
            target.tree.claim()
        return _passes(request, controls, targets, on_pass)
    finally:
        for target in targets:
            target.tree.close()


def _passes(
    request: PrestageRequest,
    controls: Controls,
    targets: list[_Target],
    on_pass: Callable[[PassReport], None] | None,
) -> PrestageReport:
    report = PrestageReport()
    refused: dict[str, FileIdentity] = {}  # sources refused in this run: not read again while unchanged
    topic_re = re.compile(request.topics) if request.topics else None
    for number in range(1, request.passes + 1):
        started, io_before = time.monotonic(), controls.total
        current = PassReport(number, [])
        report.passes.append(current)
        try:
            for target in targets:
                _one_log_dir(target, request, controls, topic_re, refused, current)
        except Aborted as exc:
            report.stopped = str(exc)
            report.aborted = not isinstance(exc, SpaceFloorReached)
        except StagingWriteError as exc:
            report.stopped = write_error_text(exc, targets)
        except OSError as exc:  # reading a source: the disk under the broker reports an error
            report.stopped = (
                f"cannot read {exc.filename or 'a segment'}: {exc.strerror or exc}. Nothing was written in the log "
                "dirs; the broker reads the same disk: check it (dmesg, SMART) before running prestage again."
            )
        current.seconds = time.monotonic() - started
        current.io_bytes = controls.total - io_before
        if on_pass is not None:
            on_pass(current)
        if report.stopped:
            break
        if request.threshold_bytes is not None and current.left_bytes <= request.threshold_bytes:
            report.ready = True
            break
    report.max_window_bytes = controls.max_window_bytes()
    return report


def resolve_targets(request: PrestageRequest) -> list[_Target]:
    """Each log dir's staging tree, opened (made where missing) and checked against every log dir of the broker."""
    if request.staging_dirs and len(request.staging_dirs) != len(request.log_dirs):
        raise MigrateError(
            f"--staging-dir names {len(request.staging_dirs)} places for {len(request.log_dirs)} log dirs: give one "
            "per log dir, in the order of --log-dirs, or none for the defaults"
        )
    targets: list[_Target] = []
    try:
        for i, raw in enumerate(request.log_dirs):
            override = request.staging_dirs[i] if request.staging_dirs else None
            tree = StagingTree.open(raw, override, create=True, other_log_dirs=request.log_dirs)
            assert tree is not None  # create=True makes it
            targets.append(_Target(Path(os.path.realpath(raw)), tree))
            for other in targets[:-1]:
                if other.tree.identity == tree.identity:
                    raise StagingPlaceError(
                        f"log dirs {other.log_dir} and {raw} would share the staging tree {tree.root}: give each log "
                        "dir its own --staging-dir (one per log dir, in the order of --log-dirs)."
                    )
    except BaseException:
        for target in targets:
            target.tree.close()
        raise
    return targets


def live_identities(log_dir: Path, partitions: dict[str, Partition]) -> frozenset[NodeId]:
    """The log dir, its partition dirs and every file in them, by device and inode: none of them may be in the
    staging tree under any name (a hard link, a bind mount)."""
    ids = {NodeId.of(os.stat(log_dir))}
    for part in partitions.values():
        try:
            device = os.stat(part.path).st_dev
            with os.scandir(part.path) as entries:
                ids.update(NodeId(device, e.inode()) for e in entries if not e.is_dir(follow_symlinks=False))
            ids.add(NodeId.of(os.stat(part.path)))
        except FileNotFoundError:
            continue  # deleted or moved by the broker since it was listed
    return frozenset(ids)


def _scan(target: _Target) -> dict[str, Partition]:
    """The log dir's live partitions, and its staging tree checked against them (StagingTreeError)."""
    partitions = {p.name: p for p in live_partitions(target.log_dir)}
    target.tree.scan(live_identities(target.log_dir, partitions))
    return partitions


def _one_log_dir(
    target: _Target,
    request: PrestageRequest,
    controls: Controls,
    topic_re: re.Pattern[str] | None,
    refused: dict[str, FileIdentity],
    current: PassReport,
) -> None:
    try:
        holder = lock_holder(target.log_dir)
    except LogDirAccessError:
        holder = 0
    done = LogDirPass(str(target.log_dir), str(target.root), holder)
    current.log_dirs.append(done)  # a pass stopped half-way still reports what it did
    controls.staging = target.log_dir  # statvfs only: the staging tree is on this filesystem (checked by the tree)
    partitions, target.scanned = target.scanned or _scan(target), None
    done.removed += sweep(target.tree, partitions, done.left_alone)
    try:
        _stage_partitions(target, request, controls, topic_re, refused, partitions, done)
    finally:
        done.left_bytes, done.active_bytes = what_is_left(target, request, topic_re)


def _stage_partitions(
    target: _Target,
    request: PrestageRequest,
    controls: Controls,
    topic_re: re.Pattern[str] | None,
    refused: dict[str, FileIdentity],
    partitions: dict[str, Partition],
    done: LogDirPass,
) -> None:
    wanted = [p for p in partitions.values() if topic_re is None or topic_re.fullmatch(p.topic)]
    for part in wanted:
        if not part.segments:
            continue
        _stage_partition(target, part, _options_for(part, request), controls, refused, done)


def _stage_partition(
    target: _Target,
    part: Partition,
    options: ConvertOptions,
    controls: Controls,
    refused: dict[str, FileIdentity],
    done: LogDirPass,
) -> None:
    """Stage a partition's closed segments, then write its staged index."""
    staging = target.tree.partition(part.name)
    index = read_index(staging) if staging is not None else None
    wanted = options_digest(options)
    rows: list[tuple[np.ndarray, bytes]] = []
    try:
        for seg in part.segments[:-1]:
            if not seg.size:
                continue
            if staging is not None:
                kept = _kept(staging, index, seg.path, seg.base_offset, options, wanted, target.root)
                if kept is not None:
                    done.kept += 1
                    rows.append(kept)
                    continue
            if refused.get(str(seg.path)) == FileIdentity.at(seg.path):
                continue
            if staging is None:  # made before the partition's first segment is staged
                try:
                    staging = target.tree.partition(part.name, create=True)
                except OSError as exc:
                    raise StagingWriteError(exc.errno, exc.strerror, str(target.root / part.name)) from exc
                assert staging is not None
            controls.before_segment(seg.size)
            try:
                outcome = stage_segment(seg.path, staging, options, controls, target.log_dir, target.root)
            except LocatedError as exc:  # the conversion did not verify: as refused as bad bytes
                outcome = StageOutcome(StageResult.REFUSED, str(seg.path), problem=str(exc))
            _count(outcome, done, refused, seg.path)
            if outcome.record is not None:
                st = staging.lstat(record_name(seg.base_offset))
                if st is not None:
                    rows.append(new_row(outcome.record, st, str(staging.path)))
    finally:
        if staging is not None:
            try:
                if _index_differs(index, rows):
                    with contextlib.suppress(OSError):  # the index spares the cut-over reads: without it they are made
                        write_index(staging, rows)
            finally:
                staging.close()


def _kept(
    staging: PartitionStaging,
    index: StagedIndex | None,
    source: Path,
    base_offset: int,
    options: ConvertOptions,
    wanted: tuple[int, int],
    root: Path,
) -> tuple[np.ndarray, bytes] | None:
    """The index row of a segment staged by an earlier pass that still stands for its source, judged by stat (from
    the index where its row stands, else from the record); None where it must be staged again."""
    standing = standing_row(index, base_offset, source, wanted, staging.lstat, staging.path)
    if standing is not None:
        assert index is not None
        return index.take(base_offset) if standing[1].usable else None
    previous = _record(staging, base_offset, root)
    if previous is None or not judge_staged(previous, source, options, staging, edges=False).usable:
        return None
    st = staging.lstat(record_name(base_offset))
    return new_row(previous, st, str(staging.path)) if st is not None else None


def _index_differs(index: StagedIndex | None, rows: list[tuple[np.ndarray, bytes]]) -> bool:
    """Whether the records staged now are not those ``index`` holds (by base offset and record identity)."""
    if index is None:
        return bool(rows)
    keys = ["base", "rec_ino", "rec_size", "rec_mtime", "rec_ctime"]
    now = sorted(tuple(r[0][keys].tolist()[0]) for r in rows)
    return now != sorted(index.rows[keys].tolist())


def _count(outcome: StageOutcome, done: LogDirPass, refused: dict[str, FileIdentity], source: Path) -> None:
    if outcome.result == StageResult.STAGED:
        done.staged += 1
        done.staged_source_bytes += outcome.source_bytes
        done.staged_bytes += outcome.staged_bytes
    elif outcome.result == StageResult.UNCHANGED:
        done.unchanged += 1
    elif outcome.result == StageResult.REJECTED:
        done.rejected.append(outcome.problem)
    elif outcome.result == StageResult.BLOCKED:
        done.left_alone.append(outcome.problem)
    else:
        done.refused.append(outcome.problem)
        identity = FileIdentity.at(source)
        if identity is not None:
            refused[str(source)] = identity


def live_partitions(log_dir: Path, attempts: int = 5) -> list[Partition]:
    """The log dir's live partitions. The broker renames partition dirs (``-delete``, ``-future``) and segments
    (``.deleted``) while they are listed: a name that vanished between the listing and its read means a new look."""
    for attempt in range(attempts):
        try:
            return inspect_log_dir(log_dir).partitions
        except FileNotFoundError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.05)
    return []


def _options_for(part: Partition, request: PrestageRequest) -> ConvertOptions:
    """The partition's options as ``plan`` would set them: the leader epoch from its checkpoint's first entry."""
    if request.leader_epoch is not None:
        return request.options.for_partition(request.leader_epoch)
    try:
        epochs = leader_epoch_entries(part.path)
    except (OSError, MalformedLogDirFileError):
        epochs = []  # being rewritten by the broker right now: the cut-over compares epochs anyway
    return request.options.for_partition(epochs[0][0] if epochs else 0)


def _record(staging: PartitionStaging, base_offset: int, root: Path) -> StagedSegment | None:
    try:
        return read_record(staging, base_offset, root)
    except (MigrateError, ValueError):
        return None


def sweep(tree: StagingTree, partitions: dict[str, Partition], left_alone: list[str]) -> int:
    """Remove the staging whose source is gone, and what a pending record names (a pass killed while it linked a
    segment's files); returns how many staged segments were removed. A file goes only where a record of this tool
    names it by device and inode; what no record names is left alone and reported in ``left_alone``."""
    removed = 0
    for name in tree.partition_names():
        staging = tree.partition(name)
        if staging is None:
            continue
        with staging:
            part = partitions.get(name)
            bases = {s.base_offset for s in part.segments} if part is not None else set()
            names = staging.names()
            index = read_index(staging)
            vouched: set[str] = set(INDEX_NAMES) & set(names) if index is not None else set()
            for entry in names:
                if (m := PENDING_RE.match(entry)) is not None:
                    final = record_name(int(m.group(1)))
                    left = remove_pending(staging, entry, files_too=final not in names)
                    left_alone += left
                    if not left:
                        vouched.add(entry)
                    continue
                if (m := RECORD_RE.match(entry)) is None:
                    continue
                base = int(m.group(1))
                row = index.row(base) if index is not None and base in bases else None
                if row is not None and row_stands(row, staging.lstat):  # what the record names, as its row says
                    vouched.add(entry)
                    vouched.update(segment_name(base, kind) for kind, _ in row_staged(row))
                    continue
                try:
                    found = read_record(staging, base, tree.root)
                except ModelError as exc:
                    left_alone.append(f"{exc} (left alone)")
                    continue
                if found is None:
                    continue
                vouched.add(entry)
                vouched.update(found.name(kind) for kind, _ in found.record.staged)
                if base not in bases:
                    left = remove_staged(staging, found)
                    left_alone += left
                    removed += not left
            strays = [entry for entry in names if entry not in vouched and staging.lstat(entry) is not None]
            left_alone += [
                f"{staging.path / entry}: no record of this tool names it (left alone: remove it if it is yours)"
                for entry in strays
            ]
            if part is None:
                remove_index(staging)
        if part is None:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=tree.fd)  # not empty: something not ours is there, kept, and the dir with it
    return removed


def what_is_left(target: _Target, request: PrestageRequest, topic_re: re.Pattern[str] | None) -> tuple[int, int]:
    """(bytes of closed segments without usable staging, bytes of the active segments), by stat alone."""
    left = active = 0
    for part in live_partitions(target.log_dir):
        if not part.segments or (topic_re is not None and not topic_re.fullmatch(part.topic)):
            continue
        active += part.segments[-1].size
        options = _options_for(part, request)
        try:
            staging = target.tree.partition(part.name)
        except StagingPlaceError:
            staging = None
        try:
            index = read_index(staging) if staging is not None else None
            wanted = options_digest(options)
            for seg in part.segments[:-1]:
                usable = False
                if staging is not None:
                    usable = _kept(staging, index, seg.path, seg.base_offset, options, wanted, target.root) is not None
                if seg.size and not usable:
                    left += seg.size
        finally:
            if staging is not None:
                staging.close()
    return left, active


def write_error_text(exc: OSError, targets: list[_Target]) -> str:
    """An operator's message for a failed write into a staging tree (ENOSPC, EIO, EROFS)."""
    where = exc.filename or ", ".join(str(t.root) for t in targets)
    roots = [t.root for t in targets if str(where).startswith(str(t.root))] or [t.root for t in targets]
    usage = []
    for root in roots:
        with contextlib.suppress(OSError):
            total = shutil.disk_usage(root)
            usage.append(f"{root}: {total.free} bytes free of {total.total}")
    return (
        f"cannot write the staging tree: {exc.strerror or exc} at {where}. The partial staged files of the segment in "
        "progress were removed and the log dirs were not touched; segments staged before are kept. Free space on "
        f"that filesystem ({'; '.join(usage) or 'unknown'}), or remove its staging tree to give the space back (the "
        "cut-over then converts everything), then run prestage again."
    )
