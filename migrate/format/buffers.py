"""Vectorized big-endian field access on a byte buffer, and checks of positions and lengths into one.

``gather_be`` lets the format modules read a field of a whole run of entries in one numpy operation instead of one
Python call per entry; ``int64_column`` and ``check_pieces`` prepare and check the arguments that the Python
references and the C accelerator take alike.
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


_INT64 = np.dtype(np.int64)


def int64_column(a: np.ndarray) -> np.ndarray:
    """``a`` as the native int64, C-contiguous, aligned 1-D array the accelerator takes (no copy if it already is)."""
    if type(a) is np.ndarray and a.dtype == _INT64 and a.flags.c_contiguous and a.flags.aligned:
        return a  # the usual case, without np.require's cost (it counts at thousands of small segments)
    return np.require(a, np.int64, ("C", "A"))


def check_pieces(size: int, pos: np.ndarray, length: np.ndarray, what: str, null: str = "-1") -> None:
    """Raise ValueError unless every piece ``[pos[i], pos[i] + length[i])`` lies inside a buffer of ``size`` bytes.

    A negative length is null and has no position: ``null="-1"`` allows -1 only (v2 writers), ``"negative"`` any
    negative length. The Python references check what the C accelerator checks, so both refuse the same input.
    """
    pos = np.asarray(pos, np.int64)
    length = np.asarray(length, np.int64)
    present = length >= 0
    # size - length cannot overflow: size >= 0 and length >= 0 where it matters
    bad = present & ((pos < 0) | (length > size) | (pos > size - np.where(present, length, 0)))
    if null == "-1":
        bad |= length < -1
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"record {i}: {what} [{int(pos[i])}, +{int(length[i])}) is not inside the {size}-byte buffer "
            f"(a length is {'-1' if null == '-1' else 'negative'} for null or >= 0)"
        )
