"""The files of one segment in a live partition, and how they are swapped in and put back.

Each live file (``.log``, ``.index``, ``.timeindex``) that conversion replaces is first hard-linked into the
partition's backup dir (same inode: same bytes and mtime, no copy), then the staged file is renamed over it (atomic
on POSIX). Before the first rename the state store has committed, per file, the identity (inode, size, mtime) of the
original and of the output: with those, every step can be redone or undone after a crash at any instant, and a live
file can always be classified as

- the original (never swapped, or already put back),
- ours, unchanged since the swap,
- or changed by someone else (a broker ran), which no recovery overwrites without ``--force``.

Every function here is idempotent: doing it again after a crash finishes the job.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from migrate.errors import MigrateError, SourceChangedError
from migrate.kafka.names import segment_name
from migrate.model.run_state import FileStat, SegmentResult
from migrate.run import faults
from migrate.run.state import SwapFile
from migrate.run.workspace import BACKUP_SUFFIX, WORK_DIR_NAME


class BackupMissingError(MigrateError):
    """The backup of a swapped file is gone: the original cannot be put back."""


def _stat(path: str | Path) -> FileStat | None:
    try:
        return FileStat.of(os.stat(path))
    except FileNotFoundError:
        return None


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _describe(st: FileStat | None) -> str:
    return "missing" if st is None else f"inode {st.inode}, {st.size} bytes, mtime_ns {st.mtime_ns}"


@dataclass(frozen=True)
class SegmentFiles:
    partition_dir: str | Path
    plan_id: str
    base_offset: int

    # plain strings, built once: a swap of 10^4 partitions calls these hundreds of thousands of times
    def live(self, suffix: str) -> str:
        return self._paths[0] + suffix

    def staged(self, suffix: str) -> str:
        return self._paths[1] + suffix

    def backup(self, suffix: str) -> str:
        return self._paths[1] + suffix + BACKUP_SUFFIX

    def of(self, f: SwapFile) -> SegmentFiles:
        """The files of the segment ``f`` belongs to: this one, or a split source's later output."""
        if f.base_offset is None or f.base_offset == self.base_offset:
            return self
        return SegmentFiles(self.partition_dir, self.plan_id, f.base_offset)

    @cached_property
    def _paths(self) -> tuple[str, str]:
        """The live and the staged path of this segment without a suffix."""
        name = segment_name(self.base_offset)
        # the work dir joined as a string (``staging_dir`` builds a Path): this runs for every segment of a swap
        return (
            os.path.join(self.partition_dir, name),
            os.path.join(self.partition_dir, f"{WORK_DIR_NAME}-{self.plan_id}", name),
        )

    # --- before the swap -------------------------------------------------------------------------------------

    def staged_intact(self, result: SegmentResult) -> bool:
        """The staged outputs are still what the conversion wrote and verified (a split source's every output)."""
        if not all(_stat(self.staged(sfx)) == want for sfx, want in result.output_stats.items()):
            return False
        return all(
            _stat(SegmentFiles(self.partition_dir, self.plan_id, part.base_offset).staged(sfx)) == want
            for part in result.parts or ()
            for sfx, want in part.output_stats.items()
        )

    def plan_swap(self, result: SegmentResult) -> tuple[SwapFile, ...]:
        """What the swap of this segment will do, checked against the live files the conversion saw: a live file
        that changed since (a broker ran) fails the partition before anything is renamed. A split source's later
        outputs come first: new files (no original), each named by its base offset, so that the source's own
        ``.log`` is the last file renamed and the first put back."""
        files = [
            *(
                SwapFile(sfx, None, output, part.base_offset)
                for part in result.parts or ()
                for sfx, output in part.output_stats.items()
            )
        ]
        for f in files:
            target = self.of(f)
            live, staged = _stat(target.live(f.suffix)), _stat(target.staged(f.suffix))
            if live is not None:
                raise SourceChangedError(
                    f"{target.live(f.suffix)} exists ({_describe(live)}), where a segment split from "
                    f"{self.live('.log')} must go",
                    path=target.live(f.suffix),
                    hint="Nothing was changed. A broker wrote there, or the partition holds a stray segment: "
                    "`rollback` or re-plan after checking the partition with `scan`.",
                )
            if staged != f.output:
                raise SourceChangedError(
                    f"the staged {target.staged(f.suffix)} is not what was verified: {_describe(staged)}, verified "
                    f"{_describe(f.output)}",
                    path=target.staged(f.suffix),
                    hint="Run `execute` again: the segment is converted anew.",
                )
        for sfx, output in result.output_stats.items():
            live = _stat(self.live(sfx))
            before = result.live_before.get(sfx)
            if live != before:
                raise SourceChangedError(
                    f"{self.live(sfx)} changed after it was converted: now {_describe(live)}, converted from "
                    f"{_describe(before)}",
                    path=str(self.live(sfx)),
                )
            staged = _stat(self.staged(sfx))
            if staged != output:
                raise SourceChangedError(
                    f"the staged {self.staged(sfx)} is not what was verified: {_describe(staged)}, verified "
                    f"{_describe(output)}",
                    path=str(self.staged(sfx)),
                    hint="Run `execute` again: the segment is converted anew.",
                )
            files.append(SwapFile(sfx, live, output))
        return tuple(files)

    def before_rename(self, files: tuple[SwapFile, ...]) -> list[str]:
        """Why a resumed swap must not rename any file of this segment: a live file that is neither the original
        nor the output, or a staged file that is no longer what was verified. Empty: every rename can be done."""
        problems = []
        for f in files:
            at = self.of(f)
            live = _stat(at.live(f.suffix))
            if live == f.output:
                continue
            if live != f.original:
                problems.append(
                    f"{at.live(f.suffix)} is {_describe(live)}: neither the original ({_describe(f.original)}) nor "
                    f"the verified output ({_describe(f.output)})"
                )
            elif (staged := _stat(at.staged(f.suffix))) != f.output:
                problems.append(
                    f"the staged {at.staged(f.suffix)} is {_describe(staged)}, not the verified output "
                    f"({_describe(f.output)})"
                )
        return problems

    # --- swap in ---------------------------------------------------------------------------------------------

    def swap_in(self, files: tuple[SwapFile, ...]) -> None:
        """Back up each original and rename the staged file over it; finishes a swap a crash interrupted."""
        for f in files:
            at = self.of(f)
            live, staged, kept = at.live(f.suffix), at.staged(f.suffix), at.backup(f.suffix)
            current = _stat(live)
            if current == f.output:
                continue  # renamed before a crash
            if current != f.original:
                raise SourceChangedError(
                    f"{live} changed during the swap: {_describe(current)}, expected the original "
                    f"({_describe(f.original)}) or the output ({_describe(f.output)})",
                    path=str(live),
                )
            if f.original is not None and _stat(kept) != f.original:
                _unlink(kept)  # a link that never completed, or a leftover
                faults.point("before:backup-link")
                os.link(live, kept)
                faults.point("after:backup-link")
            faults.point("before:rename")
            os.replace(staged, live)
            faults.point("after:rename")

    # --- put back --------------------------------------------------------------------------------------------

    def change(self, files: tuple[SwapFile, ...]) -> list[str]:
        """Live files that are neither the original nor our unchanged output: something wrote them after the swap."""
        changed = []
        for f in files:
            at = self.of(f)
            current = _stat(at.live(f.suffix))
            if current in (f.output, f.original):
                continue
            if f.original is not None and _stat(at.staged(f.suffix)) == f.output:
                # its output is still staged: this file was never swapped, so only "changed since planned" is true
                changed.append(
                    f"{at.live(f.suffix)}: {_describe(current)}; it was never swapped (its verified output is still "
                    f"staged) and is no longer the original ({_describe(f.original)})"
                )
                continue
            changed.append(
                f"{at.live(f.suffix)}: {_describe(current)}; the migration swapped in {_describe(f.output)} "
                f"(original: {_describe(f.original)})"
            )
        return changed

    def restore(self, files: tuple[SwapFile, ...], force: bool = False) -> None:
        """Put every original back (bytes and mtime: the same inode) and remove files the migration added."""
        for f in reversed(files):
            at = self.of(f)
            live, kept = at.live(f.suffix), at.backup(f.suffix)
            current = _stat(live)
            if current != f.output and current != f.original and not force:
                raise SourceChangedError(
                    f"{live} changed after the swap ({_describe(current)}); not putting the original back over it",
                    path=str(live),
                    hint="A broker probably wrote to it. Stop the broker; `rollback --force` restores the original "
                    "and loses what was written since the swap.",
                )
            if f.original is None:
                if current is not None and (current == f.output or force):
                    faults.point("before:unlink")
                    os.unlink(live)
                    faults.point("after:unlink")
                continue
            if current == f.original:
                _unlink(kept)  # a second link to the live inode, or nothing
                continue
            if current != f.output and _stat(at.staged(f.suffix)) == f.output:
                # never renamed (only --force gets here with a changed file). Written to in place (appended,
                # truncated), the original inode is the live file and its backup alike: kept as the broker left it.
                # Deleted or replaced by another file, the backup is still the original: it is put back, never
                # deleted with the work dir (its conversion is not live, so it is the only copy)
                if _stat(kept) == f.original:
                    faults.point("before:restore")
                    os.replace(kept, live)
                    faults.point("after:restore")
                continue
            if _stat(kept) != f.original:
                raise BackupMissingError(
                    f"the backup {kept} of {live} is {_describe(_stat(kept))}, not the original "
                    f"({_describe(f.original)}): it cannot be put back. The live file is the migrated one; keep it "
                    "(run `execute` to finish) or restore the original from a replica."
                )
            faults.point("before:restore")
            os.replace(kept, live)
            faults.point("after:restore")
        for f in files:
            _unlink(self.of(f).staged(f.suffix))
