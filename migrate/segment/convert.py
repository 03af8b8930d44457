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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.compaction import encode_retained_v2, load_survivors, retained
from migrate.errors import SegmentRefusedError, SourceChangedError, TruncatedTailError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.digest import LogDigest, timestamps_only
from migrate.format.entries import Entry, entry_offsets
from migrate.format.records import NO_TIMESTAMP, Compression, Record, RecordColumns, TimestampType
from migrate.model import (
    MAX_SEGMENT_BYTES,
    SEGMENT_SUFFIXES,
    ConversionStatus,
    ConvertOptions,
    FileStat,
    SegmentResult,
    SegmentTask,
    TimestampPolicy,
)
from migrate.segment.indexes import IndexBuilder
from migrate.segment.profile import check_offsets
from migrate.segment.reader import read_chunks

SUFFIXES = SEGMENT_SUFFIXES


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


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
    options: ConvertOptions
    mtime_ms: int
    source: str
    changed: bool = False
    magics: dict[str, int] = field(default_factory=dict)
    mtime_timestamped: int = 0  # v0 records given the segment's mtime

    def convert(self, item: Entry, file_position: int) -> _Written:
        try:
            if isinstance(item, legacy.LegacyRun):
                return self._run(item)
            if isinstance(item, legacy.LegacyWrapper):
                return self._wrapper(item)
            return self._copy_v2(item)
        except ValueError as exc:  # a record Kafka's own builder refuses, e.g. a timestamp below -1
            position = item.position if not isinstance(item, legacy.LegacyRun) else int(item.positions[0])
            raise SegmentRefusedError(
                f"cannot convert entry: {exc}",
                position=file_position + position,
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

    def _run(self, run: legacy.LegacyRun) -> _Written:
        cols = run.records
        self._count_magics(run.magics)
        timestamps, types = self._policy_timestamps(cols.timestamps, run.timestamp_types())
        out_cols = timestamps_only(cols, timestamps)
        opts = self.options
        if opts.target_magic == 1:
            return self._run_to_v1(run, out_cols, types)
        self.changed = True
        if opts.pack_bytes is None and opts.compression in (None, "none"):
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
            group = _slice(cols, start, end)
            tstype = TimestampType(int(types[start]))
            data = v2.encode_batch(
                group,
                partition_leader_epoch=opts.partition_leader_epoch,
                compression=codec,
                timestamp_type=tstype,
                log_append_time=int(group.timestamps[0]) if tstype == TimestampType.LOG_APPEND_TIME else None,
                tombstone_flag=opts.tombstone_flag,
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

    def _wrapper(self, wrapper: legacy.LegacyWrapper) -> _Written:
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
                tombstone_flag=opts.tombstone_flag,
            )
        self.changed = True
        return _Written(
            data, np.array([len(data)]), np.array([int(cols.offsets[-1])]), np.array([max_ts]), out_cols, True
        )

    # --- compaction (pass two) ---

    def rewrite_v2(self, batch: v2.V2Batch, keep: np.ndarray) -> _Written:
        """A v2 batch that lost records to compaction: rebuilt with the survivors, never copied."""
        self.magics["2"] = self.magics.get("2", 0) + 1
        self.changed = True
        data, cols, max_ts = encode_retained_v2(batch, keep)
        return _Written(data, np.array([len(data)]), np.array([batch.last_offset]), np.array([max_ts]), cols, True)

    def dropped(self, item: Entry) -> None:
        """An entry none of whose records survives compaction: it disappears, leaving an offset gap."""
        self.changed = True
        if isinstance(item, legacy.LegacyRun):
            self._count_magics(item.magics)
        else:
            magic = str(item.magic) if isinstance(item, legacy.LegacyWrapper) else "2"
            self.magics[magic] = self.magics.get(magic, 0) + 1

    # --- v2 batches ---

    def _copy_v2(self, batch: v2.V2Batch) -> _Written:
        self.magics["2"] = self.magics.get("2", 0) + 1
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
        values, counts = np.unique(magics, return_counts=True)
        for m, c in zip(values.tolist(), counts.tolist()):
            self.magics[str(m)] = self.magics.get(str(m), 0) + c


def _batch_max_timestamp(timestamps: np.ndarray) -> int:
    return max(int(timestamps.max()), NO_TIMESTAMP) if len(timestamps) else NO_TIMESTAMP


def _slice(cols: RecordColumns, a: int, b: int) -> RecordColumns:
    return RecordColumns(
        cols.buffer,
        cols.offsets[a:b],
        cols.timestamps[a:b],
        cols.key_pos[a:b],
        cols.key_len[a:b],
        cols.value_pos[a:b],
        cols.value_len[a:b],
        None if cols.headers is None else cols.headers[a:b],
    )


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
    source = Path(task.source)
    opts = task.options
    fd = os.open(source, os.O_RDONLY)
    src = os.fdopen(fd, "rb")
    st = os.fstat(fd)
    try:
        _check_planned(task, source, st)
        live_dir = source.parent
        live_before = {}
        for sfx in SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                live_before[sfx] = FileStat.of(os.stat(live_dir / segment_name(task.base_offset, sfx)))
        staging = Path(task.staging_dir)
        staging.mkdir(parents=True, exist_ok=True)
        # staged files are written under their final names: the staging dir is private, and a staged file is trusted
        # only once its identity is recorded with the verified outcome, so a crash mid-write leaves nothing trusted
        finals = {sfx: staging / segment_name(task.base_offset, sfx) for sfx in SUFFIXES}
        result = SegmentResult(source=str(source), base_offset=task.base_offset, status=ConversionStatus.CONVERTED)
        result.source_bytes = st.st_size
        result.mtime_ns = st.st_mtime_ns
        result.live_before = live_before
        converter = _Converter(opts, st.st_mtime_ns // 1_000_000, str(source))
        index = IndexBuilder(task.base_offset, opts.index_interval_bytes)
        # the source's content digest (comparable with Kafka's own summary), and the digest of exactly what the
        # output must read back as (offsets, keys, values and the policy's timestamps): two passes, not four
        source_digest = LogDigest(timed=False)
        output_digest = LogDigest(plain=False)
        survivors = _survivors(task)
        try:
            with finals[".log"].open("wb") as out:
                _stream(task, src, out, converter, index, source_digest, output_digest, result, survivors)
            offset_bytes, time_bytes = index.finish()
            for sfx, data in ((".index", offset_bytes), (".timeindex", time_bytes)):
                finals[sfx].write_bytes(data)
            if result.entries_in == 0:
                result.status = ConversionStatus.EMPTY
            elif not converter.changed:
                result.status = ConversionStatus.UNCHANGED
            if result.status == ConversionStatus.UNCHANGED:
                for p in finals.values():
                    p.unlink()
            else:
                for sfx in SUFFIXES:
                    owner = live_before.get(sfx) and live_dir / segment_name(task.base_offset, sfx)
                    _take_ownership(finals[sfx], owner or source, st)
                    os.utime(finals[sfx], ns=(st.st_atime_ns, st.st_mtime_ns))
                    result.outputs[sfx] = str(finals[sfx])
                    result.output_stats[sfx] = FileStat.of(os.stat(finals[sfx]))
        except BaseException:
            for p in finals.values():
                p.unlink(missing_ok=True)
            raise
    finally:
        src.close()
    result.output_bytes = result.output_sizes.get(".log", 0)
    result.magics_in = converter.magics
    result.mtime_timestamped_records = converter.mtime_timestamped
    result.records = source_digest.records
    result.source_digest = source_digest.hexdigests()[0]
    result.output_digest_ts = output_digest.hexdigests()[1]
    result.seconds = time.perf_counter() - started
    return result


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


def _check_planned(task: SegmentTask, source: Path, st: os.stat_result) -> None:
    planned = (task.expected_size, task.expected_mtime_ns, task.expected_inode)
    actual = (st.st_size, st.st_mtime_ns, st.st_ino)
    if any(want is not None and want != got for want, got in zip(planned, actual)):
        raise SourceChangedError(
            f"{source} is not the file that was planned: size {st.st_size} (planned {task.expected_size}), mtime_ns "
            f"{st.st_mtime_ns} (planned {task.expected_mtime_ns}), inode {st.st_ino} (planned {task.expected_inode})",
            path=str(source),
        )


def _take_ownership(path: Path, like: Path, source_stat: os.stat_result) -> None:
    """Give ``path`` the owner, group and mode of ``like`` (the live file it replaces, else the source .log)."""
    try:
        ref = os.stat(like)
    except FileNotFoundError:
        ref = source_stat
    mine = os.stat(path)
    if (mine.st_uid, mine.st_gid) != (ref.st_uid, ref.st_gid):
        os.chown(path, ref.st_uid, ref.st_gid)
    os.chmod(path, ref.st_mode & 0o7777)


def _stream(
    task: SegmentTask,
    src,
    out,
    converter: _Converter,
    index: IndexBuilder,
    source_digest: LogDigest,
    output_digest: LogDigest,
    result: SegmentResult,
    survivors: np.ndarray | None = None,
) -> None:
    """``survivors``: compaction's pass two keeps only the records at these offsets (sorted)."""
    opts = task.options
    path = str(task.source)
    base = task.base_offset
    written = 0
    for chunk in read_chunks(src, path, opts.chunk_bytes):
        buf, buf_position, entries = chunk.buffer, chunk.position, chunk.entries
        view = memoryview(buf)
        for item in entries.items:
            kept, keep = (item, None) if survivors is None else retained(item, survivors)
            if kept is None:
                _drop(item, converter, result, base, buf_position, path)
                continue
            if keep is not None and isinstance(item, v2.V2Batch):
                written_item = converter.rewrite_v2(item, keep)
            else:
                written_item = converter.convert(kept, buf_position)
            cols = written_item.output_records
            offsets = item.records.offsets
            if len(offsets):
                check_offsets(offsets, result.last_offset, base, buf_position + _first_position(item), path)
                if result.first_offset is None:
                    result.first_offset = int(offsets[0])
                result.last_offset = int(written_item.last_offsets[-1])
            if written_item.data is not None:
                _check_batch_sizes(kept, written_item, opts, buf_position, path)
            if written_item.data is None:
                p = item.position
                data = view[p : p + item.size]
            else:
                data = written_item.data
            out.write(data)
            written += len(data)
            if written > MAX_SEGMENT_BYTES:
                raise SegmentRefusedError(
                    f"the converted segment would exceed {MAX_SEGMENT_BYTES} bytes, the largest .log Kafka opens",
                    position=buf_position + _first_position(item),
                    path=path,
                    hint="Convert this partition with compression (--compression lz4) or --pack-bytes, which "
                    "shrink the output, or lower segment.bytes and let Kafka roll smaller segments first.",
                )
            index.add_batches(written_item.sizes, written_item.last_offsets, written_item.max_timestamps)
            source_digest.update(kept.records)  # what the output must hold: with compaction, the survivors only
            output_digest.update(cols)
            result.records_dropped += len(offsets) - len(kept.records)
            result.entries_in += len(item) if isinstance(item, legacy.LegacyRun) else 1
            result.batches_out += len(written_item.sizes)
            result.max_timestamp = max(result.max_timestamp, int(written_item.max_timestamps.max()))
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


def _drop(item: Entry, converter: _Converter, result: SegmentResult, base: int, buf_position: int, path: str) -> None:
    """Compaction left nothing of this entry: it is checked like any other, then leaves an offset gap."""
    offsets = item.records.offsets
    check_offsets(offsets, result.last_offset, base, buf_position + _first_position(item), path)
    if result.first_offset is None:
        result.first_offset = int(offsets[0])
    result.last_offset = entry_offsets(item)[1]
    converter.dropped(item)
    result.records_dropped += len(offsets)
    result.entries_in += len(item) if isinstance(item, legacy.LegacyRun) else 1


def _check_batch_sizes(item: Entry, written: _Written, opts: ConvertOptions, buf_position: int, path: str) -> None:
    """Refuse a batch that conversion made larger than both max.message.bytes and the entry it came from: a broker
    accepted the source entry, so the topic's limit was at least that large, and a batch no larger is no risk."""
    over = written.sizes > opts.max_message_bytes
    if not over.any():
        return
    if isinstance(item, legacy.LegacyRun):
        source_sizes = item.sizes if len(item.sizes) == len(written.sizes) else np.full(len(written.sizes), 0)
    else:
        source_sizes = np.full(len(written.sizes), item.size)
    grew = over & (written.sizes > source_sizes)
    if grew.any():
        i = int(np.argmax(grew))
        raise SegmentRefusedError(
            f"a converted batch of {int(written.sizes[i])} bytes exceeds max.message.bytes {opts.max_message_bytes} "
            f"and its source entry ({int(source_sizes[i])} bytes)",
            position=buf_position + _first_position(item),
            path=path,
            hint="Nothing was changed. Re-plan with --max-message-bytes set to the topic's max.message.bytes if it is "
            "larger, or with a compression (--compression) or a smaller --pack-bytes that keeps batches under it.",
        )


def _first_position(item: Entry) -> int:
    return int(item.positions[0]) if isinstance(item, legacy.LegacyRun) else item.position
