"""Vectorized big-endian field access on a byte buffer, and gathering variable-length pieces into one output.

These are the primitives that let the format modules work on columns (one numpy operation per field for a whole
run of entries) instead of one Python call per record.
"""

from __future__ import annotations

import numpy as np

_ARANGE = {n: np.arange(n, dtype=np.int64) for n in (1, 2, 4, 8)}
_DTYPES = {(1, True): ">i1", (2, True): ">i2", (4, True): ">i4", (8, True): ">i8", (4, False): ">u4"}


def as_u8(buf: bytes | bytearray | memoryview) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


def gather_be(u8: np.ndarray, at: np.ndarray, width: int, signed: bool = True) -> np.ndarray:
    """The big-endian integers of ``width`` bytes at each position in ``at``, as int64."""
    if len(at) == 0:
        return np.zeros(0, np.int64)
    raw = u8[at[:, None] + _ARANGE[width]]
    return np.ascontiguousarray(raw).view(_DTYPES[(width, signed)]).ravel().astype(np.int64)


def gather_pieces(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``source[starts[i] : starts[i] + lengths[i]]`` for every i, in order, as one uint8 array."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    ends = np.cumsum(lengths)
    out_starts = ends - lengths
    keep = lengths > 0
    shift = np.repeat((starts - out_starts)[keep], lengths[keep])
    return source[shift + np.arange(total, dtype=np.int64)]


def varint_matrix(values: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Zig-zag varint bytes of each value, one row each, padded to 10 columns (``sizes`` = used bytes per row)."""
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    width = int(sizes.max()) if len(sizes) else 1
    out = np.zeros((len(v), max(width, 1)), np.uint8)
    for j in range(width):
        byte = (z >> np.uint64(7 * j)) & np.uint64(0x7F)
        cont = sizes > j + 1
        out[:, j] = byte.astype(np.uint8) | (cont.astype(np.uint8) << 7)
    return out
