"""What the cut-over does with a pre-staged segment once the broker has stopped cleanly: ``plan`` asks whether the
staged conversion may stand in for its source without reading the source, and ``execute`` takes it after asking
again.

Plan reads every byte of a segment it converts (checksums, damage, a torn tail). A staged segment it does not read:
its source's five identity fields and edge digest, equal to those recorded when the pre-stage pass read, converted
and verified it, prove it is that file, so the plan of a cut-over costs the delta, not the data. The plan keeps each
taken record's digest, so a record edited after the plan is not taken. Execute asks again, by stat, just before
taking it (a staged file deleted, truncated or written since the plan, or a source touched since: that segment is
converted from its source, as a cold run would), then renames the staged files into the partition's work dir, where
every conversion of the run lies: from there on a taken segment is a converted one, verified before the swap,
fenced, swapped, rolled back and finalized the same way. A rename keeps the inode, size and mtime the swap checks.
The staged record is removed last, so a crash in between leaves nothing the next run trusts: it converts that
segment anew.

The staging tree is untrusted ground (``migrate.prestage.tree``): it is reached through directory descriptors, no
link in it is followed, and only files a record names by device and inode are taken or removed. A record proves only
what a pass wrote, so what execute takes without reading is proven against its original before finalize deletes
that original (``migrate.segment.proof``).

Never for a compacted partition (its outputs depend on every segment's survivors, decided at execute) and never
with other options or another leader epoch than the plan's (``record.judge_staged``).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from migrate.errors import ModelError
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE
from migrate.model.plan_tree import ConvertOptions, SegmentPlan
from migrate.model.run_state import FileStat, SegmentResult, SegmentTask
from migrate.prestage.record import (
    PENDING_RE,
    RECORD_RE,
    Judgement,
    StagedSegment,
    Verdict,
    judge_staged,
    read_record,
    record_name,
    remove_pending,
    remove_staged,
)
from migrate.prestage.tree import PartitionStaging, StagingTree, StagingTreeError
from migrate.run.exchange import rename_noreplace
from migrate.segment.convert import live_files

RECORD_DIGEST_HEX = 16  # of the record's sha256 kept in the plan: 64 bits, enough to make an edit after plan show


def record_digest(staged: StagedSegment) -> str:
    """What the plan keeps of a staged record: the head of the sha256 of its bytes."""
    return staged.digest[:RECORD_DIGEST_HEX]


def stopped_at_ns(log_dir: str | Path) -> int | None:
    """When the broker last stopped cleanly: the mtime of the clean-shutdown marker it wrote then."""
    try:
        return os.stat(Path(log_dir) / CLEAN_SHUTDOWN_FILE).st_mtime_ns
    except FileNotFoundError:
        return None


def staged_for(tree: StagingTree, staging: PartitionStaging | None, base_offset: int) -> StagedSegment | None:
    """The readable record of ``base_offset`` in one partition's staging dir, if any (an unreadable one counts as
    none: its segment is converted from its source)."""
    if staging is None:
        return None
    try:
        return read_record(staging, base_offset, tree.root)
    except ModelError:
        return None


@dataclass(frozen=True)
class StagedPlanning:
    """What plan makes of one staged segment: ``judgement`` says whether it may stand in for its source;
    ``segment`` is its plan when it may and it converts (None, usable: already in the target format)."""

    judgement: Judgement
    segment: SegmentPlan | None = None


def plan_staged(
    staged: StagedSegment, source: Path, options: ConvertOptions, staging: PartitionStaging
) -> StagedPlanning:
    """The plan of ``source`` from its staged record, without reading the source past its edges."""
    judgement = judge_staged(staged, source, options, staging)
    if not judgement.usable or not staged.record.staged:
        return StagedPlanning(judgement)
    record = staged.record
    identity = record.source_identity
    return StagedPlanning(
        judgement,
        SegmentPlan(
            base_offset=record.base_offset,
            size=identity.size,
            mtime_ns=identity.mtime_ns,
            inode=identity.inode,
            entries_by_magic=dict(sorted(record.result.magics_in.items())),
            estimated_output_bytes=record.result.output_bytes,
            staged=True,
            staged_record=record_digest(staged),
        ),
    )


@dataclass(frozen=True)
class Taken:
    """What execute got for a segment planned from staging: ``result`` (its outputs now in the work dir) when the
    staged conversion was taken; else ``judgement`` says why it was not, and the segment is converted anew."""

    judgement: Judgement
    result: SegmentResult | None = None


def take_staged(
    tree: StagingTree, partition: str, task: SegmentTask, planned_record: str | None, *, deep: bool = False
) -> Taken:
    """Judge the staged conversion of ``task``'s source again: when it may stand in, its result as a conversion's,
    its outputs where they are (the partition's staging dir, which the swap makes the partition's new directory:
    nothing is moved here). ``planned_record``: the record's digest as planned (another record is not taken);
    ``deep`` re-reads the staged files against their digests first (a full read)."""
    try:
        staging = tree.partition(partition)
    except OSError as exc:  # a link or a file where the partition's staging dir should be: never followed
        return Taken(Judgement(Verdict.STAGED_CHANGED, str(exc)))
    if staging is None:
        return Taken(Judgement(Verdict.STAGED_CHANGED, f"its pre-stage dir {tree.root / partition} is gone"))
    with staging:
        return _take(tree, staging, task, planned_record, deep)


def _take(
    tree: StagingTree, staging: PartitionStaging, task: SegmentTask, planned_record: str | None, deep: bool
) -> Taken:
    staged = staged_for(tree, staging, task.base_offset)
    if staged is None:
        return Taken(Judgement(Verdict.STAGED_CHANGED, f"its pre-stage record under {staging.path} is gone"))
    if planned_record is not None and record_digest(staged) != planned_record:
        why = f"its pre-stage record {staged.record_path} changed since the plan (sha256 {staged.digest[:16]}...)"
        return Taken(Judgement(Verdict.STAGED_CHANGED, why))
    try:  # stated once: the judgement's source identity and the live .log's stat the swap compares
        source_stat: os.stat_result | None = os.stat(task.source)
    except FileNotFoundError:
        source_stat = None  # the judgement says so
    # by stat: plan read the source's edges, and nothing can rewrite it in place without changing its ctime but a
    # process writing through a mapping, i.e. a running broker, which execute's prepare refuses (its .lock is held)
    judgement = judge_staged(
        staged, task.source, task.options, staging, edges=False, deep=deep, source_stat=source_stat
    )
    if not judgement.usable:
        return Taken(judgement)
    identity = staged.record.source_identity
    planned = (task.expected_size, task.expected_mtime_ns, task.expected_inode)
    if (identity.size, identity.mtime_ns, identity.inode) != planned:
        why = f"staged from {identity}, planned size, mtime_ns, inode {planned}"
        return Taken(Judgement(Verdict.SOURCE_CHANGED, why))
    # a copy without ``dataclasses.replace``'s per-field work (a cut-over takes up to 10^6): the record has no
    # ``__post_init__`` to run, and its fields were checked when the record was read
    result = object.__new__(SegmentResult)
    result.__dict__.update(staged.record.result.__dict__, source=task.source, outputs={}, output_stats={})
    for sfx, want in staged.record.staged.items():
        result.outputs[sfx] = str(staging.path / staged.name(sfx))
        result.output_stats[sfx] = FileStat(want.inode, want.size, want.mtime_ns)
    live = live_files(os.path.dirname(task.source), task.base_offset, log=source_stat)
    result.live_before = {sfx: FileStat.of(st) for sfx, st in live.items()}
    return Taken(judgement, result)


def complete_staged_dir(
    tree: StagingTree, partition: str, taken: Collection[int], delta: int, delta_names: Collection[str]
) -> tuple[PartitionStaging, list[str]]:
    """Make a partition's staging dir hold exactly what its new directory must: the staged segments the cut-over
    took (``taken``: their base offsets), the outputs the window converted (``delta_names``, moved in from the
    directory open as ``delta``, never over a file there) and the records of what was taken; the staging of
    segments not taken (their source changed since, or is gone) removed, each file only where its record names it.
    Returns the staging dir, open (the caller closes it), and what was left alone (files no record names)."""
    staging = tree.partition(partition)
    if staging is None:
        raise StagingTreeError(f"{tree.root / partition}: the partition's staging dir is gone since the plan")
    left: list[str] = []
    try:
        names = staging.names()
        for name in names:
            if (m := PENDING_RE.match(name)) is not None:
                left += remove_pending(staging, name, files_too=record_name(int(m.group(1))) not in names)
                continue
            if (m := RECORD_RE.match(name)) is None or int(m.group(1)) in taken:
                continue
            found = staged_for(tree, staging, int(m.group(1)))
            if found is not None:
                left += remove_staged(staging, found)
        in_the_way = [name for name in delta_names if staging.lstat(name) is not None]
        if in_the_way:  # a file no record names (it was left alone above): nothing is moved over it
            raise FileExistsError(
                errno.EEXIST, "a file no record names is in the way", str(staging.path / in_the_way[0])
            )
        for name in delta_names:
            rename_noreplace(delta, name, staging.fd, name)
    except BaseException:
        staging.close()
        raise
    return staging, left


@contextlib.contextmanager
def plan_staging_tree(log_dir: str, staging_dir: str | None) -> Iterator[StagingTree | None]:
    """The staging tree a plan builds some partitions of ``log_dir`` in (a cut-over), opened for a verb's length;
    None for a cold plan, or where the tree is gone."""
    tree = StagingTree.open(log_dir, staging_dir, create=False) if staging_dir else None
    try:
        yield tree
    finally:
        if tree is not None:
            tree.close()


@contextlib.contextmanager
def staging_held(trees: list[tuple[str, str]], holder: str) -> Iterator[None]:
    """Hold the staging trees ``trees`` ((log dir, staging dir) each) against a pre-stage pass for a whole verb: a
    pass still running at the cut-over is named and refused (StagingTreeBusyError), never raced."""
    opened: list[StagingTree] = []
    try:
        for log_dir, staging_dir in trees:
            tree = StagingTree.open(log_dir, staging_dir, create=False)
            if tree is not None:
                opened.append(tree)
                tree.lock(holder)
        yield
    finally:
        for tree in opened:
            tree.close()


def forget_staged(log_dir: str, staging_dir: str, partitions: list[str]) -> int:
    """Once a cut-over is finalized, what is left staged for its partitions is of sources that are gone (the taken
    ones' records went with them): remove what their records name (each file only where still the one staged), then
    each emptied partition dir. Returns how many records were removed; files no record names are left alone."""
    tree = StagingTree.open(log_dir, staging_dir, create=False)
    if tree is None:
        return 0
    removed = 0
    with tree:
        tree.lock("finalize")
        for name in partitions:
            try:
                staging = tree.partition(name)
            except OSError:
                continue  # a link or a file there: not ours, left alone
            if staging is None:
                continue
            with staging:
                for entry in staging.names():
                    m = RECORD_RE.match(entry)
                    found = staged_for(tree, staging, int(m.group(1))) if m is not None else None
                    if found is not None and not remove_staged(staging, found):
                        removed += 1
            with contextlib.suppress(OSError):  # not empty: something not ours is there, left alone
                os.rmdir(name, dir_fd=tree.fd)
    return removed
