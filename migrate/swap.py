"""Swapping converted segments into a live partition, and putting the originals back.

Invariant: while live files change, the fence directory is in the log dir, so no broker can start on it; when the
fence comes down every partition is wholly old or wholly new. Each replaced file is first hard-linked into the
partition's backup dir (same inode: same bytes, same mtime, no copy), then the staged file is renamed over it
(atomic on POSIX). Every step is journaled so a crash at any instant can be resumed or rolled back, and every
step is idempotent so doing it again after a crash is safe.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from migrate.errors import MigrateError
from migrate.journal import Journal, JournalState, crash_point
from migrate.workspace import (
    FENCE_README,
    SEGMENT_SUFFIXES,
    WORK_DIR_NAME,
    backup_dir,
    fence_path,
    fsync_dir,
    segment_file,
    staging_dir,
    work_dir,
)


class LiveFileChangedError(MigrateError):
    """A live file differs from what the migration swapped in: something (a broker) wrote to it since."""


def raise_fence(log_dir: str | Path, plan_id: str, journal: Journal) -> None:
    fence = fence_path(log_dir)
    if not fence.exists():
        fence.mkdir()
        (fence / "README.txt").write_text(FENCE_README.format(plan_id=plan_id))
        fsync_dir(fence)
        fsync_dir(log_dir)
    if not journal.state().fence_up:
        journal.append("fence-up", fence=str(fence))


def lower_fence(log_dir: str | Path, journal: Journal) -> None:
    fence = fence_path(log_dir)
    if fence.exists():
        shutil.rmtree(fence)
        fsync_dir(log_dir)
    if journal.state().fence_up:
        journal.append("fence-down")


def swap_partition(partition: str, partition_dir: str | Path, plan_id: str, bases: list[int], journal: Journal) -> None:
    """Swap every staged segment of a partition in; the caller holds the fence up."""
    stage = staging_dir(partition_dir, plan_id)
    backup = backup_dir(partition_dir, plan_id)
    backup.mkdir(parents=True, exist_ok=True)
    state = journal.state()
    for base in bases:
        seg = state.segments.get(JournalState.key(partition, base), {})
        if seg.get("state") == "swapped":
            continue
        if seg.get("state") == "swapping":
            originals = seg["originals"]
        else:
            originals = {sfx: segment_file(partition_dir, base, sfx).exists() for sfx in SEGMENT_SUFFIXES}
            outputs = {}
            for sfx in SEGMENT_SUFFIXES:
                st = segment_file(stage, base, sfx).stat()
                outputs[sfx] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
            journal.append("segment-swap-begin", partition=partition, base=base, originals=originals, outputs=outputs)
        for sfx in SEGMENT_SUFFIXES:
            live = segment_file(partition_dir, base, sfx)
            staged = segment_file(stage, base, sfx)
            kept = segment_file(backup, base, sfx)
            if not staged.exists():
                continue  # swapped before a crash
            if originals[sfx] and not kept.exists():
                os.link(live, kept)
                crash_point("after-backup-link")
            os.replace(staged, live)
            crash_point("after-rename")
        fsync_dir(partition_dir)
        fsync_dir(backup)
        journal.append("segment-swapped", partition=partition, base=base)
    journal.append("partition-swapped", partition=partition)


def live_changes(partition: str, partition_dir: str | Path, bases: list[int], state: JournalState) -> list[str]:
    """Live files that differ (size or mtime) from what the migration swapped in."""
    changed = []
    for base in bases:
        seg = state.segments.get(JournalState.key(partition, base), {})
        if seg.get("state") != "swapped":
            continue
        for sfx, want in seg["outputs"].items():
            live = segment_file(partition_dir, base, sfx)
            if not live.exists():
                changed.append(f"{live} is missing")
                continue
            st = live.stat()
            if (st.st_size, st.st_mtime_ns) != (want["size"], want["mtime_ns"]):
                changed.append(
                    f"{live}: {st.st_size} bytes, mtime_ns {st.st_mtime_ns}; the migration wrote {want['size']} "
                    f"bytes, mtime_ns {want['mtime_ns']}"
                )
    return changed


def rollback_partition(
    partition: str, partition_dir: str | Path, plan_id: str, bases: list[int], journal: Journal, force: bool = False
) -> None:
    """Put back every original file of the partition (bytes and mtime); remove files the migration added."""
    state = journal.state()
    changed = live_changes(partition, partition_dir, bases, state)
    if changed and not force:
        raise LiveFileChangedError(
            f"partition {partition}: live files changed after the swap, so a broker probably ran on them:\n  "
            + "\n  ".join(changed[:10])
            + "\nRolling back would lose what the broker wrote. Stop the broker and re-run with --force only if you "
            "accept that."
        )
    backup = backup_dir(partition_dir, plan_id)
    for base in reversed(bases):
        seg = state.segments.get(JournalState.key(partition, base), {})
        if seg.get("state") not in ("swapping", "swapped"):
            continue
        for sfx in SEGMENT_SUFFIXES:
            live = segment_file(partition_dir, base, sfx)
            kept = segment_file(backup, base, sfx)
            if kept.exists():
                if live.exists() and os.path.samefile(kept, live):
                    kept.unlink()  # linked but never replaced: rename() between two links of one inode is a no-op
                else:
                    os.replace(kept, live)
            elif not seg["originals"][sfx]:
                live.unlink(missing_ok=True)
        fsync_dir(partition_dir)
        journal.append("segment-rolled-back", partition=partition, base=base)
    journal.append("partition-rolled-back", partition=partition)


def remove_work_dir(partition_dir: str | Path, plan_id: str) -> None:
    """Delete the partition's staging and backups for this plan, and our directory if nothing else is left."""
    shutil.rmtree(work_dir(partition_dir, plan_id), ignore_errors=True)
    ours = Path(partition_dir) / WORK_DIR_NAME
    if ours.exists() and not any(ours.iterdir()):
        ours.rmdir()
    fsync_dir(partition_dir)
