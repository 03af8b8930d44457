"""Kafka's time index (``<base>.timeindex``, KIP-33).

::

    entry (12 bytes, big-endian): timestamp => int64, relativeOffset => int32 (offset - segment base)

Entry (T, O) means "the largest timestamp in the segment up to offset O is T": timestamps strictly increase, and O
is the last offset of the first batch holding that timestamp (Kafka's "shallow" offset of the max timestamp). An
entry is added next to each offset-index entry when the max timestamp grew, and once more when the segment is
rolled (its final max). A segment whose records all lack timestamps (magic 0 read as -1) has an empty time index,
exactly as Kafka leaves it; time retention then falls back to the ``.log`` mtime.
"""

from __future__ import annotations

import numpy as np

from migrate.errors import CorruptRecordError

ENTRY_SIZE = 12
_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


def encode(base_offset: int, timestamps: np.ndarray, offsets: np.ndarray) -> bytes:
    if not len(timestamps):
        return b""
    table = np.empty(len(timestamps), dtype=_DTYPE)
    table["timestamp"] = timestamps
    table["relative_offset"] = offsets - base_offset
    return table.tobytes()


def decode(data: bytes, base_offset: int) -> tuple[np.ndarray, np.ndarray]:
    """(timestamps, absolute offsets) of every entry."""
    if len(data) % ENTRY_SIZE:
        raise CorruptRecordError(f"time index length {len(data)} is not a multiple of {ENTRY_SIZE}", position=len(data))
    table = np.frombuffer(data, dtype=_DTYPE)
    return table["timestamp"].astype(np.int64), table["relative_offset"].astype(np.int64) + base_offset
