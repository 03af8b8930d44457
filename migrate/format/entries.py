"""A buffer of log entries in any mix of formats, walked the way Kafka's FileLogInputStream walks a segment.

::

    every entry: offset => int64 (byte 0), size => int32 (byte 8), ..., magic => int8 (byte 16)

The first 17 bytes of every entry, whatever its format, say how long it is and which parser reads it, so one file
can hold v0, v1 and v2 entries in any order (message.format.version changed while a segment was active). Kafka
stops silently at an incomplete last entry (fewer than 17 header bytes, or fewer bytes than the size declares) and
throws when an entry declares a size below 14. Here the first is a ``Tail`` and the second a CorruptRecordError.

Consecutive uncompressed legacy messages are grouped into one ``LegacyRun`` and decoded column-wise.

Every entry kind answers the same questions for itself (offsets, positions, timestamps, deletes, ``retain``); what
differs by kind, a caller writes as an ``EntryVisitor``.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format import accel, legacy
from migrate.format import batch as v2
from migrate.format.buffers import as_u8
from migrate.format.records import BatchColumns, Record, RecordColumns

HEADER_SIZE_UP_TO_MAGIC = 17
MIN_ENTRY_SIZE = legacy.MIN_MESSAGE_SIZE

Entry = legacy.LegacyRun | legacy.LegacyWrapper | v2.V2Batch
T_co = TypeVar("T_co", covariant=True)


class EntryVisitor(legacy.LegacyVisitor[T_co], v2.V2BatchVisitor[T_co], Protocol[T_co]):
    """What a caller does with each kind of entry, for ``entry.accept(visitor)``: each kind calls its own method, so
    callers never ask an entry what it is (as Kafka's ``RecordBatch`` answers for itself to ``LogSegment``)."""


def records_of(item: Entry) -> RecordColumns:
    """The records of an entry read deep: every legacy entry's, a v2 batch's unless it was decoded with deep=False."""
    if item.records is None:
        raise ValueError(f"the v2 batch at buffer position {item.first_position} was decoded without its records")
    return item.records


_SIZE = struct.Struct(">i")


@dataclass(slots=True)
class Tail:
    """Bytes after the last complete entry: a partial entry, as a crash leaves it."""

    position: int
    size: int
    reason: str


@dataclass(slots=True)
class Entries:
    items: list[Entry] = field(default_factory=list)
    consumed: int = 0  # bytes of complete entries read (relative to the buffer start)
    tail: Tail | None = None

    def records(self) -> Iterator[Record]:
        return iter_records(self.items)

    def batch_columns(self) -> BatchColumns:
        """Every batch of every entry, in order: the one view of batches whatever their format."""
        return BatchColumns.concat([item.batch_columns() for item in self.items])


@dataclass(slots=True)
class Walk:
    """Where each complete entry starts, how long it is and its magic byte: a walk that decodes nothing."""

    positions: np.ndarray
    sizes: np.ndarray  # including the 12-byte log overhead
    magics: np.ndarray
    consumed: int
    tail: Tail | None


def _tail_at(buf: bytes | bytearray | memoryview, pos: int) -> Tail:
    end = len(buf)
    if pos + HEADER_SIZE_UP_TO_MAGIC > end:
        return Tail(pos, end - pos, f"{end - pos} bytes after the last entry, fewer than an entry header")
    offset, size = struct.unpack_from(">qi", buf, pos)
    return Tail(
        pos,
        end - pos,
        f"incomplete entry (offset field {offset}, declared size {size} + 12 header bytes, "
        f"only {end - pos} bytes present)",
    )


def _bad_size(buf: bytes | bytearray | memoryview, pos: int) -> CorruptRecordError:
    (size,) = _SIZE.unpack_from(buf, pos + 8)
    return CorruptRecordError(
        f"entry declares size {size}, below the minimum {MIN_ENTRY_SIZE} (a zero-filled or overwritten region: "
        "Kafka's reader throws here and log recovery truncates the segment at this point)",
        position=pos,
    )


def walk_positions(buf: bytes | bytearray | memoryview) -> tuple[np.ndarray, int]:
    """Start of every complete entry, and where the complete entries end (the reference for the C walk)."""
    end = len(buf)
    positions: list[int] = []
    unpack = _SIZE.unpack_from
    pos = 0
    while pos + HEADER_SIZE_UP_TO_MAGIC <= end:
        (size,) = unpack(buf, pos + 8)
        if size < MIN_ENTRY_SIZE:
            raise _bad_size(buf, pos)
        nxt = pos + 12 + size
        if nxt > end:
            break
        positions.append(pos)
        pos = nxt
    return np.array(positions, np.int64), pos


def _walk_compiled(buf: bytes | bytearray | memoryview) -> tuple[np.ndarray, int]:
    raw, consumed, bad = _walk(buf)
    if bad >= 0:
        raise _bad_size(buf, bad)
    return np.frombuffer(raw, np.int64), consumed


_walk = accel.compiled("walk")
_positions = accel.pick(_walk_compiled, walk_positions)


# a buffer this small (a tiny segment: a few entries) is walked in Python: fewer steps than the numpy ones that pay
# off over many entries
SMALL_WALK_BYTES = 1024


def _walk_small(buf: bytes | bytearray | memoryview) -> Walk:
    """``walk_entries`` of a small buffer, the same result and the same refusals (a bad size before an unknown
    magic, each the first of its kind), one Python step per entry."""
    end = len(buf)
    positions: list[int] = []
    sizes: list[int] = []
    magics: list[int] = []
    unpack = _SIZE.unpack_from
    pos = 0
    while pos + HEADER_SIZE_UP_TO_MAGIC <= end:
        (size,) = unpack(buf, pos + 8)
        if size < MIN_ENTRY_SIZE:
            raise _bad_size(buf, pos)
        nxt = pos + 12 + size
        if nxt > end:
            break
        positions.append(pos)
        sizes.append(nxt - pos)
        magics.append(buf[pos + legacy.MAGIC_OFFSET])
        pos = nxt
    tail = _tail_at(buf, pos) if pos < end else None
    for at, magic in zip(positions, magics):
        if magic > v2.MAGIC:
            raise UnsupportedFormatError(f"unknown magic byte {magic} (Kafka knows 0, 1 and 2)", position=at)
    return Walk(np.array(positions, np.int64), np.array(sizes, np.int64), np.array(magics, np.uint8), pos, tail)


def walk_entries(buf: bytes | bytearray | memoryview) -> Walk:
    """Find every complete entry of ``buf``; an incomplete last one becomes ``tail``."""
    if len(buf) <= SMALL_WALK_BYTES and (type(buf) is not memoryview or buf.format == "B"):
        return _walk_small(buf)  # (indexing a view of another format would not give its bytes)
    p, consumed = _positions(buf)
    tail = _tail_at(buf, consumed) if consumed < len(buf) else None
    if not len(p):
        return Walk(p, np.zeros(0, np.int64), np.zeros(0, np.uint8), consumed, tail)
    sizes = np.empty_like(p)
    np.subtract(p[1:], p[:-1], out=sizes[:-1])
    sizes[-1] = consumed - p[-1]
    magics = as_u8(buf)[p + legacy.MAGIC_OFFSET]
    unknown = magics > v2.MAGIC
    if unknown.any():
        i = int(np.argmax(unknown))
        raise UnsupportedFormatError(f"unknown magic byte {magics[i]} (Kafka knows 0, 1 and 2)", position=int(p[i]))
    return Walk(p, sizes, magics, consumed, tail)


def read_entries(
    buf: bytes | bytearray | memoryview, *, final: bool = True, deep: bool = True, walk: Walk | None = None
) -> Entries:
    """Read every complete entry of ``buf``.

    With ``final`` the buffer is the whole rest of the file and an incomplete last entry becomes ``tail``; without
    it (streaming) reading just stops there and ``consumed`` says where to continue. ``walk``: the buffer's
    ``walk_entries``, when the caller has it already.
    """
    walk = walk if walk is not None else walk_entries(buf)
    result = Entries(consumed=walk.consumed, tail=walk.tail if final else None)
    if not len(walk.positions):
        return result
    p, s, magics = walk.positions, walk.sizes, walk.magics
    items = result.items
    n = len(p)
    if n <= _SMALL_ENTRIES and _all_plain_legacy(buf, p.tolist(), magics.tolist()):
        # as below, without the arrays that pay off over many entries
        run = legacy.decode_run(buf, p, s)
        offsets = run.records.offsets.tolist()
        if any(b <= a for a, b in itertools.pairwise(offsets)):
            run.check_offsets_within()  # raises its precise error: the condition is the one it checks
        items.append(run)
        return result
    u8 = as_u8(buf)
    # a legacy entry's attributes byte (17) holds its codec; only uncompressed legacy messages form runs
    plain_legacy = (magics < 2) & ((u8[p + legacy.ATTRIBUTES_OFFSET] & legacy.CODEC_MASK) == 0)
    if plain_legacy.all():  # the usual legacy chunk: one run, checked within itself by the columns
        items.append(legacy.decode_run(buf, p, s))
        _check_offsets_increase(items)
        return result
    # boundaries of runs of plain legacy messages
    change = np.flatnonzero(np.diff(plain_legacy.astype(np.int8))) + 1
    bounds = np.concatenate([[0], change, [n]])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if plain_legacy[a]:
            items.append(legacy.decode_run(buf, p[a:b], s[a:b]))
            continue
        for i in range(a, b):
            pos_i, size_i = int(p[i]), int(s[i])
            if magics[i] == v2.MAGIC:
                items.append(v2.decode_batch(buf, pos_i, size_i, deep=deep))
            else:
                items.append(legacy.decode_wrapper(buf, pos_i, size_i))
    _check_offsets_increase(items)
    return result


_SMALL_ENTRIES = 16


def _all_plain_legacy(buf: bytes | bytearray | memoryview, positions: list[int], magics: list[int]) -> bool:
    """Whether every entry is an uncompressed legacy message (magic below 2, no codec in its attributes byte)."""
    at, mask = legacy.ATTRIBUTES_OFFSET, legacy.CODEC_MASK
    return all(m < 2 and not buf[x + at] & mask for x, m in zip(positions, magics))


def _check_offsets_increase(items: list[Entry]) -> None:
    last = None
    for item in items:
        item.check_offsets_within()
        first = item.first_offset
        if last is not None and first <= last:
            raise CorruptRecordError(
                f"offset {first} does not increase on the previous entry's last offset {last}",
                position=item.first_position,
                offset=first,
            )
        last = item.last_offset


def iter_records(items: list[Entry]) -> Iterator[Record]:
    """Every record, row-wise, with Kafka's view of its timestamp (slow path: tests, dump, small data)."""
    for item in items:
        yield from item.rows()
