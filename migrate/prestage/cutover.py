"""What the cut-over does with a pre-staged segment once the broker has stopped cleanly: ``plan`` asks whether the
staged conversion may stand in for its source without reading the source, and ``execute`` takes it after asking
again.

Plan reads every byte of a segment it converts (checksums, damage, a torn tail). A staged segment it does not read:
its source's five identity fields and edge digest, equal to those recorded when the pre-stage pass read, converted
and verified it, prove it is that file, so the plan of a cut-over costs the delta, not the data. Execute asks again,
by stat, just before taking it (a staged file deleted, truncated or written since the plan, or a source touched
since: that segment is converted from its source, as a cold run would), then renames the staged files into the
partition's work dir, where every conversion of the run lies: from there on a taken segment is a converted one,
verified before the swap, fenced, swapped, rolled back and finalized the same way. A rename keeps the inode, size
and mtime the swap checks. The staged record is removed last, so a crash in between leaves nothing the next run
trusts: it converts that segment anew.

Never for a compacted partition (its outputs depend on every segment's survivors, decided at execute) and never
with other options or another leader epoch than the plan's (``record.judge_staged``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from migrate.errors import ModelError
from migrate.kafka.names import CLEAN_SHUTDOWN_FILE, segment_name
from migrate.model.plan_tree import ConvertOptions, SegmentPlan
from migrate.model.run_state import FileStat, SegmentResult, SegmentTask
from migrate.prestage.location import default_staging_root, staging_root
from migrate.prestage.record import (
    STAGED_FILE_RE,
    Judgement,
    StagedSegment,
    Verdict,
    judge_staged,
    read_record,
    record_path,
)
from migrate.segment.convert import live_files


def staging_tree(log_dir: str | Path, override: str | None = None) -> Path | None:
    """The staging tree ``plan`` looks in for ``log_dir`` (``override``: a ``--staging-dir``), when it exists."""
    root = default_staging_root(log_dir) if override is None else Path(os.path.realpath(override))
    return root if root.is_dir() else None


def staged_for(root: Path, partition: str, base_offset: int) -> StagedSegment | None:
    """The readable record of ``partition``'s segment ``base_offset`` under the staging tree ``root``, if any."""
    path = record_path(root / partition, base_offset)
    try:  # none there, or not a file: read_record says so (no stat first: a cut-over asks 10^6 times)
        return StagedSegment(read_record(path), path)
    except ModelError:
        return None


def stopped_at_ns(log_dir: str | Path) -> int | None:
    """When the broker last stopped cleanly: the mtime of the clean-shutdown marker it wrote then."""
    try:
        return os.stat(Path(log_dir) / CLEAN_SHUTDOWN_FILE).st_mtime_ns
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class StagedPlanning:
    """What plan makes of one staged segment: ``judgement`` says whether it may stand in for its source;
    ``segment`` is its plan when it may and it converts (None, usable: already in the target format)."""

    judgement: Judgement
    segment: SegmentPlan | None = None


def plan_staged(staged: StagedSegment, source: Path, options: ConvertOptions) -> StagedPlanning:
    """The plan of ``source`` from its staged record, without reading the source past its edges."""
    judgement = judge_staged(staged, source, options)
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
        ),
    )


@dataclass(frozen=True)
class Taken:
    """What execute got for a segment planned from staging: ``result`` (its outputs now in the work dir) when the
    staged conversion was taken; else ``judgement`` says why it was not, and the segment is converted anew."""

    judgement: Judgement
    result: SegmentResult | None = None


def take_staged(root: Path, partition: str, task: SegmentTask, *, deep: bool = False) -> Taken:
    """Judge the staged conversion of ``task``'s source again and, when it may stand in, rename its files into the
    task's work dir; ``deep`` re-reads the staged files against their digests first (a full read). ``root``: the log
    dir's staging tree, checked by ``location.staging_root``."""
    staged = staged_for(root, partition, task.base_offset)
    if staged is None:
        return Taken(Judgement(Verdict.STAGED_CHANGED, f"its pre-stage record under {root / partition} is gone"))
    try:  # stated once: the judgement's source identity and the live .log's stat the swap compares
        source_stat: os.stat_result | None = os.stat(task.source)
    except FileNotFoundError:
        source_stat = None  # the judgement says so
    # by stat: plan read the source's edges, and nothing can rewrite it in place without changing its ctime but a
    # process writing through a mapping, i.e. a running broker, which execute's prepare refuses (its .lock is held)
    judgement = judge_staged(staged, task.source, task.options, edges=False, deep=deep, source_stat=source_stat)
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
    for sfx, path in staged.paths.items():
        target = os.path.join(task.staging_dir, segment_name(task.base_offset, sfx))
        os.rename(path, target)
        st = os.stat(target)
        want = staged.record.staged[sfx]
        got = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if got != (want.device, want.inode, want.size, want.mtime_ns):  # replaced between the judgement and now
            with contextlib.suppress(FileNotFoundError):
                os.unlink(target)
            return Taken(Judgement(Verdict.STAGED_CHANGED, f"staged {path} changed while it was taken"))
        result.outputs[sfx] = target
        result.output_stats[sfx] = FileStat.of(st)
    live = live_files(os.path.dirname(task.source), task.base_offset, log=source_stat)
    result.live_before = {sfx: FileStat.of(st) for sfx, st in live.items()}
    # no fsync of the work dir here (4 ms a segment, most of a take): convert_task syncs the filesystem before it
    # records any outcome, and a crash before that leaves the segment planned, converted anew by the next execute
    # whichever of these renames and the record's unlink reached the disk
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staged.record_path)
    return Taken(judgement, result)


def forget_staged(log_dir: str, staging_dir: str, partitions: list[str]) -> int:
    """Once a cut-over is finalized, what is left staged for its partitions is of sources that are gone (the taken
    ones' records went with them): remove those files, then each emptied partition dir. Only the files a pass writes
    are removed; the staging dir is checked as prestage checks it. Returns how many files were removed."""
    root = staging_root(log_dir, staging_dir)
    removed = 0
    for name in partitions:
        part = root / name
        if not part.is_dir() or part.is_symlink():
            continue
        for path in part.iterdir():
            if STAGED_FILE_RE.match(path.name) and path.is_file():
                path.unlink()
                removed += 1
        with contextlib.suppress(OSError):  # not empty: something not ours is there, left alone
            part.rmdir()
    return removed
