"""A source whose converted form exceeds the segment size limit, converted into several segments cut at batch
boundaries, as Kafka's ``LocalLog.splitOverflowedSegment`` does (KAFKA-6264; also the cleaner's path).

Why: an uncompressed v0 message of a small key and value takes 26 to 40 bytes, its single-record v2 batch 68 to 80,
so a 1 GiB segment of tiny messages converts to 2 to 2.6 GiB, past the 2 GiB - 1 that Kafka's ``FileRecords`` opens.
Kafka writes such batches into as many segments as needed, each named after its first batch's base offset, each
under the size limit, and replaces the one source with all of them, copying the source's mtime onto each.

The cut rule (``SegmentCutter``): a batch goes into the current output while the output stays within the limit
(``ConvertOptions.segment_bytes_limit``, like a topic's ``segment.bytes``), else it opens the next output. It reads
only the converted batch sizes, which follow from the source's bytes and the options alone, so every replica of a
source cuts at the same batches; ``predict_split`` runs the same rule at plan time where every batch's size is
known before conversion. An offset gap at a cut is kept, and every offset of an output stays below the next
output's base offset (offsets strictly increase through the source). Each output gets its own ``.index`` and
``.timeindex`` by the same recovery rules, and every file the source's mtime. Memory stays bounded by the chunk.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from migrate.errors import SegmentRefusedError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.buffers import gather_be
from migrate.format.entries import walk_entries
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import CONVERTED_FILES, ConvertOptions, SegmentSplit, SplitCut
from migrate.model.run_state import ConversionStatus, SegmentResult, SegmentTask, SplitPart
from migrate.model.segment_files import SegmentFiles
from migrate.segment.convert import check_planned, finish_output, live_files, stats_of, stream_entries
from migrate.segment.identity import edges_digest_of
from migrate.segment.indexes import IndexBuilder
from migrate.segment.reader import open_unbuffered, read_chunks

_WRITE_BUFFER = 1 << 20


class BatchTooLargeError(ValueError):
    """A single batch is larger than the segment size limit: no cut can make it fit."""

    def __init__(self, index: int, size: int) -> None:
        super().__init__(f"batch {index} of {size} bytes")
        self.index = index
        self.size = size


@dataclass
class SegmentCutter:
    """The cut rule, fed batch sizes in file order, chunk after chunk."""

    limit: int
    filled: int = 0  # bytes in the current output

    def cuts(self, sizes: np.ndarray) -> list[int]:
        """The indexes into ``sizes`` of the batches that open a new output."""
        out: list[int] = []
        i, n = 0, len(sizes)
        while i < n:
            ends = self.filled + np.cumsum(sizes[i:], dtype=np.int64)
            fit = int(np.searchsorted(ends, self.limit, side="right"))
            if fit == n - i:
                self.filled = int(ends[-1])
                break
            if fit == 0 and self.filled == 0:
                raise BatchTooLargeError(i, int(sizes[i]))
            i += fit
            out.append(i)
            self.filled = 0
        return out


# --- plan time -------------------------------------------------------------------------------------------------


def _converted_sizes(u8: np.ndarray, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray) -> np.ndarray | None:
    """Each entry's converted size under Kafka's rules: an uncompressed legacy message becomes one single-record v2
    batch (its size from its key and value lengths), a v2 batch stays as it is. None where a compressed wrapper
    (recompressed) or a malformed message makes it unknowable before conversion."""
    out = sizes.astype(np.int64)
    is_legacy = magics < v2.MAGIC
    if not is_legacy.any():
        return out
    pos, size, magic = positions[is_legacy], sizes[is_legacy], magics[is_legacy].astype(np.int64)
    if (u8[pos + legacy.ATTRIBUTES_OFFSET] & legacy.CODEC_MASK).any():
        return None
    key_at = np.where(magic == 0, legacy.KEY_LENGTH_OFFSET[0], legacy.KEY_LENGTH_OFFSET[1])
    key_len = gather_be(u8, pos + key_at, 4)
    overhead = legacy.LOG_OVERHEAD + np.where(magic == 0, legacy.RECORD_OVERHEAD[0], legacy.RECORD_OVERHEAD[1])
    value_bytes = size - overhead - np.maximum(key_len, 0)
    if (key_len < -1).any() or (value_bytes < 0).any():
        return None
    out[is_legacy] = v2.single_record_batch_sizes(key_len, value_bytes)
    return out


def predict_split(
    path: str | Path, options: ConvertOptions, estimated_output_bytes: int, compacted: bool = False
) -> SegmentSplit | None:
    """Where the conversion of ``path`` will cut it, or None if it fits in one segment. Reads the file once, only for
    a source whose estimate comes near the limit; where a converted size is unknowable before conversion (compressed
    wrappers; ``compacted``: which records survive is decided at execute), the estimate decides and the cuts are
    left to the conversion."""
    limit = options.segment_bytes_limit
    if not options.one_batch_per_message or estimated_output_bytes <= limit // 2:
        return None
    if compacted:
        return _estimated(estimated_output_bytes, limit)
    cutter = SegmentCutter(limit)
    cuts: list[SplitCut] = []
    total = 0
    with open(path, "rb") as src:
        for chunk in read_chunks(src, str(path), options.chunk_bytes, decode=lambda buf, final: walk_entries(buf)):
            walk = chunk.entries
            if not len(walk.positions):
                continue
            u8 = np.frombuffer(chunk.buffer, np.uint8)
            out = _converted_sizes(u8, walk.positions, walk.sizes, walk.magics)
            if out is None:
                return _estimated(estimated_output_bytes, limit)
            total += int(out.sum())
            try:
                opening = cutter.cuts(out)
            except BatchTooLargeError:
                return _estimated(estimated_output_bytes, limit)  # the conversion refuses it, with its position
            if opening:
                at = walk.positions[opening]
                offsets = gather_be(u8, at, 8)  # an entry's first 8 bytes: its first batch's base offset
                cuts += [SplitCut(chunk.position + int(p), int(o)) for p, o in zip(at, offsets)]
    if total <= limit:
        return None
    return SegmentSplit(len(cuts) + 1, tuple(cuts))


def _estimated(estimated_output_bytes: int, limit: int) -> SegmentSplit | None:
    if estimated_output_bytes <= limit * 7 // 8:
        return None
    return SegmentSplit(max(2, -(-estimated_output_bytes // limit)), None)


# --- conversion ------------------------------------------------------------------------------------------------


@dataclass
class _Output:
    base_offset: int
    log: str
    index: IndexBuilder
    bytes: int = 0
    batches: int = 0
    last_offset: int = -1

    def paths(self) -> SegmentFiles[str]:
        """Where this output's files are written: beside its ``.log``."""
        stem = self.log[: -len(FileKind.LOG)]
        return SegmentFiles(self.log, stem + FileKind.INDEX, stem + FileKind.TIME_INDEX)


@dataclass
class SplitWriter:
    """Where the converted batches of a split source go: the current output until the cut rule opens the next."""

    staging: str
    options: ConvertOptions
    source: str
    outputs: list[_Output] = field(default_factory=list)
    cuts: list[SplitCut] = field(default_factory=list)
    out: BinaryIO | None = None

    def __post_init__(self) -> None:
        self.cutter = SegmentCutter(self.options.segment_bytes_limit)

    def open(self, base_offset: int) -> None:
        path = os.path.join(self.staging, segment_name(base_offset, FileKind.LOG))
        self.out = open(path, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115 - closed by close() or the next open
        self.outputs.append(_Output(base_offset, path, IndexBuilder(base_offset, self.options.index_interval_bytes)))

    def close(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None

    def write(
        self,
        data: bytes | memoryview,
        sizes: np.ndarray,
        last_offsets: np.ndarray,
        max_timestamps: np.ndarray,
        source_positions: np.ndarray,
    ) -> None:
        """An entry's converted batches (``data``: their bytes back to back); ``source_positions``: where the
        entry (or, for a run of messages, each message) whose batch this is starts in the source."""
        try:
            opening = self.cutter.cuts(sizes)
        except BatchTooLargeError as exc:
            raise SegmentRefusedError(
                f"a converted batch of {exc.size} bytes is larger than the segment size limit "
                f"{self.options.segment_bytes_limit}: no segment can hold it",
                position=int(source_positions[min(exc.index, len(source_positions) - 1)]),
                path=self.source,
                hint="Nothing was changed. Re-plan with a --max-segment-bytes at least the topic's segment.bytes.",
            ) from None
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        previous = 0
        for end in [*opening, len(sizes)]:
            if end > previous:
                self._append(data, starts, previous, end, sizes, last_offsets, max_timestamps)
            if end < len(sizes):
                at = int(starts[end])
                base = int.from_bytes(bytes(data[at : at + 8]), "big", signed=True)
                self.close()
                self.open(base)
                self.cuts.append(SplitCut(int(source_positions[min(end, len(source_positions) - 1)]), base))
            previous = end

    def _append(
        self,
        data: bytes | memoryview,
        starts: np.ndarray,
        lo: int,
        hi: int,
        sizes: np.ndarray,
        last_offsets: np.ndarray,
        max_timestamps: np.ndarray,
    ) -> None:
        assert self.out is not None
        current = self.outputs[-1]
        self.out.write(data[int(starts[lo]) : int(starts[hi])])
        current.index.add_batches(sizes[lo:hi], last_offsets[lo:hi], max_timestamps[lo:hi])
        current.bytes += int(starts[hi] - starts[lo])
        current.batches += hi - lo
        current.last_offset = int(last_offsets[hi - 1])

    def paths(self) -> list[str]:
        return [path for o in self.outputs for path in o.paths().values()]


def convert_split(task: SegmentTask) -> SegmentResult:
    """Convert ``task.source`` into one or more segments in ``task.staging_dir`` by the cut rule; the source is only
    read. The first output has the source's name (``result.outputs``), the others are ``result.parts``. Raises as
    ``convert_segment`` does, and SegmentRefusedError where the cuts differ from the plan's; nothing is left in the
    staging dir on error. Not fsynced here: the task makes its outputs durable at once."""
    started = time.perf_counter()
    src, st = open_unbuffered(task.source)
    writer = SplitWriter(task.staging_dir, task.options, task.source)
    try:
        check_planned(task, st)
        live = live_files(os.path.dirname(task.source), task.base_offset)
        os.makedirs(task.staging_dir, exist_ok=True)
        try:
            writer.open(task.base_offset)
            run = stream_entries(task, src, None, st, splitter=writer)
            writer.close()
            result = run.result
            result.source_ctime_ns = st.st_ctime_ns
            result.source_edges = edges_digest_of(src.fileno(), st.st_size)
            result.live_before = stats_of(live)
            if result.status == ConversionStatus.UNCHANGED:
                _remove(writer.paths())
                result.output_bytes = 0
            else:
                _check_planned_cuts(task, writer)
                _finish_outputs(writer, result, live, st)
        except BaseException:
            writer.close()
            _remove(writer.paths())
            raise
    finally:
        src.close()
    result.seconds = time.perf_counter() - started
    return result


def _check_planned_cuts(task: SegmentTask, writer: SplitWriter) -> None:
    planned = task.split.cuts if task.split is not None else None
    if planned is None:
        return
    got = [c.base_offset for c in writer.cuts]
    want = [c.base_offset for c in planned]
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        raise SegmentRefusedError(
            f"the conversion cut the source into {len(got) + 1} segments, the plan into {len(want) + 1}; the first "
            f"difference is cut {first} (conversion: offset {got[first] if first < len(got) else '-'}, plan: offset "
            f"{want[first] if first < len(want) else '-'})",
            path=task.source,
            hint="Nothing was changed. This is a bug in kafka-log-migrate: keep the segment and report it; re-plan "
            "to retry.",
        )


def _finish_outputs(
    writer: SplitWriter, result: SegmentResult, live: SegmentFiles[os.stat_result], st: os.stat_result
) -> None:
    """Write each output's indexes; give every file the owner and mode of the live file of its kind and the
    source's mtime; record them in ``result``."""
    parts = []
    total = 0
    for n, output in enumerate(writer.outputs):
        paths = output.paths()
        for kind, data in zip((FileKind.INDEX, FileKind.TIME_INDEX), output.index.finish()):
            with open(paths.require(kind), "wb") as f:
                f.write(data)
        finished = {kind: finish_output(paths.require(kind), live.get(kind) or st, st) for kind in CONVERTED_FILES}
        outputs = paths
        stats = SegmentFiles.of((kind, stat) for kind, (stat, _) in finished.items())
        digests = SegmentFiles.of((kind, digest) for kind, (_, digest) in finished.items())
        total += stats.require(FileKind.LOG).size
        if n == 0:
            result.outputs, result.output_stats, result.output_digests = outputs, stats, digests
        else:
            parts.append(SplitPart(output.base_offset, outputs, stats, output.last_offset, output.batches, digests))
    result.parts = tuple(parts) or None
    result.output_bytes = total


def _remove(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
