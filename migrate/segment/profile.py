"""What a segment holds, by format, without decoding a record: for ``scan`` and ``plan``. Streams the file.

``profile_segment`` walks every entry header (positions, sizes, magics), optionally checks every entry's stored
checksum (CRC-32 of a legacy message, CRC-32C of a v2 batch: one call over all ranges of a chunk), and remembers
what ``plan`` needs to tell a torn tail from corruption: the last complete entry's offset, the partial entry's
header, and the largest entry (and the largest legacy one, whose v2 batch consumers must fetch whole). Given cut
positions (a segment ``plan`` converts in ranges), it also finds the first entry start at or after each cut and
where that entry's converted bytes will start (``RangeCut``), when the converted size of every entry is known in
advance. ``check_segment`` is ``plan --check``: a deep read of every
entry (decompression, inner CRCs, offsets strictly increasing within base..base+2^31-1), exactly what conversion
would refuse.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from migrate.errors import CorruptRecordError, LocatedError, UnsupportedFormatError
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.buffers import gather_be
from migrate.format.checksums import crc32_ranges, crc32c_ranges
from migrate.format.entries import HEADER_SIZE_UP_TO_MAGIC, walk_entries
from migrate.format.records import Compression
from migrate.model.plan_tree import DEFAULT_CHUNK_BYTES, RangeCut
from migrate.segment.reader import read_chunks

MAX_RELATIVE_OFFSET = 2**31 - 1
_OFFSET_SIZE = struct.Struct(">qi")
_V2_LAST_DELTA_AT = 23  # baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2
_LEGACY_CRC_AT = 12
_V2_CRC_AT = 17


@dataclass
class SegmentProfile:
    entries_by_magic: dict[int, int] = field(default_factory=dict)
    bytes_by_magic: dict[int, int] = field(default_factory=dict)
    compressions: dict[str, int] = field(default_factory=dict)
    plain_legacy_by_magic: dict[int, int] = field(default_factory=dict)  # uncompressed v0/v1 messages
    wrappers: int = 0  # compressed v0/v1 messages
    valid_bytes: int = 0
    largest_entry: int = 0
    largest_entry_position: int = 0
    largest_legacy_entry: int = 0  # a v0/v1 entry: conversion makes one v2 batch of it, of about the same size
    largest_legacy_entry_position: int = 0
    last_offset: int | None = None  # of the last complete entry
    tail_position: int | None = None
    tail_bytes: int = 0
    tail_claimed_offset: int | None = None  # offset field of the partial entry's header, when it has one
    corruption: LocatedError | None = None  # the first bad checksum or unknown magic, with its position
    range_cuts: tuple[RangeCut, ...] | None = None  # for the cuts asked for, when every entry's output size is known

    def has_magic_below(self, magic: int) -> bool:
        return any(m < magic for m in self.entries_by_magic)


def _be32(buf: np.ndarray, at: np.ndarray) -> np.ndarray:
    b = buf[at[:, None] + np.arange(4)].astype(np.int64)
    return (b[:, 0] << 24) | (b[:, 1] << 16) | (b[:, 2] << 8) | b[:, 3]


def first_bad_checksum(buf: bytes | memoryview, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray) -> int:
    """Index of the first entry whose stored checksum does not match its bytes, or -1."""
    if not len(positions):
        return -1
    u8 = np.frombuffer(buf, np.uint8)
    ends = positions + sizes
    bad = np.zeros(len(positions), bool)
    for is_v2 in (False, True):
        sel = (magics == v2.MAGIC) if is_v2 else (magics < v2.MAGIC)
        if not sel.any():
            continue
        pos = positions[sel]
        if is_v2:
            stored, computed = _be32(u8, pos + _V2_CRC_AT), crc32c_ranges(buf, pos + _V2_CRC_AT + 4, ends[sel])
        else:
            stored, computed = _be32(u8, pos + _LEGACY_CRC_AT), crc32_ranges(buf, pos + _LEGACY_CRC_AT + 4, ends[sel])
        bad[sel] = stored != computed
    return int(np.argmax(bad)) if bad.any() else -1


def _add(counts: dict[int, int], values: np.ndarray, weights: np.ndarray | None = None) -> None:
    """Add per-value totals of small non-negative integers (magic bytes, codec ids): one bincount, no sort."""
    if not len(values):
        return
    sums = np.bincount(values, weights=weights)
    for value in np.flatnonzero(sums).tolist():
        counts[value] = counts.get(value, 0) + int(sums[value])


_CODEC_NAMES = [c.label for c in Compression] + ["unknown"] * 3


def _count(
    profile: SegmentProfile, u8: np.ndarray, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray
) -> None:
    """Entries, bytes and codecs by magic for a chunk's entries: array operations, no Python step per entry."""
    if not len(positions):
        return
    magics = magics.astype(np.int64)
    _add(profile.entries_by_magic, magics)
    _add(profile.bytes_by_magic, magics, sizes)
    known = magics <= v2.MAGIC
    pos, mag = positions[known], magics[known]
    # the byte holding the codec bits: the low byte of a v2 batch's int16 attributes, a legacy message's attributes
    at = np.where(mag == v2.MAGIC, v2.ATTRIBUTES_OFFSET + 1, legacy.ATTRIBUTES_OFFSET)
    codecs = (u8[pos + at] & 7).astype(np.int64)
    by_codec: dict[int, int] = {}
    _add(by_codec, codecs)
    for codec, n in by_codec.items():
        name = _CODEC_NAMES[codec]
        profile.compressions[name] = profile.compressions.get(name, 0) + n
    legacy_entries = mag < v2.MAGIC
    _add(profile.plain_legacy_by_magic, mag[legacy_entries & (codecs == Compression.NONE)])
    profile.wrappers += int((legacy_entries & (codecs != Compression.NONE)).sum())


class _Layout:
    """The ``RangeCut`` of each cut, entry by entry: an uncompressed legacy message converts to one v2 batch (its
    size from its key and value lengths), a v2 batch stays as it is; a compressed wrapper (recompressed: its size is
    known only once written) or a message too short for its own key ends the prediction."""

    def __init__(self, cuts: list[int]) -> None:
        self.cuts = cuts
        self.found: list[RangeCut] = [RangeCut(0, 0)]
        self.output = 0
        self.known = True

    def add(
        self, u8: np.ndarray, chunk_position: int, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray
    ) -> None:
        if not self.known or not len(positions):
            return
        out = sizes.astype(np.int64)
        is_legacy = magics < v2.MAGIC
        if is_legacy.any():
            pos, size, magic = positions[is_legacy], sizes[is_legacy], magics[is_legacy].astype(np.int64)
            if (u8[pos + legacy.ATTRIBUTES_OFFSET] & legacy.CODEC_MASK).any():
                self.known = False
                return
            key_at = np.where(magic == 0, legacy.KEY_LENGTH_OFFSET[0], legacy.KEY_LENGTH_OFFSET[1])
            key_len = gather_be(u8, pos + key_at, 4)
            overhead = legacy.LOG_OVERHEAD + np.where(magic == 0, legacy.RECORD_OVERHEAD[0], legacy.RECORD_OVERHEAD[1])
            # a null value and an empty one have varints of the same size: the bytes left are all that matters
            value_bytes = size - overhead - np.maximum(key_len, 0)
            if (key_len < -1).any() or (value_bytes < 0).any():
                self.known = False  # conversion refuses such a message, with its position
                return
            out[is_legacy] = v2.single_record_batch_sizes(key_len, value_bytes)
        starts = chunk_position + positions
        before = self.output + np.cumsum(out) - out
        while len(self.found) <= len(self.cuts):
            i = int(np.searchsorted(starts, self.cuts[len(self.found) - 1]))
            if i == len(starts):
                break
            self.found.append(RangeCut(int(starts[i]), int(before[i])))
        self.output += int(out.sum())

    def finish(self, size: int) -> tuple[RangeCut, ...] | None:
        if not self.known:
            return None
        end = RangeCut(size, self.output)
        return (*self.found, *[end] * (len(self.cuts) + 1 - len(self.found)), end)


def profile_segment(
    path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES, check_crc: bool = False, cuts: list[int] | None = None
) -> SegmentProfile:
    """``cuts``: the inner cut positions of a segment converted in ranges, ascending; their ``RangeCut``s (with the
    first, (0, 0), and the last, (file size, converted size)) go to ``range_cuts`` when they can be predicted."""
    profile = SegmentProfile()
    layout = _Layout(sorted(cuts)) if cuts is not None else None
    with open(path, "rb") as src:
        for chunk in read_chunks(src, str(path), chunk_bytes, decode=lambda buf, final: walk_entries(buf)):
            walk = chunk.entries
            buf = chunk.buffer
            positions, sizes, magics = walk.positions, walk.sizes, walk.magics
            if profile.corruption is None:
                unknown = magics > v2.MAGIC
                if unknown.any():
                    i = int(np.argmax(unknown))
                    profile.corruption = UnsupportedFormatError(
                        f"unknown magic byte {int(magics[i])}",
                        position=chunk.position + int(positions[i]),
                        path=str(path),
                    )
                elif check_crc:
                    i = first_bad_checksum(buf, positions, sizes, magics)
                    if i >= 0:
                        kind = "CRC-32C of the record batch" if magics[i] == v2.MAGIC else "CRC-32 of the message"
                        profile.corruption = CorruptRecordError(
                            f"the stored {kind} does not match its bytes",
                            position=chunk.position + int(positions[i]),
                            offset=_OFFSET_SIZE.unpack_from(buf, int(positions[i]))[0],
                            path=str(path),
                        )
            u8 = np.frombuffer(buf, np.uint8)
            _count(profile, u8, positions, sizes, magics)
            if layout is not None and profile.corruption is None:
                layout.add(u8, chunk.position, positions, sizes, magics)
            if len(positions):
                i = int(np.argmax(sizes))
                if int(sizes[i]) > profile.largest_entry:
                    profile.largest_entry = int(sizes[i])
                    profile.largest_entry_position = chunk.position + int(positions[i])
                legacy_sizes = np.where(magics < v2.MAGIC, sizes, 0)
                i = int(np.argmax(legacy_sizes))
                if int(legacy_sizes[i]) > profile.largest_legacy_entry:
                    profile.largest_legacy_entry = int(legacy_sizes[i])
                    profile.largest_legacy_entry_position = chunk.position + int(positions[i])
                p, magic = int(positions[-1]), int(magics[-1])
                offset = _OFFSET_SIZE.unpack_from(buf, p)[0]
                if magic == v2.MAGIC:
                    offset += struct.unpack_from(">i", buf, p + _V2_LAST_DELTA_AT)[0]
                profile.last_offset = offset
            profile.valid_bytes = chunk.position + walk.consumed
            if walk.tail is not None and walk.tail.size >= 12:
                profile.tail_claimed_offset = _OFFSET_SIZE.unpack_from(buf, walk.tail.position)[0]
    size = Path(path).stat().st_size
    if layout is not None and profile.corruption is None:
        profile.range_cuts = layout.finish(size)
    if size > profile.valid_bytes:
        profile.tail_position = profile.valid_bytes
        profile.tail_bytes = size - profile.valid_bytes
    return profile


def valid_entry_after(path: str | Path, start: int, limit: int) -> int | None:
    """The position of the first complete entry with a good checksum at or after ``start`` (scanning at most
    ``limit`` bytes), or None. A torn write leaves only a prefix of one entry behind; a valid entry further on means
    the bytes at ``start`` are damage in the middle of the data, not a torn tail."""
    with open(path, "rb") as f:
        f.seek(start)
        buf = f.read(limit)
    u8 = np.frombuffer(buf, np.uint8)
    n = len(buf)
    if n < HEADER_SIZE_UP_TO_MAGIC:
        return None
    starts = np.arange(0, n - HEADER_SIZE_UP_TO_MAGIC + 1, dtype=np.int64)
    sizes = _be32(u8, starts + 8)
    sizes = np.where(sizes >= 1 << 31, sizes - (1 << 32), sizes)
    magics = u8[starts + 16].astype(np.int64)
    ok = (magics <= v2.MAGIC) & (sizes >= legacy.MIN_MESSAGE_SIZE) & (starts + 12 + sizes <= n)
    cand = starts[ok]
    cand = cand[cand > 0]
    for lo in range(0, len(cand), 4096):
        block = cand[lo : lo + 4096]
        i = first_good_checksum(buf, block, sizes[block] + 12, magics[block])
        if i >= 0:
            return start + int(block[i])
    return None


def first_good_checksum(buf: bytes, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray) -> int:
    """Index of the first entry whose stored checksum matches, or -1 (candidates of a resynchronising scan)."""
    for i in range(len(positions)):
        if first_bad_checksum(buf, positions[i : i + 1], sizes[i : i + 1], magics[i : i + 1]) < 0:
            return i
    return -1


def check_segment(path: str | Path, base_offset: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Read every entry deeply, as conversion will (decompression, inner checksums, offsets strictly increasing and
    within the segment's range); raise the LocatedError conversion would raise. Returns the number of records."""
    records = 0
    last = None
    with open(path, "rb") as src:
        for chunk in read_chunks(src, str(path), chunk_bytes, deep=True):
            for item in chunk.entries.items:
                offsets = item.records.offsets
                if not len(offsets):
                    continue
                position = chunk.position + item.first_position
                check_offsets(offsets, last, base_offset, position, str(path))
                last = int(offsets[-1])
                records += len(offsets)
    return records


def _first_not_increasing(offsets: np.ndarray) -> bool:
    """Whether some offset does not increase on the one before it; a few offsets (the span of one entry, as the
    converter passes them) compared in Python, not through ``np.diff``."""
    if len(offsets) <= 4:
        values = offsets.tolist()
        return any(b <= a for a, b in itertools.pairwise(values))
    return bool((np.diff(offsets) <= 0).any())


def check_offsets(offsets: np.ndarray, previous: int | None, base_offset: int, position: int, path: str) -> None:
    """Offsets must strictly increase across the segment and stay within base..base+2^31-1 (Kafka's offset index
    stores them relative to the base as 32-bit ints)."""
    first, last = int(offsets[0]), int(offsets[-1])
    if previous is not None and first <= previous:
        raise CorruptRecordError(
            f"offset {first} does not follow offset {previous}: offsets must strictly increase",
            position=position,
            offset=first,
            path=path,
        )
    if len(offsets) > 1 and _first_not_increasing(offsets):
        i = int(np.argmax(np.diff(offsets) <= 0)) + 1
        raise CorruptRecordError(
            f"offset {int(offsets[i])} does not follow offset {int(offsets[i - 1])}",
            position=position,
            offset=int(offsets[i]),
            path=path,
        )
    if first < base_offset:
        raise CorruptRecordError(
            f"offset {first} is below the segment's base offset {base_offset} (its file name)",
            position=position,
            offset=first,
            path=path,
            hint="The file name does not match its contents. Restore the segment from a replica before migrating.",
        )
    if last - base_offset > MAX_RELATIVE_OFFSET:
        from migrate.errors import SegmentRefusedError

        raise SegmentRefusedError(
            f"offset {last} is more than 2^31-1 above the segment base {base_offset}: Kafka's offset index cannot "
            "address it",
            position=position,
            offset=last,
            path=path,
        )
