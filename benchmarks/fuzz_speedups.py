"""Fuzz the C accelerator's functions directly with random and hostile buffers, positions, lengths and arrays.

Every case calls one function of ``migrate.format._speedups`` (walk, crc_ranges, single_record_batches,
digest_stream, v2_records, v2_batches, legacy_run, index_entries, small_legacy_v2, small_v2_records) with arguments
derived from
(seed, case number) alone: random or Kafka-shaped buffers, damaged or not, and position/length arrays that are mostly
plausible, sometimes extreme (int64 limits, negative, past the end, ends before starts), sometimes of the wrong
dtype, shape, contiguity, alignment or length; for index_entries, batch sizes, an interval and a carried state; for
small_legacy_v2, a legacy segment (damaged or not) and the conversion's options; for small_v2_records, v2 batches
(damaged or not, their CRCs computed again for half of those). The outcome is checked against the function's Python
reference (``migrate.format.accel`` names the twins; small_legacy_v2's is the general conversion,
``migrate.segment.convert.stream_entries``, run over the buffer in memory; small_v2_records's the reader's walk and
``v2_batches``):

* a refusal must be TypeError, ValueError, OverflowError, MemoryError or BufferError, and only for arguments the
  reference refuses too (or that no reference would take: a wrong dtype, a strided array);
* small_legacy_v2 declines (None) exactly what the general conversion refuses or converts otherwise than as plain
  legacy messages, and gives its bytes, index files and digests for the rest; small_v2_records declines exactly
  what is not a run of complete v2 batches that v2_batches decodes, and gives their columns and digest otherwise;
* an accepted call must give exactly the reference's result, so an out-of-bounds read that changes a result shows
  up even without a sanitizer. A read that changes nothing, or a write, needs a sanitizer build (see README.md).

A crash of the C code kills the process: the last case printed with ``--verbose`` is the culprit, and ``--replay``
runs one case again.

    python benchmarks/fuzz_speedups.py [--cases 100000] [--seed 1] [--max-seconds S] [--json] [--show 5]
    python benchmarks/fuzz_speedups.py --seed 1 --replay 1234 [--verbose]

Exits 1 if any case disagreed with its reference, 2 if the accelerator is not in use.
tests/test_format_hostile.py runs the same checks on hypothesis-drawn arguments and a few thousand seeded cases.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import struct
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import crc32c as _crc32c
import numpy as np

from migrate.errors import CorruptRecordError, SegmentRefusedError, TruncatedTailError, UnsupportedFormatError
from migrate.format import accel, checksums, legacy
from migrate.format import batch as v2
from migrate.format.digest import LogDigest, hasher
from migrate.format.entries import read_entries, walk_entries, walk_positions
from migrate.format.records import Compression, Record, RecordColumns
from migrate.format.varint import decode_varint
from migrate.model.plan_tree import ConvertOptions, TimestampPolicy
from migrate.model.run_state import SegmentTask
from migrate.segment import convert
from migrate.segment.indexes import IndexBuilder
from migrate.segment.indexes import index_entries as index_entries_reference

REFUSALS = (TypeError, ValueError, OverflowError, MemoryError, BufferError)
INT64_EXTREMES = [0, 1, -1, -2, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63), -(2**63) + 1]
FUNCTIONS = [
    "walk",
    "crc_ranges",
    "single_record_batches",
    "digest_stream",
    "v2_records",
    "v2_batches",
    "legacy_run",
    "index_entries",
    "small_legacy_v2",
    "small_v2_records",
]


class Mismatch(AssertionError):
    """The accelerator and its Python reference disagree: a bug in one of them."""


def well_typed(a: object, dtype: type = np.int64) -> bool:
    """An array the accelerator must accept as a column: 1-D, native ``dtype``, C-contiguous, aligned."""
    return (
        isinstance(a, np.ndarray)
        and a.ndim == 1
        and a.dtype == np.dtype(dtype)
        and a.dtype.isnative
        and a.flags.c_contiguous
        and a.flags.aligned
    )


def _call(fn: Callable[..., Any], *args: Any) -> tuple[Any, BaseException | None]:
    try:
        return fn(*args), None
    except REFUSALS as exc:
        return None, exc


def _refused(exc: BaseException) -> str:
    return f"refused {type(exc).__name__}"


def _same_refusal(c_err: BaseException | None, ref_err: BaseException | None, what: str) -> None:
    if (c_err is None) != (ref_err is None):
        raise Mismatch(f"{what}: accelerator {c_err!r} but reference {ref_err!r}")
    if c_err is not None and type(c_err) is not type(ref_err):
        raise Mismatch(f"{what}: accelerator raised {c_err!r} but reference {ref_err!r}")


# --- one checker per function: call it, compare with the reference, return the outcome ---------------------------


def check_walk(c: ModuleType, buf: Any) -> str:
    got, err = _call(c.walk, buf)
    if err is not None:
        if isinstance(buf, bytes | bytearray):
            raise Mismatch(f"walk refused a plain buffer: {err!r}")
        return _refused(err)
    raw, consumed, bad = got
    positions = np.frombuffer(raw, np.int64)
    try:
        ref_positions, ref_consumed = walk_positions(buf)
    except CorruptRecordError as exc:
        if bad != exc.position:
            raise Mismatch(f"walk: bad entry at {bad}, reference at {exc.position}") from None
        return "ok bad entry"
    if bad != -1 or consumed != ref_consumed or positions.tolist() != ref_positions.tolist():
        raise Mismatch(f"walk: ({len(positions)} entries, {consumed}, {bad}) vs ({len(ref_positions)}, {ref_consumed})")
    return "ok"


def check_crc_ranges(c: ModuleType, buf: Any, starts: Any, ends: Any, castagnoli: bool) -> str:
    got, err = _call(c.crc_ranges, buf, starts, ends, castagnoli)
    if not (well_typed(starts) and well_typed(ends)):
        if err is None:
            raise Mismatch("crc_ranges accepted an array of the wrong type, shape or layout")
        return _refused(err)
    ref, ref_err = _call(checksums.crc_ranges, buf, starts, ends, castagnoli)
    _same_refusal(err, ref_err, "crc_ranges")
    if err is not None:
        return _refused(err)
    if got != ref:
        raise Mismatch("crc_ranges: checksums differ from the reference")
    return "ok"


SRB_COLUMNS = ["offsets", "timestamps", "timestamp_types", "key_pos", "key_len", "value_pos", "value_len"]


def check_single_record_batches(c: ModuleType, buf: Any, columns: list[Any], attributes: Any, epoch: Any) -> str:
    args = (buf, *columns, attributes, epoch)
    got, err = _call(c.single_record_batches, *args)
    if not (all(well_typed(a) for a in columns) and well_typed(attributes, np.uint8) and type(epoch) is int):
        if err is None:
            raise Mismatch("single_record_batches accepted an argument of the wrong type, shape or layout")
        return _refused(err)
    ref, ref_err = _call(v2.single_record_batches, *args)
    _same_refusal(err, ref_err, "single_record_batches")
    if err is not None:
        return _refused(err)
    if got != ref:
        raise Mismatch("single_record_batches: output differs from the reference")
    return "ok"


DIGEST_COLUMNS = ["offsets", "timestamps", "key_pos", "key_len", "value_pos", "value_len"]


def check_digest_stream(c: ModuleType, buf: Any, columns: list[Any], with_timestamps: bool) -> str:
    got, err = _call(c.digest_stream, buf, *columns, with_timestamps)
    if not all(well_typed(a) for a in columns) or len({len(a) for a in columns}) != 1:
        if err is None:
            raise Mismatch("digest_stream accepted arrays of the wrong type, shape, layout or length")
        return _refused(err)
    reference = LogDigest(plain=not with_timestamps, timed=with_timestamps)
    _, ref_err = _call(reference._update_rows, RecordColumns(buf, *columns))
    _same_refusal(err, ref_err, "digest_stream")
    if err is not None:
        return _refused(err)
    if hashlib.sha256(got).hexdigest() not in reference.hexdigests():
        raise Mismatch("digest_stream: serialization differs from the reference")
    return "ok"


def check_v2_records(c: ModuleType, buf: Any, positions: Any, sizes: Any, checked: bool = False) -> str:
    """Each batch the accelerator decodes (status 0) must be what ``decode_batch`` reads, record for record; each it
    calls malformed (2) must make ``decode_batch`` raise; each ``decode_batch`` reads (uncompressed, no headers)
    must be decoded. ``decode_batch`` checks the CRC; ``v2_records`` leaves that to its caller, so the reference
    reads a copy of each batch with its CRC recomputed; ``v2_batches`` (``checked``) checks it too, and returns each
    batch's last offset and max timestamp, which must be its header's."""
    name = "v2_batches" if checked else "v2_records"
    got, err = _call(getattr(c, name), buf, positions, sizes)
    if not (well_typed(positions) and well_typed(sizes) and len(positions) == len(sizes)):
        if err is None:
            raise Mismatch(f"{name} accepted arrays of the wrong type, shape, layout or length")
        return _refused(err)
    data = bytes(memoryview(buf).cast("B"))
    inside = (positions >= 0) & (sizes >= 0) & (sizes <= len(data)) & (positions <= len(data) - sizes)
    if err is not None:
        if inside.all() and not isinstance(err, MemoryError):
            raise Mismatch(f"{name} refused batches inside the buffer: {err!r}")
        return _refused(err)
    if not inside.all():
        raise Mismatch(f"{name} accepted a batch outside the buffer")
    if checked:
        status, counts, lasts, maxes, *cols = got
        lasts, maxes = np.frombuffer(lasts, np.int64), np.frombuffer(maxes, np.int64)
        for i, (p, s) in enumerate(zip(positions.tolist(), sizes.tolist())):
            want = (0, 0)
            if s >= v2.RECORD_BATCH_OVERHEAD:
                base, delta, max_ts = struct.unpack_from(">q", data, p)[0], *struct.unpack_from(">i", data, p + 23), 0
                max_ts = struct.unpack_from(">q", data, p + 35)[0]
                want = ((base + delta + 2**63) % 2**64 - 2**63, max_ts)
            if (int(lasts[i]), int(maxes[i])) != want:
                raise Mismatch(f"v2_batches: batch {i} header fields {(int(lasts[i]), int(maxes[i]))} != {want}")
    else:
        status, counts, *cols = got
    counts = np.frombuffer(counts, np.int64)
    offsets, timestamps, key_pos, key_len, value_pos, value_len = (np.frombuffer(x, np.int64) for x in cols)
    r = 0
    outcome: Counter = Counter()
    for i, (p, s) in enumerate(zip(positions.tolist(), sizes.tolist())):
        one = bytearray(data[p : p + s])
        if s >= v2.RECORD_BATCH_OVERHEAD and not checked:
            struct.pack_into(">I", one, v2.CRC_OFFSET, _crc32c.crc32c(bytes(one[v2.ATTRIBUTES_OFFSET :])))
        try:
            batch = v2.decode_batch(bytes(one), 0, s)
        except (CorruptRecordError, UnsupportedFormatError):
            batch = None
        except Exception as exc:  # the reference itself must not crash either
            raise Mismatch(f"decode_batch crashed on batch {i}: {exc!r}") from exc
        outcome[status[i]] += 1
        plain = batch is not None and batch.compression == 0 and batch.records.headers is None
        if status[i] == 0:
            if not plain:
                raise Mismatch(f"{name} decoded batch {i}, which the reader {'refuses' if batch is None else 'defers'}")
            rec = batch.records
            n = int(counts[i])
            if n != len(rec):
                raise Mismatch(f"{name}: batch {i} has {n} records, the reader {len(rec)}")
            for j in range(n):
                key = None if key_len[r + j] < 0 else data[key_pos[r + j] : key_pos[r + j] + key_len[r + j]]
                value = None if value_len[r + j] < 0 else data[value_pos[r + j] : value_pos[r + j] + value_len[r + j]]
                mine = (int(offsets[r + j]), int(timestamps[r + j]), key, value)
                theirs = (int(rec.offsets[j]), int(rec.timestamps[j]), rec.key(j), rec.value(j))
                if mine != theirs and not (
                    mine[::2] == theirs[::2] and mine[3] == theirs[3] and mine[1] == kafka_timestamp(one, j)
                ):
                    raise Mismatch(f"{name}: batch {i} record {j}: {mine!r} vs the reader's {theirs!r}")
                if mine != theirs:
                    outcome["varlong"] += 1
            r += n
        elif status[i] == 2 and batch is not None:
            raise Mismatch(f"{name} called batch {i} malformed; the reader reads it")
        elif status[i] not in (1, 2) or plain:
            raise Mismatch(f"{name}: status {status[i]} for batch {i}, which the reader decodes")
    if r != len(offsets):
        raise Mismatch(f"{name} returned {len(offsets)} records, {r} in decoded batches")
    if outcome["varlong"]:
        return "ok, Kafka's reading of an overlong varlong (not the Python reader's)"
    return "ok decoded" if outcome[0] else "ok declined"


def check_v2_batches(c: ModuleType, buf: Any, positions: Any, sizes: Any) -> str:
    return check_v2_records(c, buf, positions, sizes, checked=True)


LEGACY_COLUMNS = [
    "offsets",
    "crcs",
    "timestamps",
    "key_pos",
    "key_len",
    "value_pos",
    "value_len",
    "magics",
    "attributes",
]


def check_legacy_run(c: ModuleType, buf: Any, positions: Any, sizes: Any) -> str:
    """Each message the accelerator reads (status 0) must be what ``decode_run_reference`` reads of it alone, field
    for field; each it calls bad (1) must make the reference raise."""
    got, err = _call(c.legacy_run, buf, positions, sizes)
    if not (well_typed(positions) and well_typed(sizes) and len(positions) == len(sizes)):
        if err is None:
            raise Mismatch("legacy_run accepted arrays of the wrong type, shape, layout or length")
        return _refused(err)
    data = bytes(memoryview(buf).cast("B"))
    inside = (positions >= 0) & (sizes >= 0) & (sizes <= len(data)) & (positions <= len(data) - sizes)
    if err is not None:
        if inside.all() and not isinstance(err, MemoryError):
            raise Mismatch(f"legacy_run refused messages inside the buffer: {err!r}")
        return _refused(err)
    if not inside.all():
        raise Mismatch("legacy_run accepted a message outside the buffer")
    status, *raw = got
    cols = [np.frombuffer(x, np.int64) for x in raw]
    read = 0
    for i, (p, s) in enumerate(zip(positions.tolist(), sizes.tolist())):
        try:
            run = legacy.decode_run_reference(data, np.array([p], np.int64), np.array([s], np.int64))
        except (CorruptRecordError, ValueError, IndexError):
            run = None
        except Exception as exc:  # the reference itself must not crash either
            raise Mismatch(f"decode_run_reference crashed on message {i}: {exc!r}") from exc
        if (status[i] == 0) != (run is not None):
            raise Mismatch(
                f"legacy_run: status {status[i]} for message {i}, the reference {'reads' if run else 'refuses'} it"
            )
        if run is None:
            continue
        read += 1
        rec = run.records
        theirs = [rec.offsets, run.crcs, rec.timestamps, rec.key_pos, rec.key_len, rec.value_pos, rec.value_len]
        theirs += [run.magics, run.attributes]
        for name, mine, ref in zip(LEGACY_COLUMNS, cols, theirs):
            if int(mine[i]) != int(ref[0]):
                raise Mismatch(f"legacy_run: message {i} {name} {int(mine[i])}, the reference {int(ref[0])}")
    return "ok read" if read else "ok declined"


def check_index_entries(c: ModuleType, columns: list[Any], interval: int, state: list[int]) -> str:
    got, err = _call(c.index_entries, *columns, interval, *state)
    if not all(well_typed(a) for a in columns):
        if err is None:
            raise Mismatch("index_entries accepted arrays of the wrong type, shape or layout")
        return _refused(err)
    ref, ref_err = _call(index_entries_reference, *columns, interval, *state)
    _same_refusal(err, ref_err, "index_entries")
    if err is not None:
        return _refused(err)
    if got != ref:
        raise Mismatch(f"index_entries: {got[2:]} and {len(got[0]) // 16} entries, reference {ref[2:]}")
    return "ok indexed" if got[0] else "ok"


def kafka_timestamp(batch: bytes | bytearray, j: int) -> int:
    """Record ``j``'s timestamp as Kafka reads it (``ByteUtils.readVarlong``): the 10th byte of a varlong is shifted
    by 63 in Java long arithmetic, so only its lowest bit counts. The Python reader's ``decode_varint`` keeps every
    bit there, and disagrees on such a (malformed) varlong; the accelerator reads it as Kafka does."""
    pos = v2.RECORD_BATCH_OVERHEAD
    for _ in range(j):
        length, pos = decode_varint(batch, pos, len(batch), 5)
        pos += length
    _, pos = decode_varint(batch, pos, len(batch), 5)
    raw, shift = 0, 0
    for b in batch[pos + 1 : pos + 11]:  # after the record attributes byte
        raw |= (b & 0x7F) << shift if shift < 63 else (b & 1) << 63
        if b < 0x80:
            break
        shift += 7
    delta = (raw >> 1) ^ -(raw & 1)
    if batch[22] & v2.TIMESTAMP_TYPE_BIT:
        return struct.unpack_from(">q", batch, 35)[0]
    base = struct.unpack_from(">q", batch, 27)[0]
    return (base + delta + 2**63) % 2**64 - 2**63


@dataclass(frozen=True)
class _Stat:
    """The two fields of a source's stat that a conversion reads."""

    st_size: int
    st_mtime_ns: int


def small_legacy_v2_reference(buf: bytes, base: int, options: ConvertOptions, mtime_ms: int) -> tuple | None:
    """What small_legacy_v2 must give: the general conversion of ``buf`` as a whole file, in memory, when every entry
    is a plain legacy message and it converts; None when it refuses the file, converts some entry otherwise, or the
    base offset is negative (no file is named so). Digests instead of the serializations hashed."""
    if base < 0:
        return None
    task = SegmentTask("fuzz.log", "", base, options)
    index = IndexBuilder(base, options.index_interval_bytes)
    parts = convert._Parts()
    try:
        run = convert.stream_entries(task, None, parts, _Stat(len(buf), mtime_ms * 1_000_000), index=index, data=buf)
        items = read_entries(buf).items
    except (CorruptRecordError, UnsupportedFormatError, SegmentRefusedError, TruncatedTailError):
        return None
    if not items or run.result.truncated_tail_bytes or not all(isinstance(i, legacy.LegacyRun) for i in items):
        return None
    r = run.result
    v0, v1 = r.magics_in.get("0", 0), r.magics_in.get("1", 0)
    offset_index, time_index = index.finish()
    return (b"".join(parts), offset_index, time_index, v0, v1, r.first_offset, r.last_offset, r.max_timestamp,
            r.source_digest, r.output_digest_ts)  # fmt: skip


def check_small_legacy_v2(c: ModuleType, buf: bytes, base: int, options: ConvertOptions, mtime_ms: int) -> str:
    got, err = _call(
        c.small_legacy_v2,
        buf,
        base,
        mtime_ms,
        options.timestamps == TimestampPolicy.MTIME,
        options.partition_leader_epoch,
        options.tombstone_flag,
        options.index_interval_bytes,
        options.max_message_bytes,
        options.segment_bytes_limit,
    )
    if err is not None:
        raise Mismatch(f"small_legacy_v2 raised on a bytes buffer: {err!r}")
    want = small_legacy_v2_reference(buf, base, options, mtime_ms)
    if got is None or want is None:
        if (got is None) != (want is None):
            raise Mismatch(f"small_legacy_v2 {'declined' if got is None else 'converted'}, the general path did not")
        return "declined"
    *fields, source_stream, output_stream = got
    for stream in (source_stream, output_stream):
        h = hasher(options.digest)
        h.update(stream)
        fields.append(h.hexdigest())
    names = ["log", "offset index", "time index", "v0", "v1", "first", "last", "max timestamp", "digest", "digest_ts"]
    for name, mine, ref in zip(names, fields, want):
        if mine != ref:
            raise Mismatch(f"small_legacy_v2: {name} {mine!r:.80}, the general path {ref!r:.80}")
    return "ok converted"


def small_v2_records_reference(buf: bytes) -> tuple | None:
    """What small_v2_records must give: the walk's complete entries, each of magic 2 and decoded by v2_batches
    (``decode_uncompressed_batches``), their columns and the SHA-256 of their digest serialization (the Python
    reference's, ``LogDigest._update_rows``); None for anything else."""
    try:
        walk = walk_entries(buf)
    except (CorruptRecordError, UnsupportedFormatError):
        return None
    if not len(walk.positions) or walk.tail is not None or (walk.magics != v2.MAGIC).any():
        return None
    decoded = v2.decode_uncompressed_batches(buf, walk.positions, walk.sizes)
    if decoded is None:
        return None
    digest = LogDigest(plain=False, timed=True)
    digest._update_rows(decoded.records)
    return (walk.positions.tolist(), walk.sizes.tolist(), decoded.last_offsets.tolist(),
            decoded.max_timestamps.tolist(), len(decoded.records), digest.hexdigests()[1])  # fmt: skip


def check_small_v2_records(c: ModuleType, buf: bytes) -> str:
    got, err = _call(c.small_v2_records, buf)
    if err is not None:
        raise Mismatch(f"small_v2_records raised on a bytes buffer: {err!r}")
    want = small_v2_records_reference(buf)
    if got is None or want is None:
        if (got is None) != (want is None):
            raise Mismatch(f"small_v2_records {'declined' if got is None else 'read'}, the reference did not")
        return "declined"
    mine = [np.frombuffer(x, np.int64).tolist() for x in got[:4]] + [got[4], hashlib.sha256(got[5]).hexdigest()]
    names = ["positions", "sizes", "last offsets", "max timestamps", "records", "digest stream"]
    for name, a, b in zip(names, mine, want):
        if a != b:
            raise Mismatch(f"small_v2_records: {name} {a!r:.80}, the reference {b!r:.80}")
    return "ok read"


CHECKERS: dict[str, Callable[..., str]] = {
    "walk": check_walk,
    "crc_ranges": check_crc_ranges,
    "single_record_batches": check_single_record_batches,
    "digest_stream": check_digest_stream,
    "v2_records": check_v2_records,
    "v2_batches": check_v2_batches,
    "legacy_run": check_legacy_run,
    "index_entries": check_index_entries,
    "small_legacy_v2": check_small_legacy_v2,
    "small_v2_records": check_small_v2_records,
}


# --- random arguments ----------------------------------------------------------------------------------------------


def random_records(rng: random.Random, n: int) -> list[Record]:
    base = rng.choice([0, 1000, 2**40, 2**63 - 100])
    offsets = sorted(rng.sample(range(base, base + rng.choice([n, 2 * n, 50])), n))
    out = []
    for o in offsets:
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 5, 30]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 3, 50, 300]))
        headers = (("h", b"x"),) if rng.random() < 0.05 else ()
        out.append(Record(o, rng.choice([-1, 0, 1500000000000 + o % 1000, 2**63 - 1]), key, value, headers))
    return out


def kafka_buffer(rng: random.Random) -> bytes:
    """Back-to-back v2 batches (some compressed, some with headers) or legacy messages, as a segment holds them."""
    parts = []
    for _ in range(rng.randint(0, 6)):
        records = random_records(rng, rng.randint(0, 5)) if rng.random() < 0.9 else []
        kind = rng.random()
        if kind < 0.6:
            base = records[0].offset if records else rng.randrange(2**40)
            parts.append(
                v2.encode_batch(
                    records,
                    base_offset=base,
                    compression=Compression.GZIP if rng.random() < 0.1 else Compression.NONE,
                )
            )
        elif records:
            parts.append(legacy.encode_messages([r._replace(headers=()) for r in records], rng.randint(0, 1)))
    return b"".join(parts)


def damage(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([0, 0, 1, 2, 8])):
        if buf:
            buf[rng.randrange(len(buf))] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
    if buf and rng.random() < 0.2:
        at = rng.randrange(len(buf))
        width = rng.choice([1, 4, 8])
        buf[at : at + width] = rng.randbytes(width)
    if buf and rng.random() < 0.15:
        del buf[rng.randrange(len(buf)) :]
    return bytes(buf)


def random_buffer(rng: random.Random) -> bytes:
    if rng.random() < 0.6:
        return damage(rng, kafka_buffer(rng))
    return rng.randbytes(rng.choice([0, 1, 16, 17, 61, rng.randrange(400)]))


def random_piece(rng: random.Random, size: int, null: bool = True) -> tuple[int, int]:
    """A (position, length) in a buffer of ``size`` bytes: mostly inside it (or null), now and then hostile."""
    if rng.random() < 0.96:
        if null and rng.random() < 0.15:
            return rng.choice([0, rng.randrange(-(2**63), 2**63)]), -1
        pos = rng.randint(0, size)
        return pos, rng.randint(0, size - pos)
    pos = rng.choice([*INT64_EXTREMES, size, size + 1, -size, size + 2**31, rng.randrange(-(2**63), 2**63)])
    length = rng.choice([*INT64_EXTREMES, size, size + 1, -2, -(2**31), rng.randrange(-(2**63), 2**63)])
    return (
        (pos, length)
        if rng.random() < 0.6
        else rng.choice([(pos, rng.randint(0, size)), (rng.randint(0, size), length)])
    )


def hostile_array(rng: random.Random, values: list[int], dtype: type = np.int64) -> Any:
    """``values`` as a column, now and then in the wrong dtype, shape, layout or alignment, or not an array."""
    a = np.array(values, dtype)
    if rng.random() < 0.96:
        return a
    how = rng.choice(["int32", "float64", "object", "uint64", "bool", ">i8", "strided", "2d", "0d", "misaligned"])
    how = how if a.size or how in ("int32", "float64", "object", "0d") else "int32"
    if how == "strided":
        return np.repeat(a, 2)[::2]
    if how == "2d":
        return np.stack([a, a])
    if how == "0d":
        return np.array(values[0] if values else 0, dtype)
    if how == "misaligned":
        raw = bytearray(a.nbytes + 1)
        out = np.frombuffer(raw, a.dtype, count=len(a), offset=1)
        out[:] = a
        return out
    if how == "object":
        return np.array(values, object)
    if how == ">i8":
        return a.astype(">i8")
    return np.array(values).astype(how, casting="unsafe")


def random_case(rng: random.Random) -> tuple[str, tuple[Any, ...]]:
    """One function name and its arguments."""
    name = rng.choice(FUNCTIONS)
    buf = random_buffer(rng)
    size = len(buf)
    n = rng.choice([0, 1, 2, 5, 20])
    lengths = [n] * 8
    if rng.random() < 0.05:  # parallel arrays of different lengths
        lengths[rng.randrange(8)] = rng.choice([0, n + 1, max(0, n - 1)])
    if name == "walk":
        return name, (buf,)
    if name == "crc_ranges":
        pieces = [random_piece(rng, size, null=False) for _ in range(max(lengths[0], lengths[1]))]
        starts = [p for p, _ in pieces[: lengths[0]]]
        # an end of start + length, or an unrelated (maybe earlier) position
        ends = [p + n if rng.random() < 0.9 else rng.choice(INT64_EXTREMES) for p, n in pieces[: lengths[1]]]
        ends = [max(-(2**63), min(e, 2**63 - 1)) for e in ends]
        return name, (buf, hostile_array(rng, starts), hostile_array(rng, ends), rng.random() < 0.5)
    if name == "index_entries":
        return name, index_case(rng, lengths)
    if name == "small_legacy_v2":
        return name, small_case(rng)
    if name == "small_v2_records":
        data = kafka_buffer(rng)
        if rng.random() < 0.4:
            data = damage(rng, data)
            if rng.random() < 0.5:
                data = v2_crcs_fixed(data)
        return name, (data,)
    if name == "legacy_run" and rng.random() < 0.5:
        buf = damage(rng, legacy_buffer(rng))
        size = len(buf)
    if name in ("v2_records", "v2_batches", "legacy_run"):
        walk = _walk_or_nothing(buf)
        positions, sizes = list(walk[0]), list(walk[1])
        if not positions or rng.random() < 0.3:
            pieces = [random_piece(rng, size, null=False) for _ in range(max(n, lengths[1]))]
            positions = [p for p, _ in pieces[:n]]
            sizes = [length for _, length in pieces[: lengths[1]]]
        elif rng.random() < 0.3:
            at = rng.randrange(len(positions))
            positions[at], sizes[at] = random_piece(rng, size, null=False)
        return name, (buf, hostile_array(rng, positions), hostile_array(rng, sizes))
    keys = [random_piece(rng, size) for _ in range(max(lengths[2:6]))]
    values = [random_piece(rng, size) for _ in range(max(lengths[2:6]))]
    key_pos = [p for p, _ in keys[: lengths[2]]]
    key_len = [length for _, length in keys[: lengths[3]]]
    value_pos = [p for p, _ in values[: lengths[4]]]
    value_len = [length for _, length in values[: lengths[5]]]
    offsets = [rng.choice([rng.randrange(2**40), *INT64_EXTREMES]) for _ in range(lengths[0])]
    timestamps = [rng.choice([-1, 1500000000000, *INT64_EXTREMES]) for _ in range(lengths[1])]
    if name == "digest_stream":
        cols = [offsets, timestamps, key_pos, key_len, value_pos, value_len]
        return name, (buf, [hostile_array(rng, c) for c in cols], rng.random() < 0.5)
    types = [rng.choice([0, 1, -1, 2**40]) for _ in range(lengths[6])]
    cols = [offsets, timestamps, types, key_pos, key_len, value_pos, value_len]
    attributes = hostile_array(rng, [rng.choice([0, 0x20, 0xFF]) for _ in range(lengths[7])], np.uint8)
    epoch = rng.choice([-1, 0, 7, 2**31 - 1, -(2**31)]) if rng.random() < 0.95 else rng.choice([2**31, -(2**31) - 1])
    return name, (buf, [hostile_array(rng, c) for c in cols], attributes, epoch)


def legacy_buffer(rng: random.Random) -> bytes:
    """Uncompressed magic 0/1 messages, now and then a compressed one among them."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        records = [r._replace(headers=()) for r in random_records(rng, rng.randint(1, 4))]
        magic = rng.randint(0, 1)
        if rng.random() < 0.15:
            parts.append(legacy.encode_wrapper(records, magic, Compression.GZIP))
        else:
            parts.append(legacy.encode_messages([r._replace(timestamp=max(r.timestamp, -1)) for r in records], magic))
    return b"".join(parts)


def small_case(rng: random.Random) -> tuple[Any, ...]:
    """A legacy segment (damaged now and then, its CRCs made right again for half of those) at a base offset at,
    below or far below its first offset, and the options the whole conversion reads."""
    buf = legacy_segment(rng)
    if rng.random() < 0.3:
        buf = damage(rng, buf)
        if rng.random() < 0.5:
            buf = legacy_crcs_fixed(buf)
    first = struct.unpack_from(">q", buf, 0)[0] if len(buf) >= 8 else 0
    base = rng.choice([0, first, first, first, first, first + 1, max(first - 2**31, 0), -1, 2**63 - 1])
    options = ConvertOptions(
        timestamps=rng.choice(list(TimestampPolicy)),
        partition_leader_epoch=rng.choice([-1, 0, 7, 2**31 - 1]),
        tombstone_flag=rng.random() < 0.3,
        index_interval_bytes=rng.choice([1, 50, 4096]),
        max_message_bytes=rng.choice([60, *[1_048_588] * 4]),
        max_segment_bytes=rng.choice([*[None] * 5, 200]),
    )
    return buf, base, options, rng.choice([1_500_000_000_000, 0, -5, 2**40])


def legacy_segment(rng: random.Random) -> bytes:
    """A legacy segment: uncompressed magic 0/1 messages whose offsets increase from a random start (the odd one
    repeated), now and then a compressed one among them."""
    offset = rng.choice([0, 1000, 2**40, 2**62])
    parts = []
    for _ in range(rng.randint(1, 6)):
        records = []
        for r in random_records(rng, rng.randint(1, 4)):
            offset += 1 if rng.random() < 0.97 else 0
            records.append(r._replace(offset=offset, headers=(), timestamp=max(r.timestamp, -1)))
        magic = rng.randint(0, 1)
        if rng.random() < 0.1:
            parts.append(legacy.encode_wrapper(records, magic, Compression.GZIP))
        else:
            parts.append(legacy.encode_messages(records, magic))
    return b"".join(parts)


def v2_crcs_fixed(buf: bytes) -> bytes:
    """Every whole v2 batch's CRC-32C computed again, so damage inside a batch gets past its checksum."""
    out = bytearray(buf)
    for at, size in zip(*_walk_or_nothing(buf)):
        if size >= v2.RECORD_BATCH_OVERHEAD and out[at + 16] == v2.MAGIC:
            struct.pack_into(">I", out, at + 17, _crc32c.crc32c(bytes(out[at + 21 : at + size])))
    return bytes(out)


def legacy_crcs_fixed(buf: bytes) -> bytes:
    """Every whole legacy message's CRC-32 computed again, so damage inside a message gets past its checksum."""
    out = bytearray(buf)
    for at, size in zip(*_walk_or_nothing(buf)):
        if size >= 17 and out[at + 16] < 2:
            struct.pack_into(">I", out, at + 12, zlib.crc32(out[at + 16 : at + size]))
    return bytes(out)


def index_case(rng: random.Random, lengths: list[int]) -> tuple[Any, ...]:
    """Batches (sizes, last offsets, max timestamps), an interval and a carried state: mostly what a segment gives,
    now and then negative sizes, int64 extremes, a state whose last entry is past its valid bytes."""
    sizes = [rng.choice([0, 61, 70, 200, 4000, rng.randrange(1, 600)]) for _ in range(lengths[0])]
    if sizes and rng.random() < 0.08:
        sizes[rng.randrange(len(sizes))] = rng.choice([-1, 2**62, 2**63 - 1, -(2**63)])
    lasts = sorted(rng.randrange(0, 2**40) for _ in range(lengths[1]))
    maxes = [rng.choice([-1, 0, 1500000000000 + rng.randrange(1000), 2**63 - 1, -(2**63)]) for _ in range(lengths[2])]
    interval = rng.choice([0, 1, 100, 4096, 4096, -1, 2**63 - 1, -(2**63), rng.randrange(1, 10**6)])
    valid = rng.choice([0, 0, 100, 5000, 2**62, 2**63 - 1, -1, rng.randrange(0, 10**6)])
    last_entry = rng.choice([0, valid, valid + 1, max(valid - 4000, 0), -1])
    max_ts = rng.choice([-1, 1500000000000, 2**63 - 1])
    state = [valid, last_entry, max_ts, rng.choice([-1, 0, 12345]), rng.choice([-1, max_ts, 2**63 - 1])]
    if rng.random() < 0.02:
        state[rng.randrange(5)] = rng.choice([2**63, -(2**63) - 1])
    cols = [hostile_array(rng, sizes), hostile_array(rng, lasts), hostile_array(rng, maxes)]
    return cols, interval, state


def _walk_or_nothing(buf: bytes) -> tuple[list[int], list[int]]:
    try:
        positions, consumed = walk_positions(buf)
    except CorruptRecordError:
        return [], []
    p = positions.tolist()
    return p, [b - a for a, b in zip(p, [*p[1:], consumed])]


# --- running --------------------------------------------------------------------------------------------------------


def run_case(c: ModuleType, seed: int, index: int) -> tuple[str, str, str]:
    """(function, outcome, detail) of case ``index``; outcome 'MISMATCH' if the accelerator and reference disagree."""
    name, args = random_case(random.Random(f"{seed}:{index}"))
    try:
        return name, CHECKERS[name](c, *args), ""
    except Mismatch as exc:
        return name, "MISMATCH", str(exc)


@dataclass
class Report:
    outcomes: Counter = field(default_factory=Counter)
    mismatches: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())


def fuzz(c: ModuleType, cases: int, seed: int, max_seconds: float | None = None, verbose: bool = False) -> Report:
    report = Report()
    start = time.perf_counter()
    for i in range(cases):
        if verbose:
            print(f"case {i}", file=sys.stderr, flush=True)
        name, outcome, detail = run_case(c, seed, i)
        report.outcomes[f"{name}: {outcome}"] += 1
        if outcome == "MISMATCH":
            report.mismatches.append({"case": i, "function": name, "error": detail})
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    report.seconds = time.perf_counter() - start
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="number of cases (default 100000)")
    parser.add_argument("--seed", type=int, default=1, help="seed; case i is derived from (seed, i) alone")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--replay", type=int, default=None, help="run only this case and show its arguments")
    parser.add_argument("--verbose", action="store_true", help="print each case number before running it")
    parser.add_argument("--show", type=int, default=5, help="mismatching cases to print (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    c = accel.speedups
    if c is None:
        print(f"the C accelerator is not in use: {accel.status().reason}", file=sys.stderr)
        return 2
    if args.replay is not None:
        name, call = random_case(random.Random(f"{args.seed}:{args.replay}"))
        print(f"case {args.replay}: {name}{tuple(call)!r}"[:2000])
        print(run_case(c, args.seed, args.replay))
        return 0
    report = fuzz(c, args.cases, args.seed, args.max_seconds, args.verbose)
    if args.json:
        print(
            json.dumps(
                {
                    "cases": report.cases,
                    "seconds": round(report.seconds, 3),
                    "seed": args.seed,
                    "outcomes": dict(report.outcomes),
                    "mismatches": report.mismatches[: args.show],
                    "mismatchCount": len(report.mismatches),
                }
            )
        )
    else:
        print(f"{report.cases} cases in {report.seconds:.1f} s (seed {args.seed}), no crash")
        for key, count in sorted(report.outcomes.items()):
            print(f"  {count:8d}  {key}")
        for m in report.mismatches[: args.show]:
            print(f"\nmismatch: case {m['case']} ({m['function']}): {m['error']}")
            print(f"  replay: python {sys.argv[0]} --seed {args.seed} --replay {m['case']}")
    return 1 if report.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
