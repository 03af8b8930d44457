"""Kafka's offset index (``<base>.index``), as Kafka 4.0.1+ and Kafka's own log recovery write it.

::

    entry (8 bytes, big-endian): relativeOffset => int32 (offset - segment base), position => int32 (byte in .log)

The entry count is the file length / 8 (Kafka trusts the length of an existing file), so the file holds exactly
its entries: no preallocation, no zero padding. An entry is added for a batch once more than
``index.interval.bytes`` of log have passed since the last entry, and names the batch's *last* offset and its
*start* position: the rule of ``LogSegment.recover`` that ``kafka-dump-log --verify-index-only`` checks.
"""

from __future__ import annotations

import struct

import numpy as np

from migrate.errors import CorruptRecordError

ENTRY_SIZE = 8
MAX_RELATIVE_OFFSET = 2**31 - 1
_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])  # built once: it counts per small segment


def encode(base_offset: int, offsets: np.ndarray, positions: np.ndarray) -> bytes:
    if not len(offsets):
        return b""
    relative = offsets - base_offset
    if relative.min() < 0 or relative.max() > MAX_RELATIVE_OFFSET:
        raise ValueError("offset index entry outside base..base+2^31-1")
    table = np.empty(len(offsets), dtype=_DTYPE)
    table["relative_offset"] = relative
    table["position"] = positions
    return table.tobytes()


def decode(data: bytes, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(absolute offsets, positions) of every entry."""
    if len(data) % ENTRY_SIZE:
        raise CorruptRecordError(
            f"offset index length {len(data)} is not a multiple of {ENTRY_SIZE}", position=len(data)
        )
    table = np.frombuffer(data, dtype=_DTYPE)
    return table["relative_offset"].astype(np.int64) + base_offset, table["position"].astype(np.int64)


def lookup(data: bytes, base_offset: int, target: int) -> tuple[int, int]:
    """Kafka's OffsetIndex.lookup: the largest entry with offset <= target, else (base, 0)."""
    best = (base_offset, 0)
    for i in range(len(data) // ENTRY_SIZE):
        rel, pos = struct.unpack_from(">ii", data, i * ENTRY_SIZE)
        if base_offset + rel > target:
            break
        best = (base_offset + rel, pos)
    return best
