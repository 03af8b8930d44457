"""The two checksums of Kafka's log formats.

Legacy messages (magic 0/1) carry CRC-32 (IEEE) over magic..end; v2 batches carry CRC-32C (Castagnoli) over
attributes..end. CRC-32C comes from the ``crc32c`` C package: a pure-Python CRC is orders of magnitude too slow
for whole segments.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c


def crc32(data: bytes | bytearray | memoryview) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    return _crc32c.crc32c(data)
