"""Stage one closed segment of a running broker: read it once through the controls, convert and verify it with
execute's own code (``migrate.segment``), and keep the result only if the source is provably the file it was when the
read began.

The source's identity is taken on the path and on the open descriptor before the read and again after it: a segment
renamed to ``.deleted`` (retention, the cleaner), unlinked, truncated and refilled (follower truncation) or replaced
(the cleaner's ``.swap`` rename) while it was read is rejected, and its outputs are removed. Nothing is written next
to the source: the outputs go to the partition's staging dir, under their final names, and are trusted only once
the record beside them is written (``migrate.prestage.record``).
"""

from __future__ import annotations

import contextlib
import enum
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from migrate import __version__
from migrate.errors import LocatedError, SegmentRefusedError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import ConversionStatus, FileStat, SegmentResult, SegmentTask
from migrate.prestage import pagecache
from migrate.prestage.controls import Controls
from migrate.prestage.identity import EdgeDigest, FileIdentity
from migrate.prestage.record import (
    RECORD_VERSION,
    STAGED_SUFFIXES,
    StagedRecord,
    fsync_dir,
    record_path,
    write_record,
)
from migrate.run import faults
from migrate.segment.convert import (
    SMALL_SEGMENT_BYTES,
    check_planned,
    finish_open_output,
    live_files,
    stream_entries,
)
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import read_whole
from migrate.segment.small import convert_whole
from migrate.segment.verify import verify_segment

_WRITE_BUFFER = 1 << 20  # as execute's convert_segment
_WRITEBACK_STEP = 8 << 20  # dirty bytes of a staged .log at most before they are pushed to disk


class StageResult(str, enum.Enum):
    STAGED = "staged"  # converted, verified, synced, recorded
    UNCHANGED = "unchanged"  # already in the target format: recorded with no staged files
    REJECTED = "rejected"  # the source changed or vanished while read: nothing kept
    REFUSED = "refused"  # the source's bytes cannot be converted (execute would refuse them too)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StageOutcome:
    result: StageResult
    source: str
    source_bytes: int = 0
    staged_bytes: int = 0
    problem: str = ""


class StagingWriteError(OSError):
    """Writing the staging tree failed (ENOSPC, EIO): the partial outputs are removed; the pass stops."""


def stage_segment(
    source: Path, partition_staging: Path, options: ConvertOptions, controls: Controls, log_dir: Path
) -> StageOutcome:
    """Stage ``source`` (a closed ``<base>.log``) into ``partition_staging``, replacing what was staged for it."""
    base_offset = int(source.name.split(".")[0])
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
        try:
            discard(partition_staging, base_offset)
            task = SegmentTask(
                source=str(source),
                staging_dir=str(partition_staging),
                base_offset=base_offset,
                options=options,
                expected_size=st.st_size,
                expected_mtime_ns=st.st_mtime_ns,
                expected_inode=st.st_ino,
            )
            try:
                faults.point("before:prestage-convert")
                result = convert(task, src, st, controls)
            except LocatedError as exc:
                changed = _changed(source, fd, before)
                if changed:
                    return _rejected(source, changed)
                return StageOutcome(StageResult.REFUSED, str(source), st.st_size, problem=str(exc))
            try:
                edge = EdgeDigest.of_fd(fd, st.st_size)
                changed = _changed(source, fd, before)
                if changed:
                    discard(partition_staging, base_offset)
                    return _rejected(source, changed)
                faults.point("before:prestage-seal")
                sealing, waited = time.perf_counter(), controls.waited_seconds
                staged = _seal(result, options, controls)
                # the record's seconds: converting and verifying, as the cut-over's cold-run estimate counts them
                result.seconds += time.perf_counter() - sealing - (controls.waited_seconds - waited)
                record = StagedRecord(
                    version=RECORD_VERSION,
                    tool=f"kafka-log-migrate {__version__}",
                    log_dir=str(log_dir),
                    partition=source.parent.name,
                    base_offset=base_offset,
                    source=str(source),
                    source_identity=before,
                    source_edge=edge,
                    options=options,
                    result=result,
                    staged=staged,
                    staged_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                )
                controls.check()
                target = record_path(partition_staging, base_offset)
                faults.point("before:prestage-record")
                try:
                    write_record(target, record)
                except OSError as exc:
                    raise StagingWriteError(exc.errno, exc.strerror, str(target)) from exc
                faults.point("after:prestage-record")
            except BaseException:
                discard(partition_staging, base_offset)
                raise
        finally:
            pagecache.drop_brought_in(fd, resident)
    kind = StageResult.STAGED if staged else StageResult.UNCHANGED
    return StageOutcome(kind, str(source), st.st_size, sum(i.size for i in staged.values()))


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


def _seal(result: SegmentResult, options: ConvertOptions, controls: Controls) -> dict:
    """Verify the staged outputs from disk, make them durable and drop them from the page cache; their identities."""
    if result.status == ConversionStatus.UNCHANGED:
        return {}
    check = verify_segment(result, options)
    if not check.ok:
        raise SegmentRefusedError(
            f"the converted segment did not verify: {'; '.join(check.problems[:5])}",
            path=result.source,
            hint="Nothing live was changed; this is a bug in kafka-log-migrate: keep the segment and report it.",
        )
    staged = {}
    for sfx in STAGED_SUFFIXES:
        path = result.outputs[sfx]
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            controls.check()
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StagingWriteError(exc.errno, exc.strerror, path) from exc
            staged[sfx] = FileIdentity.of(os.fstat(fd))
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    fsync_dir(Path(result.outputs[".log"]).parent)
    return staged


def discard(partition_staging: Path, base_offset: int) -> None:
    """Remove what is staged for ``base_offset``: the record first (so nothing half-removed is ever trusted), then
    the files it named."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(partition_staging, base_offset))
    for sfx in STAGED_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partition_staging / segment_name(base_offset, sfx))


# --- conversion: execute's stream_entries and finish_open_output, with every read and write gated ----------------


def convert(task: SegmentTask, src: BinaryIO, st: os.stat_result, controls: Controls) -> SegmentResult:
    """``migrate.segment.convert.convert_segment`` on an open source whose reads and writes pass the controls:
    the same bytes, indexes, owner, mode and mtime. Nothing is left in the staging dir on error."""
    started, waited = time.perf_counter(), controls.waited_seconds
    check_planned(task, st)
    source = Path(task.source)
    # the live files the outputs will replace, as they are now (the .log: the source as opened), stated once: their
    # identities for the record, their owner and mode for the outputs
    live = live_files(str(source.parent), task.base_offset, log=st)
    staging = Path(task.staging_dir)  # made by the pass, once for its partition
    finals = {sfx: staging / segment_name(task.base_offset, sfx) for sfx in STAGED_SUFFIXES}
    try:
        data = _read_small(task, src, st, controls)
        whole = convert_whole(task, data, st) if data is not None else None
        index_files: tuple[bytes, bytes] | None = None
        if whole is not None:
            # a tiny plain legacy segment, converted whole in one call (as execute converts it): the same bytes,
            # indexes and result as the general path below, at a fraction of its cost per segment
            result, index_files = whole.result, whole.index_files
            _write_new(finals[".log"], whole.log, controls, result, live, st)
        else:
            index = IndexBuilder(task.base_offset, task.options.index_interval_bytes)
            with open(finals[".log"], "wb", buffering=_WRITE_BUFFER) as out:
                writer = _GatedWriter(out, controls)
                reader = _GatedReader(src, controls)
                result = stream_entries(task, reader, writer, st, index=index, data=data).result  # type: ignore[arg-type]
                writer.flush()
                if result.status != ConversionStatus.UNCHANGED:
                    finish_open_output(out.fileno(), str(finals[".log"]), ".log", result, live, st)
                    index_files = index.finish()
        for sfx, output in zip((".index", ".timeindex"), index_files or ()):
            _write_new(finals[sfx], output, controls, result, live, st)
        result.live_before = {sfx: FileStat.of(x) for sfx, x in live.items()}
        if result.status == ConversionStatus.UNCHANGED:
            finals[".log"].unlink()
            result.output_bytes = 0
    except BaseException:
        for path in finals.values():
            path.unlink(missing_ok=True)
        raise
    # the conversion's own time, without the throttle's and the pause file's waits: what a cold run would spend
    result.seconds = time.perf_counter() - started - (controls.waited_seconds - waited)
    return result


def _write_new(
    path: Path,
    data: bytes,
    controls: Controls,
    result: SegmentResult,
    live: dict[str, os.stat_result],
    source: os.stat_result,
) -> None:
    """``data`` as the new staged file ``path``, through the controls, created with the mode the general path
    creates it with (``open(..., "wb")`` for a .log), then given the owner and mode of the live file it replaces and
    the source's mtime, and recorded in ``result`` (``finish_open_output``)."""
    controls.gate(len(data))
    sfx = path.suffix
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666 if sfx == ".log" else 0o644)
    try:
        _write_all(fd, data, path)
        finish_open_output(fd, str(path), sfx, result, live, source)
    finally:
        os.close(fd)


def _read_small(task: SegmentTask, src: BinaryIO, st: os.stat_result, controls: Controls) -> bytes | None:
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


class _GatedReader:
    """The source as ``read_chunks`` reads it (``readinto``), a piece at a time through the controls."""

    def __init__(self, raw: BinaryIO, controls: Controls) -> None:
        self._raw = raw
        self._controls = controls

    def readinto(self, view: memoryview) -> int:
        size = min(len(view), self._controls.piece)
        self._controls.gate(size)
        return self._raw.readinto(view[:size])  # type: ignore[attr-defined]


class _GatedWriter:
    """The staged .log as ``stream_entries`` writes it, through the controls, its dirty bytes bounded."""

    def __init__(self, out: BinaryIO, controls: Controls) -> None:
        self._out = out
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
            raise StagingWriteError(exc.errno, exc.strerror, self._out.name) from exc  # type: ignore[attr-defined]
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
            raise StagingWriteError(exc.errno, exc.strerror, self._out.name) from exc  # type: ignore[attr-defined]
