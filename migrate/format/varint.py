"""Zig-zag base-128 varints, as Kafka's v2 records use them (protobuf sint32/sint64).

``ByteUtils.writeVarint`` in Kafka = ``writeUnsignedVarint((v << 1) ^ (v >> 31))``; varlongs use 63.
"""

from __future__ import annotations

import numpy as np

from migrate.errors import CorruptRecordError


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def encode_varint(value: int) -> bytes:
    """Encode a signed integer (int32 or int64 range) as a zig-zag varint."""
    z = zigzag(value) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Encodings of small values, looked up instead of computed on the hot path.
_SMALL = {v: encode_varint(v) for v in range(-64, 64)}


def varint(value: int) -> bytes:
    cached = _SMALL.get(value)
    return cached if cached is not None else encode_varint(value)


def decode_varint(buf: bytes | memoryview, pos: int, limit: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode one zig-zag varint at ``pos``; return (value, next position).

    Raises CorruptRecordError when the varint runs past ``limit`` or is longer than ``max_bytes``
    (5 for a varint, 10 for a varlong).
    """
    shift = 0
    raw = 0
    start = pos
    while True:
        if pos >= limit:
            raise CorruptRecordError("varint runs past the end of the record", position=start)
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=start)
    return (raw >> 1) ^ -(raw & 1), pos


def varint_sizes(values: np.ndarray) -> np.ndarray:
    """Encoded size in bytes of each value's zig-zag varint (vectorized)."""
    v = values.astype(np.int64)
    z = ((v << 1) ^ (v >> 63)).view(np.uint64)
    sizes = np.ones(len(v), dtype=np.int64)
    threshold = np.uint64(0x80)
    for _ in range(9):
        more = z >= threshold
        if not more.any():
            break
        sizes += more
        z = z >> np.uint64(7)
    return sizes
