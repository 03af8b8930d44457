"""What ``kafka-log-migrate dump`` prints: pure functions from file bytes and decoded entries to output lines.

Log segments (``.log``): one view per log entry (``EntryView``), rendered two ways:

- text with the field names and order of Kafka's ``kafka-dump-log.sh`` (``DumpLogSegments``, Kafka 3.3+), so an
  operator reads our output the way they read Kafka's;
- JSON objects with the keys of the Kafka oracle's ``dump`` (``batch``, ``record``, ``trailing``, ``error`` lines),
  so our view of a file and Kafka's can be diffed line by line.

Like Kafka's tool, a damaged entry does not end the dump: an entry whose size field still delimits it (a CRC
mismatch, undecodable compressed data, offsets out of order) is printed with ``isvalid: false`` and reading goes on
after it. Only an entry header Kafka's own reader throws on (a size below 14, an unknown magic) stops the file.

Index files (``.index``, ``.timeindex``): their entries as DumpLogSegments prints them, its checks against the
``.log`` beside them (``--verify-index-only``), and a sanity check (``--index-sanity-check``) that names every bad
entry where Kafka's only says that the file is corrupt.

Every uncompressed legacy message is its own log entry (Kafka's FileLogInputStream yields one batch per message),
although the reader groups consecutive ones into a ``LegacyRun``; ``entry_views`` splits them again.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath
from typing import Any

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.batch import V2Batch
from migrate.format.checksums import crc32, crc32c
from migrate.format.entries import HEADER_SIZE_UP_TO_MAGIC, MIN_ENTRY_SIZE, Entry, Tail, read_entries
from migrate.format.records import NO_TIMESTAMP, Compression, Header, RecordColumns, TimestampType

NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
RECORD_INDENT = "|"

# TimestampType.toString() in Kafka's Java client, which DumpLogSegments prints as the timestamp's label
TIMESTAMP_LABELS = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}

# Kafka's ControlRecordType ids (the type int16 in a control record's key)
CONTROL_RECORD_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VOTERS",
    6: "KRAFT_VERSION",
}
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_OFFSET_AND_SIZE = struct.Struct(">qi")
_V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes of a v2 batch header, log overhead included
_LEGACY_HEADER = {0: struct.Struct(">qiIbb"), 1: struct.Struct(">qiIbbq")}  # offset, size, crc, magic, attributes[, ts]
_TIMESTAMP_TYPES = {t.value: t for t in TimestampType}
# what the reader raises for bytes it cannot take as an entry (named apart: neither is a subclass of the other)
ReadError = CorruptRecordError | UnsupportedFormatError
READ_ERRORS = (CorruptRecordError, UnsupportedFormatError)


@dataclass(frozen=True, slots=True)
class RecordView:
    """One record as Kafka's deep iteration reports it (absolute offset, effective timestamp)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE  # v2: base sequence + offset delta, -1 without an idempotent producer
    crc: int | None = None  # legacy: the (inner) message's own CRC-32; None for v2
    valid: bool = True  # legacy: the message's own CRC holds (Kafka's Record.isValid); always true for v2


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ is twice as slow, and there is one per entry
class EntryView:
    """One log entry (a v2 batch, a legacy compressed wrapper or an uncompressed legacy message) with the fields
    DumpLogSegments and the oracle print; ``records`` decodes its records on demand (only deep iteration needs
    them)."""

    position: int
    base_offset: int | None  # None: a legacy entry whose records could not be read (Kafka's baseOffset() throws)
    last_offset: int
    magic: int
    compression: Compression | None  # None: an unknown magic byte, nothing past the size field is readable
    timestamp_type: TimestampType
    max_timestamp: int
    size: int  # including the 12-byte offset+size prefix
    crc: int | None  # as stored in the entry, whether it holds or not; None: unknown magic
    count: int  # v2: the header's record count; legacy: the records read
    records: Callable[[], Iterator[RecordView]]
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    partition_leader_epoch: int = -1
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None
    decoded: bool = True  # False: only the header could be read, ``records`` yields nothing

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset - self.base_offset_or_last)

    @property
    def base_offset_or_last(self) -> int:
        return self.last_offset if self.base_offset is None else self.base_offset


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """What the reader made of a segment's bytes: the complete entries up to the first corrupt one (if any)."""

    entries: list[Entry]
    tail: Tail | None  # a partial last entry (crash residue)
    error: ReadError | None  # the first bad entry (corrupt or unsupported); ``entries`` stops before it


@dataclass(frozen=True, slots=True)
class ValidRun:
    """Consecutive entries that read cleanly; their positions are relative to file byte ``base``."""

    base: int
    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class InvalidEntry:
    """An entry Kafka's reader would still return (its size field delimits it) but that does not check out."""

    view: EntryView
    error: ReadError  # position in the file; no path (the command adds it)


LogPart = ValidRun | InvalidEntry


@dataclass(frozen=True, slots=True)
class LogRead:
    """Every entry of a log file in file order, the invalid ones included, and how the file ends."""

    parts: list[LogPart]
    tail: Tail | None  # a partial last entry (crash residue), position in the file
    error: ReadError | None  # an entry header Kafka's reader throws on: nothing after it was read

    @property
    def invalid(self) -> list[InvalidEntry]:
        return [p for p in self.parts if isinstance(p, InvalidEntry)]

    def views(self) -> Iterator[tuple[EntryView, ReadError | None]]:
        """(view, None) for each valid entry and (view, why) for each invalid one, in file order."""
        for part in self.parts:
            if isinstance(part, InvalidEntry):
                yield part.view, part.error
            else:
                for view in entry_views(part.entries, part.base):
                    yield view, None


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: producer sequences wrap from 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def read_segment_bytes(buf: bytes | memoryview) -> SegmentRead:
    """Decode ``buf`` (a whole segment, from byte 0), keeping every entry before the first corrupt one.

    ``read_entries`` raises for the whole buffer, so on an error the bytes before the reported entry are read
    again; the loop finds the earliest error when a vectorized check reported a later one first.
    """
    view = memoryview(buf)
    end = len(view)
    error: ReadError | None = None
    while True:
        try:
            entries = read_entries(view[:end], final=error is None)
        except READ_ERRORS as exc:
            error = exc
            # every error read_entries raises names the start of the entry; the guard only prevents a loop
            end = exc.position if exc.position is not None and exc.position < end else 0
            continue
        return SegmentRead(entries.items, entries.tail, error)


def read_log(buf: bytes | memoryview, base_offset: int | None = None) -> LogRead:
    """Read a whole log file the way DumpLogSegments walks it: past every entry whose size field is usable.

    Offsets must still increase across an invalid entry (``read_entries`` checks within what it is given), so the
    first entry read after one is compared with the last offset before it. With ``base_offset`` (from the file
    name), an entry outside base..base+2^31-1 is invalid too: Kafka's LogSegment cannot index it.
    """
    view = memoryview(buf)
    end = len(view)
    parts: list[LogPart] = []
    pos = 0
    last_offset: int | None = None
    while True:
        read = read_segment_bytes(view[pos:])
        entries, error, tail = read.entries, read.error, read.tail
        found = _out_of_order(entries, last_offset) or _out_of_range(entries, base_offset)
        if found is not None:
            at, reason, offset = found
            entries = read_segment_bytes(view[pos : pos + at]).entries if at else []
            error, tail = CorruptRecordError(reason, position=at, offset=offset), None
        if entries:
            parts.append(ValidRun(pos, entries))
            last_offset = entries[-1].last_offset
        if error is None:
            return LogRead(parts, _shifted_tail(tail, pos), None)
        error = _shifted(error, pos)
        bad = invalid_entry(view, error) if error.position is not None else None
        if bad is None:
            return LogRead(parts, None, error)
        parts.append(bad)
        if bad.view.decoded:
            last_offset = bad.view.last_offset if last_offset is None else max(last_offset, bad.view.last_offset)
        pos = bad.view.position + bad.view.size
        if pos >= end:
            return LogRead(parts, None, None)


def _out_of_order(entries: list[Entry], last_offset: int | None) -> tuple[int, str, int] | None:
    """(position, reason, offset) if the first entry does not follow ``last_offset`` (the reader checks the rest)."""
    if not entries or last_offset is None:
        return None
    first = entries[0].first_offset
    if first > last_offset:
        return None
    return 0, f"offset {first} does not increase on the previous entry's last offset {last_offset}", first


def _out_of_range(entries: list[Entry], base_offset: int | None) -> tuple[int, str, int] | None:
    """(position, reason, offset) of the first entry with an offset outside base..base+2^31-1, if any."""
    if base_offset is None:
        return None
    top = base_offset + INT32_MAX
    for item in entries:
        if isinstance(item, legacy.LegacyRun):
            offsets = item.records.offsets
            outside = (offsets < base_offset) | (offsets > top)
            if not outside.any():
                continue
            j = int(np.argmax(outside))
            position, offset = int(item.positions[j]), int(offsets[j])
        else:
            first, last = item.first_offset, item.last_offset
            if base_offset <= first and last <= top:
                continue
            position, offset = item.first_position, first if first < base_offset else last
        reason = (
            f"offset {offset} is outside the segment's offsets {base_offset}..{top} (the base offset in its file "
            "name + 2^31-1): Kafka's offset index cannot hold it"
        )
        return position, reason, offset
    return None


def invalid_entry(buf: memoryview, error: ReadError) -> InvalidEntry | None:
    """The entry at ``error.position`` as Kafka's tool prints a bad one, or None when Kafka's reader would throw.

    Kafka iterates the records of an entry whose CRC fails (``isvalid: false``, then its records), so the entry is
    decoded from a copy carrying the CRC its bytes have; what cannot be decoded even so is shown by its header.
    """
    at = error.position
    if at is None or at + HEADER_SIZE_UP_TO_MAGIC > len(buf):
        return None
    _, size = _OFFSET_AND_SIZE.unpack_from(buf, at)
    total = legacy.LOG_OVERHEAD + size
    magic = buf[at + legacy.MAGIC_OFFSET]
    if size < MIN_ENTRY_SIZE or at + total > len(buf):
        return None
    raw = bytearray(buf[at : at + total])
    if magic > v2.MAGIC:
        return InvalidEntry(_unknown_magic_view(raw, at), error)
    if magic == v2.MAGIC:
        crc_at, covered = v2.CRC_OFFSET, v2.ATTRIBUTES_OFFSET
        computed = crc32c(memoryview(raw)[covered:]) if total >= v2.RECORD_BATCH_OVERHEAD else None
    else:
        crc_at, covered = legacy.CRC_OFFSET, legacy.MAGIC_OFFSET
        computed = crc32(memoryview(raw)[covered:])
    (stored,) = _UINT32.unpack_from(raw, crc_at)
    if computed is not None:
        _UINT32.pack_into(raw, crc_at, computed)
    view = _decoded_view(raw, at, stored, crc_ok=computed == stored) or _wrapper_with_bad_inner(raw, at)
    view = view or _header_view(raw, at)
    if view is None:
        return None
    view.crc = stored  # Kafka prints the checksum the entry carries, not the one its bytes have
    return InvalidEntry(view, error)


def _decoded_view(raw: bytearray, at: int, stored_crc: int, crc_ok: bool) -> EntryView | None:
    try:
        items = read_entries(raw).items
        views = list(entry_views(items, at))
    except (*READ_ERRORS, ValueError):  # ValueError: a field no enum knows, e.g. an unknown codec id
        return None
    if len(views) != 1:
        return None
    view = views[0]
    if not crc_ok and view.magic < 2 and view.compression == Compression.NONE:
        # an uncompressed legacy message is its own record: Kafka reports that record's CRC and isValid: false
        view.records = partial(_failed_records, view.records, stored_crc)
    return view


def _failed_records(records: Callable[[], Iterator[RecordView]], stored_crc: int) -> Iterator[RecordView]:
    for record in records():
        yield dataclasses.replace(record, crc=stored_crc, valid=False)


def _wrapper_with_bad_inner(raw: bytearray, at: int) -> EntryView | None:
    """A legacy compressed wrapper whose inner messages decompress but fail their own CRC: Kafka iterates them
    anyway (each record ``isValid: false``), so they are decoded from a copy carrying the CRCs their bytes have."""
    magic = raw[legacy.MAGIC_OFFSET]
    if magic == v2.MAGIC or len(raw) < legacy.RECORD_OVERHEAD[magic] + legacy.LOG_OVERHEAD:
        return None
    header = _LEGACY_HEADER[magic]
    offset, _, _, _, attributes, *stamp = header.unpack_from(raw)
    timestamp = stamp[0] if stamp else NO_TIMESTAMP
    codec = attributes & legacy.CODEC_MASK
    key_length_at = legacy.KEY_LENGTH_OFFSET[magic]
    (key_length,) = _INT32.unpack_from(raw, key_length_at)
    value_length_at = key_length_at + 4 + max(key_length, 0)
    if codec not in (1, 2, 3) or value_length_at + 4 > len(raw):
        return None
    try:
        inner = bytearray(codecs.decompress(codec, memoryview(raw)[value_length_at + 4 :], magic))
        stored, ok, end = _patch_inner_crcs(inner)
        cols = legacy._decode_inner_set(bytes(inner[:end]), magic, attributes & 0xFF, offset, timestamp)
    except READ_ERRORS:
        return None
    if len(cols) != len(stored):
        return None
    return EntryView(
        position=at,
        base_offset=int(cols.offsets[0]),
        last_offset=offset,
        magic=magic,
        compression=Compression(codec),
        timestamp_type=legacy.timestamp_type_of(magic, attributes),
        max_timestamp=timestamp,
        size=len(raw),
        crc=0,  # set by the caller
        count=len(cols),
        records=partial(_inner_records, cols, stored, ok),
    )


def _patch_inner_crcs(inner: bytearray) -> tuple[list[int], list[bool], int]:
    """Each complete inner message's stored CRC and whether it holds, and where the complete messages end; ``inner``
    is given the CRCs its bytes have. Like Kafka's inner iteration, a message running past the end ends the set."""
    stored: list[int] = []
    ok: list[bool] = []
    pos = 0
    while pos + HEADER_SIZE_UP_TO_MAGIC <= len(inner):
        _, size = _OFFSET_AND_SIZE.unpack_from(inner, pos)
        end = pos + legacy.LOG_OVERHEAD + size
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(f"inner message at inner byte {pos} has bad size {size}")  # Kafka throws too
        if end > len(inner):
            break
        (crc,) = _UINT32.unpack_from(inner, pos + legacy.CRC_OFFSET)
        computed = crc32(memoryview(inner)[pos + legacy.MAGIC_OFFSET : end])
        _UINT32.pack_into(inner, pos + legacy.CRC_OFFSET, computed)
        stored.append(crc)
        ok.append(crc == computed)
        pos = end
    return stored, ok, pos


def _inner_records(cols: RecordColumns, stored: list[int], ok: list[bool]) -> Iterator[RecordView]:
    for i in range(len(cols)):
        yield RecordView(
            int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i), crc=stored[i], valid=ok[i]
        )


def _unknown_magic_view(raw: bytearray, at: int) -> EntryView:
    """An entry with a magic byte no Kafka knows: Kafka's reader still steps over it by its size field (and prints
    the magic as a signed byte), but no other field can be read."""
    offset, _ = _OFFSET_AND_SIZE.unpack_from(raw)
    magic = struct.unpack_from(">b", raw, legacy.MAGIC_OFFSET)[0]
    return EntryView(
        position=at,
        base_offset=None,
        last_offset=offset,
        magic=magic,
        compression=None,
        timestamp_type=TimestampType.NO_TIMESTAMP_TYPE,
        max_timestamp=NO_TIMESTAMP,
        size=len(raw),
        crc=None,
        count=0,
        records=_no_records,
        decoded=False,
    )


def _header_view(raw: bytearray, at: int) -> EntryView | None:
    """The fields of an entry's header alone (its records could not be read), or None if even that fails."""
    magic = raw[legacy.MAGIC_OFFSET]
    try:
        if magic == v2.MAGIC:
            if len(raw) < v2.RECORD_BATCH_OVERHEAD:
                return None
            base, _, ple, _, crc, attributes, delta, base_ts, max_ts, pid, epoch, base_seq, count = (
                _V2_HEADER.unpack_from(raw)
            )
            fields = (base, ple, crc, attributes & 0xFFFF, delta, base_ts, max_ts, pid, epoch, base_seq, count)
            batch = V2Batch(at, len(raw), *fields)
            view = _batch_view(batch)
            view.decoded = False
            return view
        header = _LEGACY_HEADER[magic]
        if len(raw) < header.size:
            return None
        offset, _, crc, _, attributes = header.unpack_from(raw)[:5]
        timestamp = header.unpack_from(raw)[5] if magic == 1 else NO_TIMESTAMP
        return EntryView(
            position=at,
            base_offset=None,
            last_offset=offset,
            magic=magic,
            compression=Compression(attributes & legacy.CODEC_MASK),
            timestamp_type=legacy.timestamp_type_of(magic, attributes),
            max_timestamp=timestamp,
            size=len(raw),
            crc=crc,
            count=0,
            records=_no_records,
            decoded=False,
        )
    except ValueError:  # a codec id no Kafka knows: Kafka's reader throws on this entry too
        return None


def _no_records() -> Iterator[RecordView]:
    return iter(())


def _shifted(error: ReadError, by: int) -> ReadError:
    if by == 0 or error.position is None:
        return error
    return type(error)(error.reason, position=error.position + by, offset=error.offset, hint=error.hint)


def _shifted_tail(tail: Tail | None, by: int) -> Tail | None:
    return None if tail is None else Tail(tail.position + by, tail.size, tail.reason)


def entry_views(items: Iterable[Entry], base: int = 0) -> Iterator[EntryView]:
    """One view per log entry, in file order (positions: as in the decoded buffer, plus ``base``)."""
    for item in items:
        if isinstance(item, legacy.LegacyRun):
            yield from _run_views(item, base)
        elif isinstance(item, legacy.LegacyWrapper):
            yield _wrapper_view(item, base)
        else:
            yield _batch_view(item, base)


def _run_views(run: legacy.LegacyRun, base: int = 0) -> Iterator[EntryView]:
    cols = run.records
    # plain lists: indexing numpy arrays element by element costs more than the rest of a shallow dump
    positions, sizes, magics, crcs = (a.tolist() for a in (run.positions, run.sizes, run.magics, run.crcs))
    offsets, timestamps = cols.offsets.tolist(), cols.timestamps.tolist()
    types = [_TIMESTAMP_TYPES[t] for t in run.timestamp_types().tolist()]
    for j in range(len(positions)):
        yield EntryView(
            position=base + positions[j],
            base_offset=offsets[j],
            last_offset=offsets[j],
            magic=magics[j],
            compression=Compression.NONE,
            timestamp_type=types[j],
            max_timestamp=timestamps[j],
            size=sizes[j],
            crc=crcs[j],
            count=1,
            records=partial(_run_record, run, j),
        )


def _run_record(run: legacy.LegacyRun, j: int) -> Iterator[RecordView]:
    cols = run.records
    yield RecordView(int(cols.offsets[j]), int(cols.timestamps[j]), cols.key(j), cols.value(j), crc=int(run.crcs[j]))


def _wrapper_view(wrapper: legacy.LegacyWrapper, base: int = 0) -> EntryView:
    return EntryView(
        position=base + wrapper.position,
        base_offset=int(wrapper.records.offsets[0]),
        last_offset=wrapper.offset,
        magic=wrapper.magic,
        compression=wrapper.compression,
        timestamp_type=wrapper.timestamp_type,
        max_timestamp=wrapper.timestamp,
        size=wrapper.size,
        crc=wrapper.crc,
        count=len(wrapper.records),
        records=partial(_wrapper_records, wrapper),
    )


def _wrapper_records(wrapper: legacy.LegacyWrapper) -> Iterator[RecordView]:
    cols = wrapper.records
    for i in range(len(cols)):
        crc = inner_message_crc(cols, i, wrapper.magic)
        yield RecordView(int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i), crc=crc)


def inner_message_crc(cols: RecordColumns, i: int, wrapper_magic: int) -> int | None:
    """The stored CRC-32 of a wrapper's ``i``-th inner message (Kafka prints it per record).

    The reader keeps no inner CRCs, so the message start is found back from where its key length sits (its offset
    from the start depends on the inner magic, normally the wrapper's); the candidate whose CRC checks is the one.
    """
    buf = cols.buffer
    key_length_at = int(cols.key_pos[i]) - 4
    message_end = int(cols.value_pos[i]) + max(int(cols.value_len[i]), 0)
    for magic in (wrapper_magic, 1 - wrapper_magic):
        start = key_length_at - legacy.KEY_LENGTH_OFFSET[magic]
        if start < 0 or buf[start + legacy.MAGIC_OFFSET] != magic:
            continue
        (stored,) = _UINT32.unpack_from(buf, start + legacy.CRC_OFFSET)
        if crc32(memoryview(buf)[start + legacy.MAGIC_OFFSET : message_end]) == stored:
            return int(stored)
    return None


def _batch_view(batch: V2Batch, base: int = 0) -> EntryView:
    return EntryView(
        position=base + batch.position,
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        magic=2,
        compression=batch.compression,
        timestamp_type=batch.timestamp_type,
        max_timestamp=batch.max_timestamp,
        size=batch.size,
        crc=batch.crc,
        count=batch.records_count,
        records=partial(_batch_records, batch),
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,
        delete_horizon_ms=batch.delete_horizon_ms,
    )


def _batch_records(batch: V2Batch) -> Iterator[RecordView]:
    cols = batch.records
    if cols is None:  # a header-only view of a batch that could not be decoded
        return
    headers = cols.headers
    base_sequence = batch.base_sequence
    for i in range(len(cols)):
        offset = int(cols.offsets[i])
        sequence = NO_SEQUENCE if base_sequence < 0 else increment_sequence(base_sequence, offset - batch.base_offset)
        yield RecordView(
            offset,
            int(cols.timestamps[i]),
            cols.key(i),
            cols.value(i),
            headers[i] if headers is not None else (),
            sequence,
        )


# --- text: kafka-dump-log.sh -----------------------------------------------------------------------------------


def segment_base_offset(file_name: str) -> int | None:
    """The base offset in a segment's file name (``00000000000000000100.log`` -> 100), None for other names."""
    stem = file_name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def log_base_offset(file_name: str) -> int | None:
    """The base offset of a segment named as Kafka names them (20 digits + ``.log``); None for other names."""
    stem, _, suffix = file_name.partition(".")
    return int(stem) if suffix == "log" and len(stem) == 20 and stem.isdigit() else None


def header_lines(path: str) -> list[str]:
    """DumpLogSegments' lines before the entries of one file ("Log starting offset" only for a ``.log``)."""
    lines = [f"Dumping {path}"]
    name = PurePath(path).name
    base = segment_base_offset(name)
    if base is not None and name.endswith(".log"):
        lines.append(f"Log starting offset: {base}")
    return lines


def text_lines(read: LogRead, deep: bool = False, print_data: bool = False) -> Iterator[str]:
    """The entry lines of ``kafka-dump-log.sh --files F [--deep-iteration] [--print-data-log]``."""
    deep = deep or print_data  # as in Kafka: printing data implies deep iteration
    for entry, error in read.views():
        yield entry_text(entry, valid=error is None)
        if deep:
            for record in entry.records():
                yield record_text(entry, record, print_data)


def entry_text(entry: EntryView, valid: bool = True) -> str:
    if entry.magic >= 2:
        head = (
            f"baseOffset: {entry.base_offset} lastOffset: {entry.last_offset} count: {entry.count} "
            f"baseSequence: {entry.base_sequence} lastSequence: {entry.last_sequence} "
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"partitionLeaderEpoch: {entry.partition_leader_epoch} isTransactional: {_java(entry.is_transactional)} "
            f"isControl: {_java(entry.is_control)} deleteHorizonMs: {_optional_long(entry.delete_horizon_ms)}"
        )
    else:
        head = f"offset: {entry.last_offset}"
    return (
        f"{head} position: {entry.position} {TIMESTAMP_LABELS[entry.timestamp_type]}: {entry.max_timestamp} "
        f"size: {entry.size} magic: {entry.magic} compresscodec: {_label(entry.compression)} crc: {entry.crc} "
        f"isvalid: {_java(valid)}"
    )


def record_text(entry: EntryView, record: RecordView, print_data: bool = False) -> str:
    line = (
        f"{RECORD_INDENT} offset: {record.offset} {TIMESTAMP_LABELS[entry.timestamp_type]}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)}"
    )
    if entry.magic >= 2:
        line += f" sequence: {record.sequence} headerKeys: [{','.join(name for name, _ in record.headers)}]"
    else:
        # Kafka 3.x prints a stray "}" after the crc here (a typo in DumpLogSegments); it is left out
        line += f" isValid: {_java(record.valid)} crc: {record.crc}"
    if entry.is_control:
        line += control_record_text(record)
    elif print_data:
        line += data_text(record)
    return line


def data_text(record: RecordView) -> str:
    """`` key: K payload: V`` as DumpLogSegments prints them with its default StringDecoder (UTF-8, malformed
    bytes replaced); a null key or value is left out, an empty one is printed empty."""
    text = ""
    if record.key is not None:
        text += f" key: {record.key.decode('utf-8', 'replace')}"
    if record.value is not None:
        text += f" payload: {record.value.decode('utf-8', 'replace')}"
    return text


def control_record_text(record: RecordView) -> str:
    """A control record as DumpLogSegments describes it (snapshot header/footer are not decoded further)."""
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return f" controlType: UNKNOWN(key of {len(key)} bytes)"
    _, type_id = _CONTROL_KEY.unpack_from(key)
    name = CONTROL_RECORD_TYPES.get(type_id, "UNKNOWN")
    value = record.value or b""
    if type_id in (0, 1) and len(value) >= _END_TXN_VALUE.size:
        _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {name}({type_id})"


def trailing_text(tail: Tail, file_name: str) -> str:
    return f"Found {tail.size} invalid bytes at the end of {file_name}"


def offset_gaps(read: LogRead) -> list[tuple[int, int]]:
    """(previous, next) for every record whose offset is not the previous one + 1: what DumpLogSegments reports as
    "Non-consecutive offsets" under deep iteration (compaction leaves such gaps; they are not damage)."""
    columns: list[np.ndarray] = []
    for part in read.parts:
        if isinstance(part, InvalidEntry):
            columns.append(np.array([r.offset for r in part.view.records()], np.int64))
        else:
            columns += [item.records.offsets for item in part.entries if item.records is not None]
    if not columns:
        return []
    offsets = np.concatenate(columns)
    at = np.flatnonzero(np.diff(offsets) != 1)
    return list(zip(offsets[at].tolist(), offsets[at + 1].tolist()))


def _label(compression: Compression | None) -> str:
    return "unknown" if compression is None else compression.label


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _optional_long(value: int | None) -> str:
    """java.util.OptionalLong.toString(), which is how Kafka prints deleteHorizonMs."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


# --- JSON: the Kafka oracle's dump schema ------------------------------------------------------------------------


def json_lines(read: LogRead, deep: bool = True, with_data: bool = False) -> Iterator[dict[str, Any]]:
    """``batch`` lines (each followed by its ``record`` lines when ``deep``) in the oracle's key order;
    ``with_data`` adds the oracle's ``--hex`` fields (``key_hex``, ``value_hex``, header values in hex)."""
    for entry, error in read.views():
        yield batch_json(entry, error)
        if deep or with_data:
            for record in entry.records():
                yield record_json(record, with_data)


def batch_json(entry: EntryView, error: ReadError | None = None) -> dict[str, Any]:
    return {
        "type": "batch",
        "position": entry.position,
        "baseOffset": entry.base_offset,
        "lastOffset": entry.last_offset,
        "magic": entry.magic,
        "compression": None if entry.compression is None else entry.compression.label,
        "timestampType": entry.timestamp_type.name,
        "maxTimestamp": entry.max_timestamp,
        "sizeInBytes": entry.size,
        "crc": entry.crc,
        "records": entry.count if entry.decoded else 0,  # the oracle counts the records Kafka could iterate
        "producerId": entry.producer_id,
        "producerEpoch": entry.producer_epoch,
        "baseSequence": entry.base_sequence,
        "isTransactional": entry.is_transactional,
        "isControl": entry.is_control,
        "partitionLeaderEpoch": entry.partition_leader_epoch,
        "valid": error is None,
        "error": None if error is None else error.reason,
    }


def record_json(record: RecordView, with_data: bool = False) -> dict[str, Any]:
    headers: list[list[str | None]] = []
    for name, value in record.headers:
        pair = [name, _sha256(value)]
        if with_data:
            pair.append(None if value is None else value.hex())
        headers.append(pair)
    line: dict[str, Any] = {
        "type": "record",
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keyNull": record.key is None,
        "keySize": _size(record.key),
        "key_sha256": _sha256(record.key),
        "valueNull": record.value is None,
        "valueSize": _size(record.value),
        "value_sha256": _sha256(record.value),
        "headers": headers,
        "valid": record.valid,
    }
    if with_data:
        line["key_hex"] = None if record.key is None else record.key.hex()
        line["value_hex"] = None if record.value is None else record.value.hex()
    return line


def trailing_json(tail: Tail) -> dict[str, Any]:
    return {"type": "trailing", "position": tail.position, "bytes": tail.size, "valid": False, "error": tail.reason}


def error_json(error: ReadError, file_size: int) -> dict[str, Any]:
    """Where reading stopped and why; like the oracle's message, it does not name the file (the position does)."""
    position = error.position or 0
    reason = error.reason if error.offset is None else f"{error.reason} (offset {error.offset})"
    return {"type": "error", "position": position, "bytes": file_size - position, "valid": False, "error": reason}


def file_json(path: str, file_size: int) -> dict[str, Any]:
    return {"type": "file", "path": path, "bytes": file_size}


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


# --- index files: .index and .timeindex ---------------------------------------------------------------------------

OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position in the .log
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relative offset

# DumpLogSegments' headings for the problems it reports on stderr after all files (ours name the file the same way)
OFFSET_MISMATCH = "Mismatches in :"
TIME_MISMATCH = "Found timestamp mismatch in :"
TIME_OUT_OF_ORDER = "Found out of order timestamp in :"
NOT_FOUND = "The following indexed offsets are not found in the log :"
CORRUPT = "Corrupt index entries in :"  # ours: what Kafka's sanityCheck would throw on, and more, entry by entry


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    entry: int  # slot number, from 0 (Kafka's OffsetIndex.entry(n))
    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeEntry:
    entry: int
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """One thing wrong with an index file, naming the entry (slot number and byte in the index file)."""

    heading: str  # which of DumpLogSegments' groups it is reported under
    entry: int | None  # None: the file as a whole
    byte: int  # where in the index file
    text: str  # one line; names the entry


def offset_index_entries(data: bytes, base_offset: int) -> list[OffsetEntry]:
    """The entries DumpLogSegments prints: ``len // 8`` slots (Kafka ignores a cut last entry), up to the first slot
    after slot 0 that holds the base offset (the zero-filled preallocated rest of an active segment's index)."""
    entries = []
    for i in range(len(data) // OFFSET_INDEX_ENTRY.size):
        relative, position = OFFSET_INDEX_ENTRY.unpack_from(data, i * OFFSET_INDEX_ENTRY.size)
        if relative == 0 and i > 0:
            break
        entries.append(OffsetEntry(i, base_offset + relative, position))
    return entries


def time_index_entries(data: bytes, base_offset: int) -> list[TimeEntry]:
    """The entries DumpLogSegments prints: ``len // 12`` slots, up to the first slot after slot 0 that holds the
    base offset (zero-filled preallocated space)."""
    entries = []
    for i in range(len(data) // TIME_INDEX_ENTRY.size):
        timestamp, relative = TIME_INDEX_ENTRY.unpack_from(data, i * TIME_INDEX_ENTRY.size)
        if relative == 0 and i > 0:
            break
        entries.append(TimeEntry(i, timestamp, base_offset + relative))
    return entries


def offset_index_text(entry: OffsetEntry) -> str:
    return f"offset: {entry.offset} position: {entry.position}"


def time_index_text(entry: TimeEntry) -> str:
    return f"timestamp: {entry.timestamp} offset: {entry.offset}"


def offset_index_json(entry: OffsetEntry) -> dict[str, Any]:
    return {"type": "index", "entry": entry.entry, "offset": entry.offset, "position": entry.position}


def time_index_json(entry: TimeEntry) -> dict[str, Any]:
    return {"type": "timeindex", "entry": entry.entry, "timestamp": entry.timestamp, "offset": entry.offset}


def problem_json(problem: IndexProblem) -> dict[str, Any]:
    return {"type": "problem", "entry": problem.entry, "byte": problem.byte, "error": problem.text}


def offset_index_sanity(data: bytes, base_offset: int) -> list[IndexProblem]:
    """What ``--index-sanity-check`` finds in a ``.index``, entry by entry, without reading the log.

    Kafka's OffsetIndex.sanityCheck fails a file whose length is not a multiple of 8 or whose last offset is below
    the base offset. The broker's lookups (a binary search) also need offsets and positions that strictly increase,
    so every entry is held to that too: an index that breaks it sends fetches to the wrong place.
    """
    size = OFFSET_INDEX_ENTRY.size
    problems = _cut_entry(data, size, "offset index")
    previous: tuple[int, int, int] | None = None  # entry, offset, position
    for i in range(_slots_in_use(data, size)):
        relative, position = OFFSET_INDEX_ENTRY.unpack_from(data, i * size)
        offset = base_offset + relative
        where = f"entry {i} at byte {i * size}"
        if relative < 0:
            problems.append(_corrupt(i, size, f"{where}: offset {offset} is below the base offset {base_offset}"))
        if position < 0:
            problems.append(_corrupt(i, size, f"{where}: position {position} is negative"))
        if previous is not None:
            j, previous_offset, previous_position = previous
            if offset <= previous_offset:
                text = f"{where}: offset {offset} does not increase on entry {j}'s offset {previous_offset}"
                problems.append(_corrupt(i, size, text))
            if position <= previous_position:
                text = f"{where}: position {position} does not increase on entry {j}'s position {previous_position}"
                problems.append(_corrupt(i, size, text))
        previous = (i, offset, position)
    return problems


def time_index_sanity(data: bytes, base_offset: int) -> list[IndexProblem]:
    """What ``--index-sanity-check`` finds in a ``.timeindex``, entry by entry, without reading the log.

    Kafka's TimeIndex.sanityCheck fails a file whose length is not a multiple of 12, whose last timestamp is below
    its first or whose last offset is below the base offset. TimeIndex.maybeAppend only ever appends a larger
    timestamp at an offset no smaller than the last, so every entry is held to that as well.
    """
    size = TIME_INDEX_ENTRY.size
    problems = _cut_entry(data, size, "time index")
    previous: tuple[int, int, int] | None = None  # entry, timestamp, offset
    for i in range(_slots_in_use(data, size)):
        timestamp, relative = TIME_INDEX_ENTRY.unpack_from(data, i * size)
        offset = base_offset + relative
        where = f"entry {i} at byte {i * size}"
        if relative < 0:
            problems.append(_corrupt(i, size, f"{where}: offset {offset} is below the base offset {base_offset}"))
        if previous is not None:
            j, previous_timestamp, previous_offset = previous
            if timestamp <= previous_timestamp:
                problems.append(
                    IndexProblem(
                        TIME_OUT_OF_ORDER,
                        i,
                        i * size,
                        f"Index timestamp: {timestamp}, Previously indexed timestamp: {previous_timestamp} "
                        f"({where}, previous: entry {j})",
                    )
                )
            if offset < previous_offset:
                problems.append(
                    _corrupt(i, size, f"{where}: offset {offset} is below entry {j}'s offset {previous_offset}")
                )
        previous = (i, timestamp, offset)
    return problems


def _slots_in_use(data: bytes, size: int) -> int:
    """Complete slots, without a zero-filled preallocated rest (slot 0 always counts: it may hold the base offset at
    position 0, which is all zeros).

    Kafka's dump stops at the first slot after slot 0 whose relative offset is 0; here only where every byte from
    there on is zero, so that one zeroed entry in the middle of an index is reported, not taken for its end.
    """
    slots = len(data) // size
    if slots == 0:
        return 0
    written = len(bytes(data[: slots * size]).rstrip(b"\0"))
    return max(-(-written // size), 1)


def _cut_entry(data: bytes, size: int, what: str) -> list[IndexProblem]:
    cut = len(data) % size
    if not cut:
        return []
    slot = len(data) // size
    return [
        IndexProblem(
            CORRUPT,
            slot,
            slot * size,
            f"entry {slot} at byte {slot * size} is cut: the {what} is {len(data)} bytes, not a multiple of {size} "
            f"({cut} of the entry's {size} bytes are present)",
        )
    ]


def _corrupt(entry: int, size: int, text: str) -> IndexProblem:
    return IndexProblem(CORRUPT, entry, entry * size, text)


@dataclass(frozen=True, slots=True)
class LogLayout:
    """Where each entry of a ``.log`` starts and its last offset: what the index checks compare against."""

    name: str  # the .log's file name, for messages
    size: int  # bytes read
    positions: list[int]
    entries: list[EntryView]

    @classmethod
    def of(cls, name: str, size: int, read: LogRead) -> LogLayout:
        views = [view for view, _ in read.views()]
        return cls(name, size, [v.position for v in views], views)

    def at(self, position: int) -> EntryView | None:
        i = bisect.bisect_left(self.positions, position)
        return self.entries[i] if i < len(self.positions) and self.positions[i] == position else None


def verify_offset_index(entries: list[OffsetEntry], log: LogLayout) -> list[IndexProblem]:
    """DumpLogSegments' offset index check: the entry at each indexed position must have the indexed offset as its
    last offset. A position that is not where an entry starts is reported too (Kafka's tool reads garbage there, or
    throws past the end of the log)."""
    size = OFFSET_INDEX_ENTRY.size
    problems = []
    for e in entries:
        where = f"entry {e.entry} at byte {e.entry * size}"
        entry = log.at(e.position)
        if entry is None:
            if e.position >= log.size:
                text = (
                    f"{where}: offset {e.offset} at position {e.position}, beyond the end of {log.name} "
                    f"({log.size} bytes)"
                )
            else:
                before = bisect.bisect_right(log.positions, e.position) - 1
                start = log.positions[before] if before >= 0 else 0
                text = (
                    f"{where}: offset {e.offset} at position {e.position}, which is not where an entry of {log.name} "
                    f"starts (the entry around it starts at {start})"
                )
            problems.append(IndexProblem(OFFSET_MISMATCH, e.entry, e.entry * size, text))
        elif entry.last_offset != e.offset:
            problems.append(
                IndexProblem(
                    OFFSET_MISMATCH,
                    e.entry,
                    e.entry * size,
                    f"Index offset: {e.offset}, log offset: {entry.last_offset} ({where}, position {e.position})",
                )
            )
    return problems


def verify_time_index(
    entries: list[TimeEntry], offset_entries: list[OffsetEntry], log: LogLayout
) -> list[IndexProblem]:
    """DumpLogSegments' time index check: from the offset index's position for each entry's offset, the first log
    entry whose last offset reaches it must end exactly at that offset, and the largest record timestamp in it must
    be the indexed timestamp. (The order of timestamps is ``time_index_sanity``'s.)"""
    size = TIME_INDEX_ENTRY.size
    indexed = [e.offset for e in offset_entries]
    problems = []
    for e in entries:
        where = f"entry {e.entry} at byte {e.entry * size}"
        slot = bisect.bisect_right(indexed, e.offset) - 1
        start = offset_entries[slot].position if slot >= 0 else 0  # Kafka's OffsetIndex.lookup
        i = bisect.bisect_left(log.positions, start)
        found = next((v for v in log.entries[i:] if v.last_offset >= e.offset), None)
        if found is None or found.last_offset != e.offset:
            log_offset = -1 if found is None else found.last_offset
            text = f"Indexed offset: {e.offset}, found log offset: {log_offset} ({where}, timestamp {e.timestamp})"
            problems.append(IndexProblem(NOT_FOUND, e.entry, e.entry * size, text))
            continue
        max_timestamp = max((r.timestamp for r in found.records()), default=NO_TIMESTAMP)
        if max_timestamp != e.timestamp:
            problems.append(
                IndexProblem(
                    TIME_MISMATCH,
                    e.entry,
                    e.entry * size,
                    f"Index timestamp: {e.timestamp}, log timestamp: {max_timestamp} ({where}, offset {e.offset}, "
                    f"log position {found.position})",
                )
            )
    return problems


def problem_blocks(path: str, problems: list[IndexProblem]) -> list[str]:
    """DumpLogSegments' stderr report for one file: a heading per kind of problem, then its lines indented."""
    lines = []
    in_file_order = sorted(problems, key=lambda p: p.byte)
    for heading in dict.fromkeys(p.heading for p in in_file_order):
        lines.append(f"{heading}{path}")
        lines += [f"  {p.text}" for p in in_file_order if p.heading == heading]
    return lines
