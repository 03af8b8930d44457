"""Reading a log segment the way DumpLogSegments walks it: into runs of entries that read cleanly and the invalid
entries between them, and how the file ends.

Like Kafka's tool, a damaged entry does not end the dump: an entry whose size field still delimits it (a CRC
mismatch, undecodable compressed data, offsets out of order) is kept as an ``InvalidEntry`` (printed with
``isvalid: false``) and reading goes on after it. Only an entry header Kafka's own reader throws on (a size below
14, an unknown magic) stops the file.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.batch import V2Batch
from migrate.format.checksums import crc32, crc32c
from migrate.format.entries import HEADER_SIZE_UP_TO_MAGIC, MIN_ENTRY_SIZE, Entry, Tail, read_entries
from migrate.format.records import NO_TIMESTAMP, Compression, RecordColumns, TimestampType
from migrate.reports.dump.views import INT32_MAX, EntryView, RecordView, batch_view, entry_views, no_records

_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_OFFSET_AND_SIZE = struct.Struct(">qi")  # the log overhead every entry starts with
_LEGACY_HEADERS = {0: legacy.HEADER_V0, 1: legacy.HEADER_V1}  # offset, size, crc, magic, attributes[, timestamp]
# what the reader raises for bytes it cannot take as an entry (named apart: neither is a subclass of the other)
ReadError = CorruptRecordError | UnsupportedFormatError
READ_ERRORS = (CorruptRecordError, UnsupportedFormatError)


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

    def views(self) -> Iterator[tuple[EntryView, ReadError | None]]:
        for view in entry_views(self.entries, self.base):
            yield view, None

    def offsets(self) -> list[np.ndarray]:
        """The record offsets of each entry whose records were decoded."""
        return [item.records.offsets for item in self.entries if item.records is not None]


@dataclass(frozen=True, slots=True)
class InvalidEntry:
    """An entry Kafka's reader would still return (its size field delimits it) but that does not check out."""

    view: EntryView
    error: ReadError  # position in the file; no path (the command adds it)

    def views(self) -> Iterator[tuple[EntryView, ReadError | None]]:
        yield self.view, self.error

    def offsets(self) -> list[np.ndarray]:
        return [np.array([r.offset for r in self.view.records()], np.int64)]


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
            yield from part.views()


def segment_base_offset(file_name: str) -> int | None:
    """The base offset in a segment's file name (``00000000000000000100.log`` -> 100), None for other names."""
    stem = file_name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def log_base_offset(file_name: str) -> int | None:
    """The base offset of a segment named as Kafka names them (20 digits + ``.log``); None for other names."""
    stem, _, suffix = file_name.partition(".")
    return int(stem) if suffix == "log" and len(stem) == 20 and stem.isdigit() else None


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
        first, last = item.first_offset, item.last_offset
        if base_offset <= first and last <= top:
            continue
        if first < base_offset:  # offsets increase within an item, so its first entry is the one
            position, offset = item.first_position, first
        else:  # the first of the item's entries (a legacy run has one per message) to end past the top
            columns = item.batch_columns()
            j = int(np.argmax(columns.last_offsets > top))
            position, offset = int(columns.positions[j]), int(columns.last_offsets[j])
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
    header = _LEGACY_HEADERS[magic]
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
        cols = legacy.decode_inner_set(bytes(inner[:end]), magic, attributes & 0xFF, offset, timestamp)
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
    magic = int.from_bytes(raw[legacy.MAGIC_OFFSET : legacy.MAGIC_OFFSET + 1], "big", signed=True)
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
        records=no_records,
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
                v2.HEADER.unpack_from(raw)
            )
            fields = (base, ple, crc, attributes & 0xFFFF, delta, base_ts, max_ts, pid, epoch, base_seq, count)
            batch = V2Batch(at, len(raw), *fields)
            view = batch_view(batch)
            view.decoded = False
            return view
        header = _LEGACY_HEADERS[magic]
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
            records=no_records,
            decoded=False,
        )
    except ValueError:  # a codec id no Kafka knows: Kafka's reader throws on this entry too
        return None


def _shifted(error: ReadError, by: int) -> ReadError:
    if by == 0 or error.position is None:
        return error
    return type(error)(error.reason, position=error.position + by, offset=error.offset, hint=error.hint)


def _shifted_tail(tail: Tail | None, by: int) -> Tail | None:
    return None if tail is None else Tail(tail.position + by, tail.size, tail.reason)


def offset_gaps(read: LogRead) -> list[tuple[int, int]]:
    """(previous, next) for every record whose offset is not the previous one + 1: what DumpLogSegments reports as
    "Non-consecutive offsets" under deep iteration (compaction leaves such gaps; they are not damage)."""
    columns = [offsets for part in read.parts for offsets in part.offsets()]
    if not columns:
        return []
    offsets = np.concatenate(columns)
    at = np.flatnonzero(np.diff(offsets) != 1)
    return list(zip(offsets[at].tolist(), offsets[at + 1].tolist()))
