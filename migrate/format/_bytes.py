"""Vectorized big-endian field access on a byte buffer, and gathering variable-length pieces into one output.

These are the primitives that let the format modules work on columns (one numpy operation per field for a whole
run of entries) instead of one Python call per record.
"""

from __future__ import annotations

import numpy as np

_DTYPES = {(1, True): ">i1", (2, True): ">i2", (4, True): ">i4", (8, True): ">i8", (4, False): ">u4"}


def as_u8(buf: bytes | bytearray | memoryview) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


def _windows(a: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of the uint8 array ``a`` as one opaque item, overlapping (stride 1, no copy)."""
    return np.ndarray(shape=(len(a) - width + 1,), dtype=np.dtype(("V", width)), buffer=a, strides=(1,))


def gather_be(u8: np.ndarray, at: np.ndarray, width: int, signed: bool = True) -> np.ndarray:
    """The big-endian integers of ``width`` bytes at each position in ``at``, as int64."""
    if len(at) == 0:
        return np.zeros(0, np.int64)
    if len(u8) < width:
        raise IndexError(f"no {width}-byte field fits in {len(u8)} bytes")
    return _windows(u8, width)[at].view(_DTYPES[(width, signed)]).astype(np.int64)


def gather_pieces(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate ``source[starts[i] : starts[i] + lengths[i]]`` for every i, in order, as one uint8 array.

    A piece of length L is copied as the power-of-two blocks of L's binary digits (1000 = 512 + 256 + 128 + 64 + 32
    + 8), one numpy operation per block size over all pieces, each block one item copy: a handful of operations per
    piece instead of one per byte, and no per-byte index arrays.
    """
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    out = np.empty(total, np.uint8)
    src = starts.astype(np.int64)  # a copy: where each piece's next block starts
    dst = np.cumsum(lengths) - lengths
    for bit in range(int(lengths.max()).bit_length() - 1, -1, -1):
        width = 1 << bit
        idx = np.flatnonzero(lengths & width)
        if len(idx):
            s, d = src[idx], dst[idx]
            _windows(out, width)[d] = _windows(source, width)[s]
            src[idx] = s + width
            dst[idx] = d + width
    return out


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
