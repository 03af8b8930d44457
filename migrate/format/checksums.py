"""The two checksums of Kafka's log formats.

Legacy messages (magic 0/1) carry CRC-32 (IEEE) over magic..end; v2 batches carry CRC-32C (Castagnoli) over
attributes..end. CRC-32C comes from the ``crc32c`` C package: a pure-Python CRC is orders of magnitude too slow
for whole segments.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c
import numpy as np

from migrate.format import accel
from migrate.format.buffers import int64_column


def crc32(data: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return _crc32c.crc32c(data)


def crc_ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray, castagnoli: bool) -> bytes:
    """The reference of the accelerator's ``crc_ranges``: uint32 checksums (native order) of every range, as bytes.

    Raises ValueError unless ``0 <= starts[i] <= ends[i] <= len(data)`` for every i, as the accelerator does.
    """
    view = memoryview(data)
    if len(starts) != len(ends):
        raise ValueError(f"ends has {len(ends)} items but starts has {len(starts)}")
    bad = (starts < 0) | (starts > ends) | (ends > view.nbytes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"range {i} [{starts[i]}, {ends[i]}) is not inside the {view.nbytes}-byte buffer")
    # no Python frame per range: map() drives the C functions (zlib.crc32 is already unsigned in Python 3)
    fn = _crc32c.crc32c if castagnoli else zlib.crc32
    pieces = map(view.__getitem__, map(slice, starts.tolist(), ends.tolist()))
    return np.fromiter(map(fn, pieces), np.uint32, len(starts)).tobytes()


_crc_ranges = accel.pick(accel.compiled("crc_ranges"), crc_ranges)


def _ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray, castagnoli: bool) -> np.ndarray:
    raw = _crc_ranges(data, int64_column(starts), int64_column(ends), castagnoli)
    return np.frombuffer(raw, np.uint32).astype(np.int64)


def crc32_ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32 of ``data[starts[i]:ends[i]]`` for every i."""
    return _ranges(data, starts, ends, False)


def crc32c_ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32C of ``data[starts[i]:ends[i]]`` for every i."""
    return _ranges(data, starts, ends, True)
