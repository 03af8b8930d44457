"""Convert one legacy segment into a Kafka-ready segment: ``.log``, ``.index`` and ``.timeindex``.

The rules for v2 are those of Kafka 4's own log cleaner (KAFKA-13093), so every replica of a partition converts to
the same bytes (replication is aligned by batches):

- an uncompressed legacy message becomes a single-record v2 batch; a compressed wrapper becomes one v2 batch with
  the same codec; v2 batches are copied byte for byte; offsets never change; producer fields are -1;
- v1 records keep their timestamps and timestamp type (a LogAppendTime wrapper's time becomes the batch's);
- v0 records have no timestamp: policy ``mtime`` gives them LogAppendTime at the segment's mtime (the KIP-32/33
  fallback that keeps time retention and timestamp search working), ``none`` keeps Kafka's CreateTime -1.

Differences from the cleaner, each an option: the partition leader epoch (the cleaner writes -1, which Kafka's
follower append path rejects, see docs/leader-epoch.md), recompression, packing several uncompressed messages per
batch (replicas then differ in batch boundaries), and the KIP-87 tombstone flag.

The source is streamed in chunks: peak memory is about one chunk plus the largest batch, whatever the segment size.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from migrate.errors import SegmentRefusedError, SourceChangedError, TruncatedTailError, UnencodableRecordError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest, timestamps_only
from migrate.format.entries import Entry, records_of
from migrate.format.records import NO_TIMESTAMP, Compression, Record, RecordColumns, TimestampType
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import ConvertOptions, TimestampPolicy
from migrate.model.run_state import ConversionStatus, FileStat, SegmentResult, SegmentTask
from migrate.model.segment_files import SegmentFiles
from migrate.segment.compacted import load_survivors, retained
from migrate.segment.identity import edges_digest_of, edges_digest_of_bytes
from migrate.segment.indexes import IndexBuilder
from migrate.segment.profile import check_offsets
from migrate.segment.reader import Chunk, SegmentFile, decode_whole, read_chunks, read_whole
from migrate.segment.small import convert_whole


@dataclass
class _Written:
    """What one source entry became: output bytes and, per output batch, what the indexes need."""

    data: bytes | None  # None: copy the entry's own bytes unchanged
    sizes: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    output_records: RecordColumns
    rewritten: bool


@dataclass
class _Converter:
    """What each kind of entry becomes (an ``EntryVisitor``), and what the conversion saw on the way."""

    options: ConvertOptions
    mtime_ms: int
    source: str
    changed: bool = False
    magics: dict[str, int] = field(default_factory=dict)
    mtime_timestamped: int = 0  # v0 records given the segment's mtime

    def convert(self, item: Entry, file_position: int) -> _Written:
        try:
            return item.accept(self)
        except UnencodableRecordError as exc:
            index, records = exc.record_index, item.records
            # a plain message of a run: its own position, not its run's
            position = item.first_position if index is None else item.record_position(index)
            raise SegmentRefusedError(
                f"cannot convert entry: {exc.reason}",
                position=file_position + position,
                offset=int(records.offsets[index]) if index is not None and records is not None else None,
                path=self.source,
                hint="Kafka 4's cleaner would refuse this record too; leave this partition out of the plan "
                "(--topics) or repair the record from a replica.",
            ) from exc

    # --- uncompressed legacy messages ---

    def _policy_timestamps(self, timestamps: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Output timestamps and types: v0 records (type -1) follow the policy, v1 records keep theirs."""
        v0 = types == TimestampType.NO_TIMESTAMP_TYPE
        if self.options.timestamps == TimestampPolicy.MTIME:
            self.mtime_timestamped += int(v0.sum())
            return np.where(v0, self.mtime_ms, timestamps), np.where(v0, TimestampType.LOG_APPEND_TIME, types)
        return timestamps, np.where(v0, TimestampType.CREATE_TIME, types)

    def _v0_timestamps(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``_count_magics`` and ``_policy_timestamps`` of a run of v0 messages only (every type -1), the usual
        legacy run: the same counts and columns without the per-record selections."""
        n = len(timestamps)
        self.magics["0"] = self.magics.get("0", 0) + n
        if self.options.timestamps == TimestampPolicy.MTIME:
            self.mtime_timestamped += n
            return np.full(n, self.mtime_ms, np.int64), np.full(n, int(TimestampType.LOG_APPEND_TIME), np.int64)
        return timestamps, np.full(n, int(TimestampType.CREATE_TIME), np.int64)

    def legacy_run(self, run: legacy.LegacyRun) -> _Written:
        cols = run.records
        if run.magics.any():
            self._count_magics(run.magics)
            timestamps, types = self._policy_timestamps(cols.timestamps, run.timestamp_types())
        else:
            timestamps, types = self._v0_timestamps(cols.timestamps)
        out_cols = timestamps_only(cols, timestamps)
        opts = self.options
        if opts.target_magic == 1:
            return self._run_to_v1(run, out_cols, types)
        self.changed = True
        if opts.one_batch_per_message:
            data, sizes = v2.encode_single_record_batches(
                out_cols,
                types,
                partition_leader_epoch=opts.partition_leader_epoch,
                tombstone_flag=opts.tombstone_flag,
            )
            return _Written(data, sizes, cols.offsets, timestamps, out_cols, True)
        return self._run_grouped(out_cols, types)

    def _run_grouped(self, cols: RecordColumns, types: np.ndarray) -> _Written:
        """Batches of several records (--pack-bytes) or recompressed single records (--compression)."""
        opts = self.options
        codec = Compression.parse(opts.compression or "none")
        limit = opts.pack_bytes or 0
        n = len(cols)
        # a record's size in a batch is at most its key and value plus 21 bytes of record overhead
        weights = np.maximum(cols.key_len, 0) + np.maximum(cols.value_len, 0) + 21
        parts: list[bytes] = []
        sizes, lasts, maxes = [], [], []
        start = 0
        while start < n:
            end = start + 1
            total = v2.RECORD_BATCH_OVERHEAD + int(weights[start])
            while end < n and limit:
                same_type = types[end] == types[start]
                # under LogAppendTime every record reads the batch time, so only equal times may share a batch
                same_time = (
                    types[start] != TimestampType.LOG_APPEND_TIME or cols.timestamps[end] == cols.timestamps[start]
                )
                if not (same_type and same_time) or total + int(weights[end]) > limit:
                    break
                total += int(weights[end])
                end += 1
            group = cols.slice(start, end)
            tstype = TimestampType(int(types[start]))
            data = v2.encode_batch(
                group,
                partition_leader_epoch=opts.partition_leader_epoch,
                compression=codec,
                timestamp_type=tstype,
                log_append_time=int(group.timestamps[0]) if tstype == TimestampType.LOG_APPEND_TIME else None,
                record_attributes=v2.new_record_attributes(group, opts.tombstone_flag),
            )
            parts.append(data)
            sizes.append(len(data))
            lasts.append(int(group.offsets[-1]))
            maxes.append(_batch_max_timestamp(group.timestamps))
            start = end
        return _Written(b"".join(parts), np.array(sizes), np.array(lasts), np.array(maxes), cols, True)

    def _run_to_v1(self, run: legacy.LegacyRun, out_cols: RecordColumns, types: np.ndarray) -> _Written:
        parts: list[bytes] = []
        buf = memoryview(run.records.buffer)
        for j in range(len(run)):
            if run.magics[j] == 1:
                p, s = int(run.positions[j]), int(run.sizes[j])
                parts.append(bytes(buf[p : p + s]))
                continue
            self.changed = True
            attributes = legacy.TIMESTAMP_TYPE_BIT if types[j] == TimestampType.LOG_APPEND_TIME else 0
            parts.append(
                legacy.encode_message(
                    int(out_cols.offsets[j]),
                    1,
                    attributes,
                    int(out_cols.timestamps[j]),
                    out_cols.key(j),
                    out_cols.value(j),
                )
            )
        sizes = np.array([len(x) for x in parts], np.int64)
        return _Written(b"".join(parts), sizes, out_cols.offsets, out_cols.timestamps, out_cols, self.changed)

    # --- compressed legacy wrappers ---

    def legacy_wrapper(self, wrapper: legacy.LegacyWrapper) -> _Written:
        cols = wrapper.records
        self.magics[str(wrapper.magic)] = self.magics.get(str(wrapper.magic), 0) + 1
        opts = self.options
        codec = Compression.parse(opts.compression) if opts.compression else wrapper.compression
        if wrapper.magic == 0:
            if opts.timestamps == TimestampPolicy.MTIME:
                self.mtime_timestamped += len(cols)
                tstype, append_time = TimestampType.LOG_APPEND_TIME, self.mtime_ms
                timestamps = np.full(len(cols), self.mtime_ms, np.int64)
            else:
                tstype, append_time, timestamps = TimestampType.CREATE_TIME, None, cols.timestamps
        elif wrapper.timestamp_type == TimestampType.LOG_APPEND_TIME:
            tstype, append_time = TimestampType.LOG_APPEND_TIME, wrapper.timestamp
            timestamps = np.full(len(cols), wrapper.timestamp, np.int64)
        else:
            tstype, append_time, timestamps = TimestampType.CREATE_TIME, None, cols.timestamps
        out_cols = timestamps_only(cols, timestamps)
        max_ts = append_time if append_time is not None else _batch_max_timestamp(timestamps)
        if opts.target_magic == 1:
            if wrapper.magic == 1 and codec == wrapper.compression:
                return _Written(
                    None,
                    np.array([wrapper.size]),
                    np.array([wrapper.offset]),
                    np.array([max_ts]),
                    out_cols,
                    False,
                )
            records = [Record(o, t, k, v) for o, t, k, v, *_ in out_cols.rows()]
            data = legacy.encode_wrapper(records, 1, codec, tstype, append_time)
        else:
            data = v2.encode_batch(
                out_cols,
                partition_leader_epoch=opts.partition_leader_epoch,
                compression=codec,
                timestamp_type=tstype,
                log_append_time=append_time,
                record_attributes=v2.new_record_attributes(out_cols, opts.tombstone_flag),
            )
        self.changed = True
        return _Written(
            data, np.array([len(data)]), np.array([int(cols.offsets[-1])]), np.array([max_ts]), out_cols, True
        )

    # --- compaction (pass two) ---

    def dropped(self, item: Entry) -> None:
        """An entry none of whose records survives compaction: it disappears, leaving an offset gap."""
        self.changed = True
        self._count_magics(item.batch_columns().magics)

    # --- v2 batches ---

    def v2_batch(self, batch: v2.V2Batch) -> _Written:
        """Copied byte for byte; a batch that lost records to compaction is rebuilt with the survivors."""
        self.magics["2"] = self.magics.get("2", 0) + 1
        if batch.kept is not None:
            self.changed = True
            data, cols, max_ts = batch.rebuild()
            return _Written(data, np.array([len(data)]), np.array([batch.last_offset]), np.array([max_ts]), cols, True)
        assert batch.records is not None
        return _Written(
            None,
            np.array([batch.size]),
            np.array([batch.last_offset]),
            np.array([batch.max_timestamp]),
            batch.records,
            False,
        )

    def _count_magics(self, magics: np.ndarray) -> None:
        counts = np.bincount(magics, minlength=3).tolist()  # magic bytes above 2 never get this far
        for m, c in enumerate(counts):
            if c:
                self.magics[str(m)] = self.magics.get(str(m), 0) + c


def _batch_max_timestamp(timestamps: np.ndarray) -> int:
    return max(int(timestamps.max()), NO_TIMESTAMP) if len(timestamps) else NO_TIMESTAMP


def convert_segment(task: SegmentTask) -> SegmentResult:
    """Convert ``task.source`` into ``task.staging_dir``; the source is only read.

    Raises CorruptRecordError (file and byte position) for bad input, TruncatedTailError for a partial last entry
    that the plan did not list to drop, SegmentRefusedError when the output would break a Kafka limit,
    SourceChangedError when the file is not the one planned, OSError when staging cannot be written. Nothing is left
    in the staging dir on error.

    The outputs are not fsynced here: the task that converts a group of segments makes them durable at once (one
    syncfs per task instead of four fsyncs per segment) before it records them as converted. Each output takes the
    owner, group and mode of the live file it will replace (a broker running as its own user must open it
    read-write), and the source's mtime (retention of untimestamped data depends on it).
    """
    started = time.perf_counter()
    # a descriptor, not a file object: a tiny segment is read whole with pread, and a file object costs a stat and
    # its own layers per segment; the general path wraps the descriptor when it needs one
    source = os.open(task.source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(source)
        check_planned(task, st)
        live = live_files(os.path.dirname(task.source), task.base_offset, log=st)
        staging = task.staging_dir
        # staged files are written under their final names: the staging dir is private, and a staged file is trusted
        # only once its identity is recorded with the verified outcome, so a crash mid-write leaves nothing trusted
        stem = os.path.join(staging, segment_name(task.base_offset))
        log_path, index_path, time_index_path = stem + FileKind.LOG, stem + FileKind.INDEX, stem + FileKind.TIME_INDEX
        index = IndexBuilder(task.base_offset, task.options.index_interval_bytes)
        index_files: tuple[bytes, bytes] | None = None
        try:
            if st.st_size <= SMALL_SEGMENT_BYTES:
                result, index_files = _convert_small(task, source, st, log_path, index, live)
            else:
                src = open(source, "rb", buffering=0, closefd=False)  # noqa: SIM115 - the descriptor is closed below
                with open(_create(log_path), "wb", buffering=_WRITE_BUFFER) as out:
                    run = stream_entries(task, src, out, st, index=index)
                    result = run.result
                    _record_source(result, run.whole, source, st, live)
                    if result.status == ConversionStatus.UNCHANGED:
                        os.unlink(log_path)
                        result.output_bytes = 0
                    else:
                        out.flush()
                        finish_open_output(out.fileno(), log_path, FileKind.LOG, result, live, st)
            if result.status != ConversionStatus.UNCHANGED:
                indexes = ((FileKind.INDEX, index_path), (FileKind.TIME_INDEX, time_index_path))
                for (kind, path), data in zip(indexes, index_files or index.finish()):
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        if data:
                            _write_all(fd, data)
                        finish_open_output(fd, path, kind, result, live, st)
                    finally:
                        os.close(fd)
        except BaseException:
            for path in (log_path, index_path, time_index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            raise
    finally:
        os.close(source)
    result.seconds = time.perf_counter() - started
    return result


# a source this small is converted in memory: read whole with one read when it is under the chunk size, its output
# written with one write, and the digest of its edges taken from the bytes read rather than read again. The bound
# keeps the output buffer small (a converted segment is at most a few times its source).
SMALL_SEGMENT_BYTES = 1 << 20


class _Parts(list):
    """An output kept in memory, for ``stream_entries`` (it only calls ``write``)."""

    def write(self, data: bytes | memoryview) -> None:
        self.append(bytes(data))


def _convert_small(
    task: SegmentTask,
    fd: int,
    st: os.stat_result,
    path: str,
    index: IndexBuilder,
    live: SegmentFiles[os.stat_result],
) -> tuple[SegmentResult, tuple[bytes, bytes] | None]:
    """``convert_segment``'s ``.log`` for a small source: converted in memory, written with one write (none when it is
    unchanged); the index files too when it was converted whole (``migrate.segment.small``), else None: ``index``
    then holds them."""
    # below the chunk size the reader would read the file in one chunk: read it so directly, without its buffers
    data = read_whole(fd, st.st_size) if st.st_size < task.options.chunk_bytes else None
    whole = convert_whole(task, data, st) if data is not None else None
    if whole is not None:
        result, output, index_files = whole.result, whole.log, whole.index_files
        _record_source(result, data, fd, st, live)
    else:
        parts = _Parts()
        src = open(fd, "rb", buffering=0, closefd=False)  # noqa: SIM115 - the caller closes the descriptor
        run = stream_entries(task, src, parts, st, index=index, data=data)
        result, index_files = run.result, None
        _record_source(result, run.whole, fd, st, live)
        if result.status == ConversionStatus.UNCHANGED:
            result.output_bytes = 0
            return result, None
        output = parts[0] if len(parts) == 1 else b"".join(parts)
    out = _create(path)
    try:
        _write_all(out, output)
        finish_open_output(out, path, FileKind.LOG, result, live, st)
    finally:
        os.close(out)
    return result, index_files


def _create(path: str) -> int:
    """``path`` created (or truncated) for writing, with the mode ``open(path, "wb")`` creates with, so a staged file's
    bits do not depend on the path taken; the staging dir made first if it is not there. The convert stage made it
    with the partition's facts, so it is asked for on ENOENT, not by a stat per segment."""
    flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC  # read too: its edges are digested once written
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, flags, 0o666)


def _record_source(
    result: SegmentResult,
    whole: memoryview | bytes | None,
    fd: int,
    st: os.stat_result,
    live: SegmentFiles[os.stat_result],
) -> None:
    """What a same-size rewrite before the swap cannot keep (migrate.segment.identity), and the live files' identity.
    ``whole``: the file as converted, when one read held all of it (``StreamRun.whole``): its edges are digested from
    those bytes (exactly what a second read would return for an unchanged file, and what was converted for one
    changed since), else read."""
    result.source_ctime_ns = st.st_ctime_ns
    if whole is not None:
        result.source_edges = edges_digest_of_bytes(whole, st.st_size)
    else:
        result.source_edges = edges_digest_of(fd, st.st_size)
    result.live_before = stats_of(live)


def stats_of(files: SegmentFiles[os.stat_result]) -> SegmentFiles[FileStat]:
    """The identity of each file of ``files``, from its stat."""
    return files.map(_file_stat)


def _file_stat(_: FileKind, st: os.stat_result) -> FileStat:
    return FileStat.of(st)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    """All of ``data`` at the file position (a write may write less than it was given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_WRITE_BUFFER = 1 << 20  # coalesces the small writes of copied or compressed batches; a run's batches go straight


def live_files(live_dir: str, base_offset: int, log: os.stat_result | None = None) -> SegmentFiles[os.stat_result]:
    """The live files a conversion's outputs will replace, as they are now. ``log``: the stat of the live ``.log``
    as the caller opened it to convert (the file converted, where a second stat could find another)."""
    stem = os.path.join(live_dir, segment_name(base_offset))
    return SegmentFiles(
        log if log is not None else _stat_or_none(stem + FileKind.LOG),
        _stat_or_none(stem + FileKind.INDEX),
        _stat_or_none(stem + FileKind.TIME_INDEX),
    )


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def live_stats(live_dir: str | Path, base_offset: int) -> SegmentFiles[FileStat]:
    """The identity of the live files a conversion's outputs will replace, as they are now."""
    return stats_of(live_files(str(live_dir), base_offset))


def finish_open_output(
    fd: int,
    path: str,
    kind: FileKind,
    result: SegmentResult,
    live: SegmentFiles[os.stat_result],
    source: os.stat_result,
) -> None:
    """Give a staged output (open as ``fd``) the owner, group and mode of the live file it replaces (else of the
    source ``.log``) and the source's mtime; record it in ``result``, with the digest of its edges (what tells,
    after the swap, whether the file is still these bytes)."""
    ref = live.get(kind)
    stat = _own(fd, ref if ref is not None else source, source)
    result.outputs = result.outputs.with_file(kind, path)
    result.output_stats = result.output_stats.with_file(kind, stat)
    result.output_digests = result.output_digests.with_file(kind, edges_digest_of(fd, stat.size))
    if kind is FileKind.LOG:
        result.output_bytes = stat.size


def _own(fd: int, ref: os.stat_result, source: os.stat_result) -> FileStat:
    """Give the file open as ``fd`` the owner, group and mode of ``ref`` and the source's mtime; its identity."""
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (ref.st_uid, ref.st_gid):
        os.fchown(fd, ref.st_uid, ref.st_gid)
    if mine.st_mode & 0o7777 != ref.st_mode & 0o7777:
        os.fchmod(fd, ref.st_mode & 0o7777)
    os.utime(fd, ns=(source.st_atime_ns, source.st_mtime_ns))
    return FileStat(mine.st_ino, mine.st_size, source.st_mtime_ns)


def finish_output(path: str, ref: os.stat_result, source: os.stat_result) -> tuple[FileStat, str]:
    """``path`` given the owner, group and mode of ``ref`` (the live file of its kind) and the source's mtime; its
    identity and the digest of its edges."""
    fd = os.open(path, os.O_RDONLY)
    try:
        stat = _own(fd, ref, source)
        return stat, edges_digest_of(fd, stat.size)
    finally:
        os.close(fd)


def finish_outputs(
    result: SegmentResult,
    finals: SegmentFiles[Path],
    live_dir: Path,
    base_offset: int,
    source: Path,
    st: os.stat_result,
) -> None:
    """Give each staged output the owner and mode of the live file it replaces and the source's mtime; record it."""
    live = live_files(str(live_dir), base_offset)
    for kind, path in finals:
        fd = os.open(path, os.O_RDONLY)
        try:
            finish_open_output(fd, str(path), kind, result, live, st)
        finally:
            os.close(fd)


@dataclass
class StreamRun:
    """What streaming a segment (or a range of it) through the converter produced."""

    result: SegmentResult
    stop: int  # file position after the last entry converted (or dropped)
    changed: bool  # some entry was rewritten: the output differs from the source
    # the whole source as read, when one read held all of it (from position 0, ``st_size`` bytes): its edges digest
    whole: memoryview | bytes | None = None


def stream_entries(
    task: SegmentTask,
    src: SegmentFile,
    out: SegmentOutput | None,
    st: os.stat_result,
    *,
    index: IndexBuilder | None = None,
    start: int = 0,
    limit: int | None = None,
    splitter: SplitSink | None = None,
    data: bytes | None = None,
) -> StreamRun:
    """Convert the entries of ``src`` (at file position ``start``) that start before ``limit`` (all, when None),
    writing them to ``out``; ``index`` gets every written batch. The result holds everything but the outputs.
    ``splitter`` (a split source, ``migrate.segment.split``) takes every batch instead of ``out`` and ``index``.
    ``data``: the whole file, read already (``read_whole``), to convert instead of reading ``src``."""
    opts = task.options
    result = SegmentResult(source=task.source, base_offset=task.base_offset, status=ConversionStatus.CONVERTED)
    result.source_bytes = st.st_size
    result.mtime_ns = st.st_mtime_ns
    result.digest = opts.digest
    converter = _Converter(opts, st.st_mtime_ns // 1_000_000, task.source)
    # the source's content digest (Kafka's own summary's, under SHA-256) and the digest of what the output must read
    # back as (offsets, keys, values, the policy's timestamps): the verifier recomputes that one from disk
    source_digest = LogDigest(timed=False, algorithm=opts.digest)
    output_digest = LogDigest(plain=False, algorithm=opts.digest)
    stop, whole = _stream(
        task,
        _Reading(src, st, start, limit, data),
        _Sinks(out, index, splitter),
        _Tally(converter, source_digest, output_digest, result),
        _survivors(task),
    )
    if result.entries_in == 0:
        result.status = ConversionStatus.EMPTY
    elif not converter.changed:
        result.status = ConversionStatus.UNCHANGED
    result.magics_in = converter.magics
    result.mtime_timestamped_records = converter.mtime_timestamped
    result.records = source_digest.records
    result.source_digest = source_digest.hexdigests()[0]
    result.output_digest_ts = output_digest.hexdigests()[1]
    return StreamRun(result, stop, converter.changed, whole)


def _survivors(task: SegmentTask) -> np.ndarray | None:
    """A compacted partition's survivors (pass one's output), or None when the partition is not compacted."""
    if task.survivors is None:
        return None
    try:
        return load_survivors(task.survivors)
    except (OSError, ValueError) as exc:
        raise SegmentRefusedError(
            f"the survivors of this compacted partition cannot be read from {task.survivors} ({exc})",
            path=task.source,
            hint="Nothing was changed. The compact stage computes them before conversion: run `execute` again.",
        ) from exc


def check_planned(task: SegmentTask, st: os.stat_result) -> None:
    """Refuse a source that is not the file the plan describes (size, mtime, inode)."""
    source = task.source
    planned = (task.expected_size, task.expected_mtime_ns, task.expected_inode)
    actual = (st.st_size, st.st_mtime_ns, st.st_ino)
    if any(want is not None and want != got for want, got in zip(planned, actual)):
        raise SourceChangedError(
            f"{source} is not the file that was planned: size {st.st_size} (planned {task.expected_size}), mtime_ns "
            f"{st.st_mtime_ns} (planned {task.expected_mtime_ns}), inode {st.st_ino} (planned {task.expected_inode})",
            path=source,
        )


@dataclass(frozen=True)
class _Reading:
    """What a stream reads: the source open at ``src`` (``st`` its stat), from file position ``start`` to the entries
    starting before ``limit`` (all, when None); ``data``, the whole file read already, instead."""

    src: SegmentFile
    st: os.stat_result
    start: int
    limit: int | None
    data: bytes | None


@dataclass(frozen=True)
class _Sinks:
    """Where a stream's batches go: ``out`` and its ``index``, or a split source's ``splitter`` instead."""

    out: SegmentOutput | None
    index: IndexBuilder | None
    splitter: SplitSink | None


@dataclass(frozen=True)
class _Tally:
    """What a stream counts as it goes: the converter's counts, both content digests, the result's fields."""

    converter: _Converter
    source_digest: LogDigest
    output_digest: LogDigest
    result: SegmentResult


def _stream(
    task: SegmentTask, reading: _Reading, sinks: _Sinks, tally: _Tally, survivors: np.ndarray | None
) -> tuple[int, memoryview | bytes | None]:
    """``survivors``: compaction's pass two keeps only the records at these offsets (sorted). Returns the file
    position after the last entry read, and the whole file when one chunk read all of it (``StreamRun.whole``)."""
    src, st, start, limit, data = reading.src, reading.st, reading.start, reading.limit, reading.data
    out, index, splitter = sinks.out, sinks.index, sinks.splitter
    converter, source_digest, output_digest, result = (
        tally.converter,
        tally.source_digest,
        tally.output_digest,
        tally.result,
    )
    opts = task.options
    path = task.source
    base = task.base_offset
    written = 0
    stop = start
    if data is not None and start == 0 and limit is None:
        chunks: Iterable[Chunk] = (decode_whole(data, path),)
    else:
        chunks = read_chunks(
            src, path, opts.chunk_bytes, reuse=True, start=start, limit=limit, size_hint=st.st_size - start
        )
    count = 0
    buf: bytes | memoryview = b""
    for chunk in chunks:
        count += 1
        buf, buf_position, entries = chunk.buffer, chunk.position, chunk.entries
        for item in entries.items:
            kept = item if survivors is None else retained(item, survivors)
            if kept is None:
                _drop(item, converter, result, base, buf_position, path)
                continue
            written_item = converter.convert(kept, buf_position)
            offsets = item.records.offsets
            if len(offsets):
                # within an entry, and from entry to entry in a chunk, the reader saw offsets increase: the span is
                # what is left to check (against the previous chunk and the segment's base)
                check_offsets(
                    offsets[:: max(len(offsets) - 1, 1)],
                    result.last_offset,
                    base,
                    buf_position + item.first_position,
                    path,
                )
                if result.first_offset is None:
                    result.first_offset = int(offsets[0])
                result.last_offset = int(written_item.last_offsets[-1])
            entry_bytes: bytes | memoryview
            if written_item.data is None:
                entry_bytes = buf[item.position : item.position + item.size]
            else:
                _check_batch_sizes(kept, written_item, opts, buf_position, path)
                entry_bytes = written_item.data
            written += len(entry_bytes)
            if splitter is not None:
                splitter.write(
                    entry_bytes, *_batch_columns(written_item), _source_positions(kept, written_item, buf_position)
                )
            elif written > opts.segment_bytes_limit:
                raise SegmentRefusedError(
                    f"the converted segment would exceed {opts.segment_bytes_limit} bytes, the "
                    f"{'largest .log Kafka opens' if opts.max_segment_bytes is None else '--max-segment-bytes'}",
                    position=buf_position + item.first_position,
                    path=path,
                    hint="Under Kafka's rules `plan` cuts a source whose conversion passes the limit into several "
                    "segments: re-plan. With --compression or --pack-bytes it cannot; convert without them, or lower "
                    "segment.bytes and let Kafka roll smaller segments first.",
                )
            else:
                assert out is not None, "stream_entries writes to out when it has no splitter"
                out.write(entry_bytes)
            if index is not None and splitter is None:
                index.add_batches(written_item.sizes, written_item.last_offsets, written_item.max_timestamps)
            kept_records = records_of(kept)
            source_digest.update(kept_records)  # what the output must hold: with compaction, the survivors only
            output_digest.update(written_item.output_records)
            result.records_dropped += len(offsets) - len(kept_records)
            result.entries_in += item.entry_count
            result.batches_out += len(written_item.sizes)
            result.max_timestamp = max(result.max_timestamp, int(written_item.max_timestamps.max()))
        stop = chunk.end
        if entries.tail is not None:
            tail_position = buf_position + entries.tail.position
            drop = task.tail_drop
            if drop is None or (drop.position, drop.bytes) != (tail_position, entries.tail.size):
                raise TruncatedTailError(
                    f"{entries.tail.reason}: {entries.tail.size} bytes after the last complete entry, which the "
                    "plan does not list to drop",
                    position=tail_position,
                    path=path,
                )
            result.truncated_tail_bytes = entries.tail.size
    result.output_bytes = written
    # one chunk from position 0 of exactly the file's size: the reader saw the end of the file in that read
    whole = buf if count == 1 and start == 0 and limit is None and len(buf) == st.st_size else None
    return stop, whole


class SegmentOutput(Protocol):
    """Where a converted segment's batches are written: its file, or a range's place in the joined file."""

    def write(self, data: bytes | memoryview, /) -> object: ...


class SplitSink(Protocol):
    """Where a split source's batches go (``migrate.segment.split.SplitWriter``)."""

    def write(
        self,
        data: bytes | memoryview,
        sizes: np.ndarray,
        last_offsets: np.ndarray,
        max_timestamps: np.ndarray,
        source_positions: np.ndarray,
    ) -> None: ...


def _batch_columns(written: _Written) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return written.sizes, written.last_offsets, written.max_timestamps


def _source_positions(item: Entry, written: _Written, buf_position: int) -> np.ndarray:
    """Where the source entry of each written batch starts in the file: a run's messages each, else the entry."""
    positions = getattr(item, "positions", None)
    if positions is not None and len(positions) == len(written.sizes):
        return buf_position + np.asarray(positions, np.int64)
    return np.full(len(written.sizes), buf_position + item.first_position, np.int64)


def _drop(item: Entry, converter: _Converter, result: SegmentResult, base: int, buf_position: int, path: str) -> None:
    """Compaction left nothing of this entry: it is checked like any other, then leaves an offset gap."""
    offsets = records_of(item).offsets
    check_offsets(offsets, result.last_offset, base, buf_position + item.first_position, path)
    if result.first_offset is None:
        result.first_offset = int(offsets[0])
    result.last_offset = item.last_offset
    converter.dropped(item)
    result.records_dropped += len(offsets)
    result.entries_in += item.entry_count


def _check_batch_sizes(item: Entry, written: _Written, opts: ConvertOptions, buf_position: int, path: str) -> None:
    """Refuse a batch that conversion made larger than both max.message.bytes and the entry it came from: a broker
    accepted the source entry, so the topic's limit was at least that large, and a batch no larger is no risk."""
    if int(written.sizes.max()) <= opts.max_message_bytes:
        return
    over = written.sizes > opts.max_message_bytes
    source_sizes = item.batch_columns().sizes
    if len(source_sizes) != len(written.sizes):  # batches packed or split: each must stay within the limit
        source_sizes = np.full(len(written.sizes), int(source_sizes[0]) if item.entry_count == 1 else 0)
    grew = over & (written.sizes > source_sizes)
    if grew.any():
        i = int(np.argmax(grew))
        raise SegmentRefusedError(
            f"a converted batch of {int(written.sizes[i])} bytes exceeds max.message.bytes {opts.max_message_bytes} "
            f"and its source entry ({int(source_sizes[i])} bytes)",
            position=buf_position + item.first_position,
            path=path,
            hint="Nothing was changed. Re-plan with --max-message-bytes set to the topic's max.message.bytes if it is "
            "larger, or with a compression (--compression) or a smaller --pack-bytes that keeps batches under it.",
        )
