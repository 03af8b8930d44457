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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrate.codec import loads_text
from migrate.errors import MigrateError, ModelError, SourceChangedError
from migrate.kafka.names import segment_name
from migrate.model.run_state import FileStat, SegmentResult
from migrate.run import faults
from migrate.run.swap_json import SwapFile
from migrate.run.swap_keys import StatKey, SwapFileKey, _key_from, stat_key
from migrate.run.workspace import BACKUP_SUFFIX, WORK_DIR_NAME


class BackupMissingError(MigrateError):
    """The backup of a swapped file is gone: the original cannot be put back."""


def _stat(path: str | Path) -> FileStat | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return FileStat(st.st_ino, st.st_size, st.st_mtime_ns)


def _key(path: str) -> StatKey | None:
    """``_stat`` as a StatKey: the identity compared, no FileStat built."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _link_backup(live: str, kept: str, original: StatKey) -> None:
    if _key(kept) != original:
        _unlink(kept)  # a link that never completed, or a leftover
        faults.point("before:backup-link")
        os.link(live, kept)
        faults.point("after:backup-link")


def _changed_during_swap(
    live: str, current: StatKey | None, original: StatKey | None, output: StatKey
) -> SourceChangedError:
    return SourceChangedError(
        f"{live} changed during the swap: {_describe_key(current)}, expected the original "
        f"({_describe_key(original)}) or the output ({_describe_key(output)})",
        path=live,
    )


def _describe_key(st: StatKey | None) -> str:
    return "missing" if st is None else f"inode {st[0]}, {st[1]} bytes, mtime_ns {st[2]}"


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _describe(st: FileStat | None) -> str:
    return "missing" if st is None else f"inode {st.inode}, {st.size} bytes, mtime_ns {st.mtime_ns}"


def _stats_of(data: Any, where: str) -> dict[str, StatKey]:
    if type(data) is not dict:
        raise ModelError(f"{where}: expected an object of file stats, found {data!r}")
    out = {}
    for sfx, st in data.items():
        key = _key_from(st)
        if key is None:
            raise ModelError(f"{where}.{sfx}: expected an object of inode, size and mtime_ns, found {st!r}")
        out[sfx] = key
    return out


def _keys(stats: dict[str, FileStat]) -> dict[str, StatKey]:
    return {sfx: (st.inode, st.size, st.mtime_ns) for sfx, st in stats.items()}


class SwapSource:
    """What the swap needs of a segment's conversion result: the identities (StatKeys) of its outputs and of the
    live files they replace, the later outputs of a split source, and how the source was when it was read. Read
    from the result's JSON as stored, every field it uses checked as ``from_json`` checks it: decoding the whole
    SegmentResult, for each of 10^6 segments, was a tenth of a swap's time."""

    __slots__ = ("live_before", "log_output", "output_stats", "parts", "source_ctime_ns", "source_edges")

    def __init__(
        self,
        output_stats: dict[str, StatKey],
        live_before: dict[str, StatKey],
        parts: tuple[tuple[int, dict[str, StatKey]], ...],
        source_ctime_ns: int,
        source_edges: str,
        log_output: str | None,
    ) -> None:
        self.output_stats = output_stats
        self.live_before = live_before
        self.parts = parts  # (base offset, output stats) of each later output of a split source
        self.source_ctime_ns = source_ctime_ns
        self.source_edges = source_edges
        self.log_output = log_output  # the staged output .log

    @classmethod
    def of(cls, result: SegmentResult) -> SwapSource:
        return cls(
            _keys(result.output_stats),
            _keys(result.live_before),
            tuple((p.base_offset, _keys(p.output_stats)) for p in result.parts or ()),
            result.source_ctime_ns,
            result.source_edges,
            result.outputs.get(".log"),
        )

    @classmethod
    def of_json(cls, text: str, where: str) -> SwapSource:
        data = loads_text(text)
        if type(data) is not dict:
            raise ModelError(f"{where}: expected a SegmentResult object")
        outputs = data.get("outputs") or {}
        parts = data.get("parts") or ()
        ctime, edges = data.get("source_ctime_ns", 0), data.get("source_edges", "")
        if type(outputs) is not dict or (type(parts) is not list and parts != ()) or type(ctime) is not int:
            raise ModelError(f"{where}: outputs, parts or source_ctime_ns is not of its type")
        if type(edges) is not str or not all(type(v) is str for v in outputs.values()):
            raise ModelError(f"{where}: source_edges or an output path is not a string")
        split = []
        for i, part in enumerate(parts):
            base = part.get("base_offset") if type(part) is dict else None
            if type(base) is not int:
                raise ModelError(f"{where}.parts[{i}]: expected a split part with a base_offset")
            split.append((base, _stats_of(part.get("output_stats") or {}, f"{where}.parts[{i}].output_stats")))
        return cls(
            _stats_of(data.get("output_stats") or {}, f"{where}.output_stats"),
            _stats_of(data.get("live_before") or {}, f"{where}.live_before"),
            tuple(split),
            ctime,
            edges,
            outputs.get(".log"),
        )


PartitionDirs = tuple[int, int]  # descriptors of a partition's dir and of its work dir, in that order


@contextlib.contextmanager
def partition_dirs(partition_dir: str | Path, plan_id: str) -> Iterator[PartitionDirs]:
    """The partition's dir and its work dir held open (``O_PATH``: for the calls relative to them, no read of
    either) while a batch swaps its segments."""
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    live = os.open(partition_dir, flags)
    try:
        work = os.open(f"{WORK_DIR_NAME}-{plan_id}", flags, dir_fd=live)
        try:
            yield live, work
        finally:
            os.close(work)
    finally:
        os.close(live)


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

    def __post_init__(self) -> None:
        """The live and the staged path of this segment without a suffix, built once, when the object is (every
        use asks for them; a cached_property takes a lock on each first use, 10^6 times in a swap)."""
        name = segment_name(self.base_offset)
        # the work dir joined as a string (``staging_dir`` builds a Path): this runs for every segment of a swap
        object.__setattr__(
            self,
            "_paths",
            (
                os.path.join(self.partition_dir, name),
                os.path.join(self.partition_dir, f"{WORK_DIR_NAME}-{self.plan_id}", name),
                name,
            ),
        )

    _paths: tuple[str, str, str] = field(init=False, repr=False, compare=False)

    # --- before the swap -------------------------------------------------------------------------------------

    def staged_intact(self, result: SegmentResult | SwapSource) -> bool:
        """The staged outputs are still what the conversion wrote and verified (a split source's every output)."""
        src = result if isinstance(result, SwapSource) else SwapSource.of(result)
        if not all(_key(self.staged(sfx)) == want for sfx, want in src.output_stats.items()):
            return False
        return all(
            _key(SegmentFiles(self.partition_dir, self.plan_id, base).staged(sfx)) == want
            for base, stats in src.parts
            for sfx, want in stats.items()
        )

    def _at(self, base: int | None) -> SegmentFiles:
        return (
            self if base is None or base == self.base_offset else SegmentFiles(self.partition_dir, self.plan_id, base)
        )

    def plan_swap(
        self, result: SwapSource, live_names: frozenset[str] | set[str] | None = None
    ) -> tuple[tuple[SwapFileKey, ...], os.stat_result | None]:
        """What the swap of this segment will do (its swap files as StatKeys), checked against the live files the
        conversion saw: a live file that changed since (a broker ran) fails the partition before anything is
        renamed. A split source's later outputs come first: new files (no original), each named by its base
        offset, so that the source's own ``.log`` is the last file renamed and the first put back. Also returns the
        live ``.log``'s stat as taken here, for ``changed_since_stat``. ``live_names``: the partition dir's listing,
        taken for the batch just before; a file that it does not hold and that must not exist is not asked for
        again (the swap's own check right before each rename still is)."""
        files: list[SwapFileKey] = [
            (sfx, base, None, output) for base, stats in result.parts for sfx, output in stats.items()
        ]
        for sfx, base, _, output in files:
            target = self._at(base)
            name = target.live(sfx)
            live = None if live_names is not None and os.path.basename(name) not in live_names else _key(name)
            if live is not None:
                raise SourceChangedError(
                    f"{target.live(sfx)} exists ({_describe_key(live)}), where a segment split from "
                    f"{self.live('.log')} must go",
                    path=target.live(sfx),
                    hint="Nothing was changed. A broker wrote there, or the partition holds a stray segment: "
                    "`rollback` or re-plan after checking the partition with `scan`.",
                )
            staged = _key(target.staged(sfx))
            if staged != output:
                raise SourceChangedError(
                    f"the staged {target.staged(sfx)} is not what was verified: {_describe_key(staged)}, verified "
                    f"{_describe_key(output)}",
                    path=target.staged(sfx),
                    hint="Run `execute` again: the segment is converted anew.",
                )
        log_st = None
        prefix = self._paths[0]
        name_prefix = os.path.basename(prefix)
        for sfx, output in result.output_stats.items():
            before = result.live_before.get(sfx)
            if before is None and live_names is not None and name_prefix + sfx not in live_names:
                live = None  # not there, and none was: no stat to ask
            else:
                try:
                    st = os.stat(prefix + sfx)
                except FileNotFoundError:
                    live = None
                else:
                    live = (st.st_ino, st.st_size, st.st_mtime_ns)
                    if sfx == ".log":
                        log_st = st
            if live != before:
                raise SourceChangedError(
                    f"{self.live(sfx)} changed after it was converted: now {_describe_key(live)}, converted from "
                    f"{_describe_key(before)}",
                    path=str(self.live(sfx)),
                )
            staged = _key(self.staged(sfx))
            if staged != output:
                raise SourceChangedError(
                    f"the staged {self.staged(sfx)} is not what was verified: {_describe_key(staged)}, verified "
                    f"{_describe_key(output)}",
                    path=str(self.staged(sfx)),
                    hint="Run `execute` again: the segment is converted anew.",
                )
            files.append((sfx, None, before, output))
        return tuple(files), log_st

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
        self.swap_in_keys(tuple((f.suffix, f.base_offset, stat_key(f.original), stat_key(f.output)) for f in files))

    def swap_in_keys(
        self,
        files: tuple[SwapFileKey, ...],
        work_names: frozenset[str] | None = None,
        dirs: PartitionDirs | None = None,
    ) -> None:
        """``swap_in`` of swap files as StatKeys. ``work_names``: the work dir's listing, taken for the batch
        before its swap began: a backup it does not hold is linked without asking for it first (were one made
        since, the link fails and it is then asked for). ``dirs``: the partition's and its work dir's descriptors
        (``partition_dirs``): each call then names its file alone, relative to them."""
        for suffix, base, original, output in files:
            at = self._at(base)
            if dirs is not None:
                at._swap_in_at(suffix, original, output, work_names, dirs)
                continue
            live, staged, kept = at.live(suffix), at.staged(suffix), at.backup(suffix)
            current = _key(live)
            if current == output:
                continue  # renamed before a crash
            if current != original:
                raise _changed_during_swap(live, current, original, output)
            if original is not None:
                if work_names is not None and os.path.basename(kept) not in work_names:
                    try:
                        faults.point("before:backup-link")
                        os.link(live, kept)
                        faults.point("after:backup-link")
                    except FileExistsError:
                        _link_backup(live, kept, original)
                else:
                    _link_backup(live, kept, original)
            faults.point("before:rename")
            os.replace(staged, live)
            faults.point("after:rename")

    def _swap_in_at(
        self,
        suffix: str,
        original: StatKey | None,
        output: StatKey,
        work_names: frozenset[str] | None,
        dirs: PartitionDirs,
    ) -> None:
        """One file's ``swap_in_keys``, each call relative to the partition's dirs: the kernel walks one name, not
        the whole path (a fifth of the swap's path calls' cost, three files a segment, 10^6 segments)."""
        live_dir, work_dir = dirs
        name = self._paths[2] + suffix
        try:
            st = os.stat(name, dir_fd=live_dir)
        except FileNotFoundError:
            current = None
        else:
            current = (st.st_ino, st.st_size, st.st_mtime_ns)
        if current == output:
            return  # renamed before a crash
        if current != original:
            raise _changed_during_swap(self.live(suffix), current, original, output)
        if original is not None:
            kept = name + BACKUP_SUFFIX
            if work_names is not None and kept not in work_names:
                try:
                    faults.point("before:backup-link")
                    os.link(name, kept, src_dir_fd=live_dir, dst_dir_fd=work_dir)
                    faults.point("after:backup-link")
                except FileExistsError:
                    _link_backup(self.live(suffix), self.backup(suffix), original)
            else:
                _link_backup(self.live(suffix), self.backup(suffix), original)
        faults.point("before:rename")
        os.replace(name, name, src_dir_fd=work_dir, dst_dir_fd=live_dir)
        faults.point("after:rename")

    # --- put back --------------------------------------------------------------------------------------------

    def change(self, files: tuple[SwapFile, ...]) -> list[str]:
        """Live files that are neither the original nor our unchanged output: something wrote them after the swap."""
        return self.change_keys(
            tuple((f.suffix, f.base_offset, stat_key(f.original), stat_key(f.output)) for f in files)
        )

    def change_keys(self, files: tuple[SwapFileKey, ...]) -> list[str]:
        """``change`` of swap files as StatKeys (``migrate.run.swap_keys.swap_file_keys_of``): verify asks it of
        every swapped segment, 10^5-10^6, and builds no SwapFile nor FileStat for it."""
        changed = []
        for suffix, base, original, output in files:
            at = (
                self
                if base is None or base == self.base_offset
                else SegmentFiles(self.partition_dir, self.plan_id, base)
            )
            live = at.live(suffix)
            current = _key(live)
            if current in (output, original):
                continue
            if original is not None and _key(at.staged(suffix)) == output:
                # its output is still staged: this file was never swapped, so only "changed since planned" is true
                changed.append(
                    f"{live}: {_describe_key(current)}; it was never swapped (its verified output is still "
                    f"staged) and is no longer the original ({_describe_key(original)})"
                )
                continue
            changed.append(
                f"{live}: {_describe_key(current)}; the migration swapped in {_describe_key(output)} "
                f"(original: {_describe_key(original)})"
            )
        return changed

    def restore(self, files: tuple[SwapFile, ...], force: bool = False) -> None:
        """Put every original back (bytes and mtime: the same inode) and remove files the migration added."""
        self.restore_keys(
            tuple((f.suffix, f.base_offset, stat_key(f.original), stat_key(f.output)) for f in files), force
        )

    def restore_keys(
        self, files: tuple[SwapFileKey, ...], force: bool = False, work_names: frozenset[str] | None = None
    ) -> None:
        """``restore`` of swap files as StatKeys (``migrate.run.swap_keys.swap_file_keys_of``: a rollback of 10^6
        segments builds no SwapFile). ``work_names``: the work dir's listing, taken for the batch just before: a
        staged file it does not hold is not unlinked again (only this tool makes one, and the work dir goes next)."""
        for suffix, base, original, output in reversed(files):
            at = (
                self
                if base is None or base == self.base_offset
                else SegmentFiles(self.partition_dir, self.plan_id, base)
            )
            live, kept = at.live(suffix), at.backup(suffix)
            current = _key(live)
            if current != output and current != original and not force:
                raise SourceChangedError(
                    f"{live} changed after the swap ({_describe_key(current)}); not putting the original back over it",
                    path=str(live),
                    hint="A broker probably wrote to it. Stop the broker; `rollback --force` restores the original "
                    "and loses what was written since the swap.",
                )
            if original is None:
                if current is not None and (current == output or force):
                    faults.point("before:unlink")
                    os.unlink(live)
                    faults.point("after:unlink")
                continue
            if current == original:
                _unlink(kept)  # a second link to the live inode, or nothing
                continue
            if current != output and _key(at.staged(suffix)) == output:
                # never renamed (only --force gets here with a changed file). Written to in place (appended,
                # truncated), the original inode is the live file and its backup alike: kept as the broker left it.
                # Deleted or replaced by another file, the backup is still the original: it is put back, never
                # deleted with the work dir (its conversion is not live, so it is the only copy)
                if _key(kept) == original:
                    faults.point("before:restore")
                    os.replace(kept, live)
                    faults.point("after:restore")
                continue
            if (backup := _key(kept)) != original:
                raise BackupMissingError(
                    f"the backup {kept} of {live} is {_describe_key(backup)}, not the original "
                    f"({_describe_key(original)}): it cannot be put back. The live file is the migrated one; keep it "
                    "(run `execute` to finish) or restore the original from a replica."
                )
            faults.point("before:restore")
            os.replace(kept, live)
            faults.point("after:restore")
        for suffix, base, _, _ in files:
            staged = (self if base is None else SegmentFiles(self.partition_dir, self.plan_id, base)).staged(suffix)
            if work_names is None or os.path.basename(staged) in work_names:
                _unlink(staged)
