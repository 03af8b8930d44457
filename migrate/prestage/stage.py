"""Stage one closed segment of a running broker: read it once through the controls, convert and verify it with
execute's own code (``migrate.segment``), and keep the result only if the source is provably the file it was when the
read began.

The source's identity is taken on the path and on the open descriptor before the read and again after it: a segment
renamed to ``.deleted`` (retention, the cleaner), unlinked, truncated and refilled (follower truncation) or replaced
(the cleaner's ``.swap`` rename) while it was read is rejected, and its outputs are removed. Nothing is written next
to the source. The outputs are written unnamed into the partition's staging dir (``O_TMPFILE``, through its
directory descriptor: ``migrate.prestage.tree``), verified there from disk and fsynced; then a pending record names
them by device and inode, they are linked under their final names, and the record beside them is written last
(``migrate.prestage.record``): a crash at any point leaves either nothing under a name, or files the pending record
names, which the next pass removes.
"""

from __future__ import annotations

import contextlib
import enum
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from migrate import __version__
from migrate.errors import LocatedError, ModelError, SegmentRefusedError
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import ConversionStatus, SegmentResult, SegmentTask
from migrate.model.segment_files import SegmentFiles
from migrate.prestage import pagecache
from migrate.prestage.controls import Controls
from migrate.prestage.identity import EdgeDigest, FileIdentity
from migrate.prestage.record import (
    PENDING_RE,
    RECORD_VERSION,
    STAGED_FILES,
    PendingRecord,
    StagedRecord,
    StagedSegment,
    pending_name,
    read_record,
    record_name,
    remove_pending,
    remove_staged,
    write_pending,
    write_record,
)
from migrate.prestage.tree import NodeId, PartitionStaging
from migrate.run import faults
from migrate.segment.convert import (
    SMALL_SEGMENT_BYTES,
    check_planned,
    finish_open_output,
    live_files,
    stats_of,
    stream_entries,
)
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import SegmentFile, read_whole
from migrate.segment.small import convert_whole
from migrate.segment.verify import verify_segment

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_WRITE_BUFFER = 1 << 20  # as execute's convert_segment
_WRITEBACK_STEP = 8 << 20  # dirty bytes of a staged .log at most before they are pushed to disk


class StageResult(str, enum.Enum):
    STAGED = "staged"  # converted, verified, synced, recorded
    UNCHANGED = "unchanged"  # already in the target format: recorded with no staged files
    REJECTED = "rejected"  # the source changed or vanished while read: nothing kept
    REFUSED = "refused"  # the source's bytes cannot be converted (execute would refuse them too)
    BLOCKED = "blocked"  # a file this tool did not write holds one of the staged names: left alone, not staged

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StageOutcome:
    result: StageResult
    source: str
    source_bytes: int = 0
    staged_bytes: int = 0
    problem: str = ""
    record: StagedSegment | None = None  # what a pass wrote, as the staging dir now holds it


class StagingWriteError(OSError):
    """Writing the staging tree failed (ENOSPC, EIO): the partial outputs are removed; the pass stops."""


def stage_segment(
    source: Path, staging: PartitionStaging, options: ConvertOptions, controls: Controls, log_dir: Path, root: Path
) -> StageOutcome:
    """Stage ``source`` (a closed ``<base>.log``) into ``staging``, replacing what was staged for it. ``root``: the
    staging tree's path, for the record and messages."""
    base_offset = int(source.name.split(".")[0])
    blocked = discard(staging, base_offset, root)
    if blocked:
        return StageOutcome(StageResult.BLOCKED, str(source), problem=blocked)
    try:
        by_path = os.stat(source)
        fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return StageOutcome(StageResult.REJECTED, str(source), problem=f"{source} vanished before it was read")
    src = os.fdopen(fd, "rb", buffering=0)
    with src:
        st = os.fstat(fd)
        before = FileIdentity.of(st)
        if FileIdentity.of(by_path) != before:
            return _rejected(
                source, f"{source} changed while it was opened ({FileIdentity.of(by_path).differences(before)})"
            )
        resident = pagecache.resident_pages(fd, st.st_size)
        outputs = NewOutputs(staging)
        try:
            task = SegmentTask(
                source=str(source),
                staging_dir=str(staging.path),
                base_offset=base_offset,
                options=options,
                expected_size=st.st_size,
                expected_mtime_ns=st.st_mtime_ns,
                expected_inode=st.st_ino,
            )
            try:
                faults.point("before:prestage-convert")
                result = convert(task, src, st, controls, outputs)
            except LocatedError as exc:
                changed = _changed(source, fd, before)
                if changed:
                    return _rejected(source, changed)
                return StageOutcome(StageResult.REFUSED, str(source), st.st_size, problem=str(exc))
            edge = EdgeDigest.of_fd(fd, st.st_size)
            changed = _changed(source, fd, before)
            if changed:
                return _rejected(source, changed)
            faults.point("before:prestage-seal")
            sealing, waited = time.perf_counter(), controls.waited_seconds
            _seal(result, options, controls, outputs)
            # the record's seconds: converting and verifying, as the cut-over's cold-run estimate counts them
            result.seconds += time.perf_counter() - sealing - (controls.waited_seconds - waited)
            controls.check()
            faults.point("before:prestage-link")
            staged = outputs.link(base_offset)
            if staged is None:
                return StageOutcome(
                    StageResult.BLOCKED,
                    str(source),
                    problem=f"{staging.path}: a file this tool did not write appeared under one of "
                    f"{segment_name(base_offset)}.log/.index/.timeindex while it was staged: left alone, not staged",
                )
            faults.point("after:prestage-link")
            result.outputs = staged.map(lambda kind, _: str(staging.path / segment_name(base_offset, kind)))
            record = StagedRecord(
                version=RECORD_VERSION,
                tool=f"kafka-log-migrate {__version__}",
                log_dir=str(log_dir),
                partition=staging.name,
                base_offset=base_offset,
                source=str(source),
                source_identity=before,
                source_edge=edge,
                options=options,
                result=result,
                staged=staged,
                staged_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            )
            faults.point("before:prestage-record")
            try:
                written = write_record(staging, record, root)
            except FileExistsError:
                outputs.unlink_linked(base_offset)
                return StageOutcome(
                    StageResult.BLOCKED,
                    str(source),
                    problem=f"{staging.path / record_name(base_offset)} appeared while the segment was staged, and "
                    "this tool did not write it: left alone, not staged",
                )
            except OSError as exc:
                outputs.unlink_linked(base_offset)
                raise StagingWriteError(exc.errno, exc.strerror, str(staging.path / record_name(base_offset))) from exc
            faults.point("after:prestage-record")
            outputs.settle(base_offset)
        except BaseException:
            outputs.abandon(base_offset)
            raise
        finally:
            outputs.close()
            pagecache.drop_brought_in(fd, resident)
    kind = StageResult.STAGED if staged else StageResult.UNCHANGED
    return StageOutcome(kind, str(source), st.st_size, sum(i.size for _, i in staged), record=written)


def _rejected(source: Path, why: str) -> StageOutcome:
    return StageOutcome(StageResult.REJECTED, str(source), problem=f"{why}; not staged, the next pass reads it again")


def _changed(source: Path, fd: int, before: FileIdentity) -> str:
    """Why the source is no longer the file whose read began ('' when it still is)."""
    st = os.fstat(fd)
    if st.st_nlink == 0:
        return f"{source} was unlinked while it was read"
    on_fd = FileIdentity.of(st)
    if on_fd != before:
        return f"{source} changed while it was read ({before.differences(on_fd)})"
    on_path = FileIdentity.at(source)
    if on_path != before:
        return f"{source} was renamed or replaced while it was read ({before.differences(on_path)})"
    return ""


class NewOutputs:
    """The unnamed output files of one segment being staged, by kind, until they are linked under their names."""

    def __init__(self, staging: PartitionStaging) -> None:
        self.staging = staging
        self.fds: dict[FileKind, int] = {}
        self.linked: dict[FileKind, NodeId] = {}
        self.pending = False

    def new(self, kind: FileKind, mode: int) -> int:
        try:
            fd = self.staging.new_file(mode)
        except OSError as exc:
            raise StagingWriteError(exc.errno, exc.strerror, str(self.staging.path)) from exc
        self.fds[kind] = fd
        return fd

    def path(self, kind: FileKind) -> str:
        """A path to the unnamed file that any reader can open (verify reads by path): its descriptor's."""
        return f"/proc/self/fd/{self.fds[kind]}"

    def drop(self, kind: FileKind) -> None:
        fd = self.fds.pop(kind, None)
        if fd is not None:
            self.staging.forget_new(fd)

    def link(self, base_offset: int) -> SegmentFiles[FileIdentity] | None:
        """Name every output: a pending record first (their devices and inodes), then one link each; their
        identities once linked. None where a name is taken by a file this tool did not write (nothing linked stays)."""
        if not self.fds:
            return SegmentFiles()
        nodes = {kind: NodeId.of(os.fstat(fd)) for kind, fd in self.fds.items()}
        try:
            write_pending(self.staging, PendingRecord(RECORD_VERSION, base_offset, SegmentFiles.of(nodes.items())))
        except FileExistsError:
            return None
        except OSError as exc:
            where = str(self.staging.path / pending_name(base_offset))
            raise StagingWriteError(exc.errno, exc.strerror, where) from exc
        self.pending = True
        for kind, fd in self.fds.items():
            try:
                self.staging.link(fd, segment_name(base_offset, kind))
            except FileExistsError:
                self.unlink_linked(base_offset)
                return None
            except OSError as exc:
                self.unlink_linked(base_offset)
                raise StagingWriteError(exc.errno, exc.strerror, str(self.staging.path)) from exc
            self.linked[kind] = nodes[kind]
        return SegmentFiles.of((kind, FileIdentity.of(os.fstat(fd))) for kind, fd in self.fds.items())

    def unlink_linked(self, base_offset: int) -> None:
        """Undo ``link``: the names given (each only where still ours), then the pending record."""
        for kind, node in list(self.linked.items()):
            self.staging.remove_owned(segment_name(base_offset, kind), node)
            del self.linked[kind]
        if self.pending:
            remove_pending(self.staging, pending_name(base_offset), files_too=False)
            self.pending = False

    def settle(self, base_offset: int) -> None:
        """The record is durable: the pending record has done its work, and the outputs leave the page cache."""
        if self.pending:
            remove_pending(self.staging, pending_name(base_offset), files_too=False)
            self.pending = False
        self.linked.clear()
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)

    def abandon(self, base_offset: int) -> None:
        with contextlib.suppress(OSError):
            self.unlink_linked(base_offset)

    def close(self) -> None:
        for kind in list(self.fds):
            self.drop(kind)


def _seal(result: SegmentResult, options: ConvertOptions, controls: Controls, outputs: NewOutputs) -> None:
    """Verify the unnamed outputs from disk and make them durable."""
    if result.status == ConversionStatus.UNCHANGED:
        return
    check = verify_segment(result, options)
    if not check.ok:
        raise SegmentRefusedError(
            f"the converted segment did not verify: {'; '.join(check.problems[:5])}",
            path=result.source,
            hint="Nothing live was changed; this is a bug in kafka-log-migrate: keep the segment and report it.",
        )
    for kind in STAGED_FILES:
        controls.check()
        try:
            os.fsync(outputs.fds[kind])
        except OSError as exc:
            raise StagingWriteError(exc.errno, exc.strerror, str(outputs.staging.path)) from exc


def discard(staging: PartitionStaging, base_offset: int, root: Path) -> str:
    """Remove what is staged for ``base_offset`` (what its record or pending record names, each file only where it
    is still the one written); '' when done, else why not (a file this tool did not write is in the way)."""
    left: list[str] = []
    for name in staging.names():
        m = PENDING_RE.match(name)
        if m is not None and int(m.group(1)) == base_offset:
            left += remove_pending(staging, name, files_too=staging.lstat(record_name(base_offset)) is None)
    try:
        found = read_record(staging, base_offset, root)
    except ModelError as exc:
        return f"{exc}: not a record this tool wrote; left alone, the segment is not staged"
    if found is not None:
        left += remove_staged(staging, found)
    for kind in STAGED_FILES:
        if staging.lstat(segment_name(base_offset, kind)) is not None:
            left.append(f"{staging.path / segment_name(base_offset, kind)}: no record of this tool names it")
    if left:
        return "; ".join(left) + ". Left alone and not staged: remove those files (after checking what they are)."
    return ""


# --- conversion: execute's stream_entries and finish_open_output, with every read and write gated ----------------


def convert(
    task: SegmentTask, src: io.FileIO, st: os.stat_result, controls: Controls, outputs: NewOutputs
) -> SegmentResult:
    """``migrate.segment.convert.convert_segment`` on an open source whose reads and writes pass the controls, into
    the unnamed files of ``outputs``: the same bytes, indexes, owner, mode and mtime. ``result.outputs`` name the
    files by their descriptors until they are linked."""
    started, waited = time.perf_counter(), controls.waited_seconds
    check_planned(task, st)
    source = Path(task.source)
    # the live files the outputs will replace, as they are now (the .log: the source as opened), stated once: their
    # identities for the record, their owner and mode for the outputs
    live = live_files(str(source.parent), task.base_offset, log=st)
    data = _read_small(task, src, st, controls)
    whole = convert_whole(task, data, st) if data is not None else None
    index_files: tuple[bytes, bytes] | None = None
    if whole is not None:
        # a tiny plain legacy segment, converted whole in one call (as execute converts it): the same bytes,
        # indexes and result as the general path below, at a fraction of its cost per segment
        result, index_files = whole.result, whole.index_files
        _write_new(outputs, FileKind.LOG, whole.log, controls, result, live, st)
    else:
        index = IndexBuilder(task.base_offset, task.options.index_interval_bytes)
        fd = outputs.new(FileKind.LOG, 0o666)
        with open(fd, "wb", buffering=_WRITE_BUFFER, closefd=False) as out:
            writer = _GatedWriter(out, controls, str(outputs.staging.path))
            reader = _GatedReader(src, controls)
            result = stream_entries(task, reader, writer, st, index=index, data=data).result
            writer.flush()
        if result.status != ConversionStatus.UNCHANGED:
            finish_open_output(fd, outputs.path(FileKind.LOG), FileKind.LOG, result, live, st)
            index_files = index.finish()
    for kind, output in zip((FileKind.INDEX, FileKind.TIME_INDEX), index_files or ()):
        _write_new(outputs, kind, output, controls, result, live, st)
    result.live_before = stats_of(live)
    if result.status == ConversionStatus.UNCHANGED:
        outputs.close()
        result.outputs, result.output_stats, result.output_digests = SegmentFiles(), SegmentFiles(), SegmentFiles()
        result.output_bytes = 0
    # the conversion's own time, without the throttle's and the pause file's waits: what a cold run would spend
    result.seconds = time.perf_counter() - started - (controls.waited_seconds - waited)
    return result


def _write_new(
    outputs: NewOutputs,
    kind: FileKind,
    data: bytes,
    controls: Controls,
    result: SegmentResult,
    live: SegmentFiles[os.stat_result],
    source: os.stat_result,
) -> None:
    """``data`` as the new unnamed output ``kind``, through the controls, created with the mode the general path
    creates it with (``open(..., "wb")`` for a .log), then given the owner and mode of the live file it replaces and
    the source's mtime, and recorded in ``result`` (``finish_open_output``)."""
    controls.gate(len(data))
    fd = outputs.new(kind, 0o666 if kind is FileKind.LOG else 0o644)
    _write_all(fd, data, outputs.staging.path)
    finish_open_output(fd, outputs.path(kind), kind, result, live, source)


def _read_small(task: SegmentTask, src: io.FileIO, st: os.stat_result, controls: Controls) -> bytes | None:
    """A source below the reader's chunk size (and execute's small-segment bound), read whole with one pread
    through the controls (its bytes counted once, as the general path's pieces are); None for any other, or for one
    whose size moved since ``st`` (the general path then reads it in pieces)."""
    if st.st_size >= min(task.options.chunk_bytes, SMALL_SEGMENT_BYTES):
        return None
    controls.gate(st.st_size)
    return read_whole(src.fileno(), st.st_size)


def _write_all(fd: int, data: bytes, path: Path) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise StagingWriteError(exc.errno, exc.strerror, str(path)) from exc


class _GatedReader(io.RawIOBase):
    """The source as ``read_chunks`` reads it (``readinto``), a piece at a time through the controls."""

    def __init__(self, raw: SegmentFile, controls: Controls) -> None:
        super().__init__()
        self._raw = raw
        self._controls = controls

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int | None:
        view = memoryview(buffer)
        size = min(len(view), self._controls.piece)
        self._controls.gate(size)
        return self._raw.readinto(view[:size])


class _GatedWriter:
    """The staged .log as ``stream_entries`` writes it, through the controls, its dirty bytes bounded."""

    def __init__(self, out: BinaryIO, controls: Controls, where: str) -> None:
        self._out = out
        self._where = where  # the staging dir, for a write error's message
        self._controls = controls
        self._owed = 0  # bytes written but not yet counted: small writes are counted a piece at a time
        self._written = 0
        self._pushed = 0  # bytes handed to writeback

    def write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        piece = self._controls.piece
        while view:
            part = view[:piece]
            self._owed += len(part)
            if self._owed >= piece:
                self._controls.gate(self._owed)
                self._owed = 0
            self._put(part)
            view = view[len(part) :]
        return len(data)

    def _put(self, data: memoryview) -> None:
        try:
            self._out.write(data)
        except OSError as exc:
            raise StagingWriteError(exc.errno, exc.strerror, self._where) from exc
        self._written += len(data)
        if self._written - self._pushed >= 2 * _WRITEBACK_STEP:
            self.flush()
            fd = self._out.fileno()
            # wait for the step before last, start the last: at most two steps of this file are dirty
            pagecache.start_writeback(fd, self._pushed, _WRITEBACK_STEP, wait=True)
            pagecache.start_writeback(
                fd, self._pushed + _WRITEBACK_STEP, self._written - self._pushed - _WRITEBACK_STEP
            )
            self._pushed += _WRITEBACK_STEP

    def flush(self) -> None:
        if self._owed:
            self._controls.gate(self._owed)
            self._owed = 0
        try:
            self._out.flush()
        except OSError as exc:
            raise StagingWriteError(exc.errno, exc.strerror, self._where) from exc
