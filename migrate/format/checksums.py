"""The two checksums of Kafka's log formats.

Legacy messages (magic 0/1) carry CRC-32 (IEEE) over magic..end; v2 batches carry CRC-32C (Castagnoli) over
attributes..end. CRC-32C comes from the ``crc32c`` C package: a pure-Python CRC is orders of magnitude too slow
for whole segments.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c
import numpy as np

try:
    from migrate.format import _speedups
except ImportError:  # not built: one Python call per range instead
    _speedups = None


def crc32(data: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return _crc32c.crc32c(data)


def _ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray, castagnoli: bool) -> np.ndarray:
    if _speedups is not None:
        raw = _speedups.crc_ranges(data, starts.astype(np.int64), ends.astype(np.int64), castagnoli)
        return np.frombuffer(raw, np.uint32).astype(np.int64)
    # no Python frame per range: map() drives the C functions (zlib.crc32 is already unsigned in Python 3)
    fn = _crc32c.crc32c if castagnoli else zlib.crc32
    pieces = map(memoryview(data).__getitem__, map(slice, starts.tolist(), ends.tolist()))
    return np.fromiter(map(fn, pieces), np.int64, len(starts))


def crc32_ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32 of ``data[starts[i]:ends[i]]`` for every i."""
    return _ranges(data, starts, ends, False)


def crc32c_ranges(data: bytes | bytearray | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32C of ``data[starts[i]:ends[i]]`` for every i."""
    return _ranges(data, starts, ends, True)
