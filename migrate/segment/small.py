"""A small segment of plain legacy messages converted whole, in one call of the C accelerator.

The usual legacy segment of a big broker is tiny (a few messages) and holds only uncompressed magic 0/1 messages.
``convert.stream_entries`` converts it through the general machinery (the entry walk, the run decoder, the batch
encoder, both digests, the index builder: a dozen calls and their records per segment), which costs a tiny
segment several times what its bytes do. ``small_legacy_v2`` (``migrate/format/_speedups.c``) does the same work in
one pass when the options are Kafka 4's cleaner's (one v2 batch per message) and every entry is a sound plain
legacy message: the same output bytes, index files and digests, so the result is the one ``stream_entries`` gives.
Anything else (a compressed wrapper, a v2 batch, a torn tail, a bad CRC, an offset out of order, a Kafka limit, a
compacted or split segment, the accelerator switched off) comes back as None and takes the general path, which
also raises the precise error. The verifier re-reads every output with its own reader either way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from migrate.format import accel
from migrate.format.digest import hasher
from migrate.model.plan_tree import TimestampPolicy
from migrate.model.run_state import ConversionStatus, SegmentResult, SegmentTask

_small_legacy_v2 = accel.compiled("small_legacy_v2") if accel.speedups is not None else None


@dataclass(frozen=True, slots=True)
class WholeConversion:
    """A small segment converted whole: its ``.log`` bytes, its ``.index`` and ``.timeindex`` bytes, and the result
    ``stream_entries`` would give (outputs and the source's identity still to record)."""

    log: bytes
    index_files: tuple[bytes, bytes]
    result: SegmentResult


def convert_whole(task: SegmentTask, data: bytes, st: os.stat_result) -> WholeConversion | None:
    """``data`` (the whole source, ``st`` its stat) converted in one call, or None when the general path must
    convert it (see the module docstring)."""
    opts = task.options
    if _small_legacy_v2 is None or not opts.one_batch_per_message:
        return None
    if task.survivors is not None or task.split is not None:  # compaction keeps some records; a split cuts the output
        return None
    mtime_policy = opts.timestamps == TimestampPolicy.MTIME
    done = _small_legacy_v2(
        data,
        task.base_offset,
        st.st_mtime_ns // 1_000_000,
        mtime_policy,
        opts.partition_leader_epoch,
        opts.tombstone_flag,
        opts.index_interval_bytes,
        opts.max_message_bytes,
        opts.segment_bytes_limit,
    )
    if done is None:
        return None
    log, offset_index, time_index, v0, v1, first, last, max_timestamp, source_stream, output_stream = done
    source_digest, output_digest = hasher(opts.digest), hasher(opts.digest)
    source_digest.update(source_stream)
    output_digest.update(output_stream)
    records = v0 + v1
    magics = {}
    if v0:
        magics["0"] = v0
    if v1:
        magics["1"] = v1
    result = SegmentResult(
        source=task.source,
        base_offset=task.base_offset,
        status=ConversionStatus.CONVERTED,
        source_bytes=st.st_size,
        output_bytes=len(log),
        entries_in=records,
        batches_out=records,
        records=records,
        first_offset=first,
        last_offset=last,
        max_timestamp=max_timestamp,
        magics_in=magics,
        mtime_timestamped_records=v0 if mtime_policy else 0,
        digest=opts.digest,
        source_digest=source_digest.hexdigest(),
        output_digest_ts=output_digest.hexdigest(),
        mtime_ns=st.st_mtime_ns,
    )
    return WholeConversion(log, (offset_index, time_index), result)
