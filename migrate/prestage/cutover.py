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
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from migrate.errors import ModelError
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE
from migrate.model.plan_tree import ConvertOptions, SegmentPlan
from migrate.model.records import fast_replace
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
from migrate.prestage.staged_index import (
    Row,
    StagedCounts,
    StagedIndex,
    judge_row,
    options_digest,
    read_index,
    remove_index,
    row_counts,
    row_entries,
    row_is_staged,
    row_live_before,
    row_record_digest,
    row_source,
    row_stands,
    row_verbatim,
    standing_row,
)
from migrate.prestage.tree import PartitionStaging, StagingTree, StagingTreeError
from migrate.run.exchange import rename_noreplace
from migrate.segment.convert import live_files, stats_of

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


def plan_staged_segment(
    tree: StagingTree,
    staging: PartitionStaging,
    index: StagedIndex | None,
    source: Path,
    base_offset: int,
    options: ConvertOptions,
    wanted: tuple[int, int],
    lstat: Callable[[str], os.stat_result | None],
) -> StagedPlanning | None:
    """The plan of ``source`` from what is staged for it, by stat (None: nothing is): from its row of the
    partition's staged index where that row stands for its record, else from the record. ``lstat``: of a name in
    ``staging`` (the plan's scan of it)."""
    standing = standing_row(index, base_offset, source, wanted, lstat, staging.path)
    if standing is not None:
        row, judgement = standing
        if not judgement.usable or not row_is_staged(row):
            return StagedPlanning(judgement)
        identity = row_source(row)
        return StagedPlanning(
            judgement,
            SegmentPlan(
                base_offset=base_offset,
                size=identity.size,
                mtime_ns=identity.mtime_ns,
                inode=identity.inode,
                entries_by_magic=row_entries(row),
                estimated_output_bytes=row_counts(row)[1],
                staged=True,
                staged_record=row_record_digest(row)[:RECORD_DIGEST_HEX],
            ),
        )
    staged = staged_for(tree, staging, base_offset)
    return None if staged is None else plan_staged(staged, source, options, staging)


def plan_staged(
    staged: StagedSegment, source: Path, options: ConvertOptions, staging: PartitionStaging
) -> StagedPlanning:
    """The plan of ``source`` from its staged record, by stat (the broker is stopped: nothing writes a log through a
    mapping, and every other write changes the source's ctime)."""
    judgement = judge_staged(staged, source, options, staging, edges=False)
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
            entries_by_magic={int(m): n for m, n in sorted(record.result.magics_in.items())},
            estimated_output_bytes=record.result.output_bytes,
            staged=True,
            staged_record=record_digest(staged),
        ),
    )


@dataclass(frozen=True)
class Taken:
    """What execute got for a segment planned from staging: ``result`` (its outputs in the staging dir) when the
    staged conversion was taken; or, taken from the staged index, ``text``: that result as the state database
    stores it, with ``counts`` (source bytes, output bytes, records, the pass's seconds); else ``judgement`` says why
    it was not, and the segment is converted anew."""

    judgement: Judgement
    result: SegmentResult | None = None
    text: str | None = None
    counts: StagedCounts | None = None


class StagedPartition:
    """One partition's staging dir and staged index, opened once for the segments a task takes from it."""

    def __init__(self, staging: PartitionStaging | None, error: str = "") -> None:
        self.staging = staging
        self.error = error  # why there is no staging dir to take from
        self.index = read_index(staging) if staging is not None else None
        self._options: tuple[ConvertOptions, tuple[int, int]] | None = None

    def wanted(self, options: ConvertOptions) -> tuple[int, int]:
        """``options_digest`` of ``options``, computed once for a partition's segments."""
        if self._options is None or self._options[0] != options:
            self._options = (options, options_digest(options))
        return self._options[1]

    @classmethod
    def open(cls, tree: StagingTree, partition: str) -> StagedPartition:
        try:
            staging = tree.partition(partition)
        except OSError as exc:  # a link or a file where the partition's staging dir should be: never followed
            return cls(None, str(exc))
        if staging is None:
            return cls(None, f"its pre-stage dir {tree.root / partition} is gone")
        return cls(staging)

    def close(self) -> None:
        if self.staging is not None:
            self.staging.close()


def take_staged(
    tree: StagingTree, staged: StagedPartition, task: SegmentTask, planned_record: str | None, *, deep: bool = False
) -> Taken:
    """Judge the staged conversion of ``task``'s source again: when it may stand in, its result as a conversion's,
    its outputs where they are (the partition's staging dir, which the swap makes the partition's new directory:
    nothing is moved here). ``planned_record``: the record's digest as planned (another record is not taken);
    ``deep`` re-reads the staged files against their digests first (a full read). By stat from the staged index
    where its row stands for the planned record, the live files are as staged and the result's text says what the
    take would write (no record read, nothing decoded); else from the record."""
    staging = staged.staging
    if staging is None:
        return Taken(Judgement(Verdict.STAGED_CHANGED, staged.error))
    if not deep and staged.index is not None:
        row = staged.index.row(task.base_offset)
        if row is not None and row_verbatim(row) and row_stands(row, staging.lstat):
            taken = _take_row(staged, row, task, planned_record)
            if taken is not None:
                return taken
    return _take(tree, staging, task, planned_record, deep)


def _take_row(staged: StagedPartition, row: Row, task: SegmentTask, planned_record: str | None) -> Taken | None:
    """The take by the index's row; None where the record must decide (the live index files are not as staged)."""
    staging, index = staged.staging, staged.index
    assert staging is not None and index is not None
    if planned_record is not None and row_record_digest(row)[:RECORD_DIGEST_HEX] != planned_record:
        why = f"its pre-stage record under {staging.path} changed since the plan"
        return Taken(Judgement(Verdict.STAGED_CHANGED, why))
    try:
        source_stat: os.stat_result | None = os.stat(task.source)
    except FileNotFoundError:
        source_stat = None
    judgement = judge_row(row, task.source, source_stat, staged.wanted(task.options), staging.lstat, staging.path)
    if not judgement.usable:
        return Taken(judgement)
    identity = row_source(row)
    planned = (task.expected_size, task.expected_mtime_ns, task.expected_inode)
    if (identity.size, identity.mtime_ns, identity.inode) != planned:
        return Taken(
            Judgement(Verdict.SOURCE_CHANGED, f"staged from {identity}, planned size, mtime_ns, inode {planned}")
        )
    live = live_files(os.path.dirname(task.source), task.base_offset, log=source_stat)
    if stats_of(live) != row_live_before(row):
        return None
    return Taken(judgement, text=index.text(row), counts=row_counts(row))


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
    # a cut-over takes up to 10^6: the record's fields were checked when it was read
    outputs = staged.record.staged.map(lambda kind, _: str(staging.path / staged.name(kind)))
    stats = staged.record.staged.map(lambda _, want: FileStat(want.inode, want.size, want.mtime_ns))
    result = fast_replace(staged.record.result, source=task.source, outputs=outputs, output_stats=stats)
    live = live_files(os.path.dirname(task.source), task.base_offset, log=source_stat)
    result.live_before = stats_of(live)
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
        remove_index(staging)  # it spared the plan and the take their reads; the partition's directory needs none
        # a file no record names (left alone above, or an index this tool cannot tell for its own): the directory
        # would hold it, so it cannot become the partition's; nothing is moved over it either
        in_the_way = [name for name in delta_names if staging.lstat(name) is not None]
        in_the_way += [name for name in staging.names() if not _taken_name(name, taken)]
        if in_the_way:
            raise FileExistsError(
                errno.EEXIST, "a file no record names is in the way", str(staging.path / in_the_way[0])
            )
        for name in delta_names:
            rename_noreplace(delta, name, staging.fd, name)
    except BaseException:
        staging.close()
        raise
    return staging, left


_BASE_RE = re.compile(r"^(\d{20})\.(?:log|index|timeindex|prestaged\.json)$", re.ASCII)


def _taken_name(name: str, taken: Collection[int]) -> bool:
    """A staged file or record of a segment the cut-over took."""
    m = _BASE_RE.match(name)
    return m is not None and int(m.group(1)) in taken


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
                remove_index(staging)
            with contextlib.suppress(OSError):  # not empty: something not ours is there, left alone
                os.rmdir(name, dir_fd=tree.fd)
    return removed
