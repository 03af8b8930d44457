"""Kafka's compression codecs, with the framings Kafka actually reads and writes.

- gzip: RFC 1952 members (Java's GZIPOutputStream); readers accept concatenated members.
- snappy: xerial snappy-java stream framing, which Kafka writes::

      82 53 4e 41 50 50 59 00 | int32 version=1 | int32 minCompatibleVersion=1
      then chunks of [int32 compressed length][raw snappy block], at most 32 KiB uncompressed each

  A buffer without that magic is one raw snappy block (snappy-java's SnappyInputStream does the same).
- lz4: LZ4 frames (KIP-57) with independent 64 KiB blocks, no content size, no checksums: every Kafka frame starts
  ``04 22 4d 18 60 40`` and then the header checksum byte. Magic 0 writers computed that byte over the magic too
  (KAFKA-3160) and wrote ``1a``; magic 1/2 write the correct ``82``. Reading magic 0 ignores the byte; writing
  always puts the correct one.
- zstd: standard zstd frames; magic 2 only.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import snappy
import xxhash
import zstandard

from migrate.errors import CorruptRecordError, UnsupportedFormatError
from migrate.format.records import Compression

# Java's GZIPOutputStream header (mtime 0, OS byte 255), so gzip batches match Kafka's byte for byte
GZIP_HEADER = bytes.fromhex("1f8b08000000000000ff")
GZIP_LEVEL = 6  # zlib's default, which Kafka uses unless compression.gzip.level is set
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_CHUNK = 32 * 1024
LZ4_MAGIC = b"\x04\x22\x4d\x18"

_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=3)
_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()

# A legacy or v2 batch holding more than this, uncompressed, is refused rather than inflated into memory.
MAX_DECOMPRESSED_BYTES = 1 << 31


def compress(codec: Compression, data: bytes | memoryview, magic: int = 2) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -15)
        body = c.compress(data) + c.flush()
        return GZIP_HEADER + body + struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    if codec == Compression.SNAPPY:
        mv = memoryview(data)
        parts = [XERIAL_HEADER]
        for start in range(0, len(mv), XERIAL_CHUNK):
            block = snappy.compress(bytes(mv[start : start + XERIAL_CHUNK]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == Compression.ZSTD:
        if magic < 2:
            raise UnsupportedFormatError(f"zstd compression is not supported for magic {magic} (v2 only)")
        return _ZSTD_COMPRESSOR.compress(data)
    raise UnsupportedFormatError(f"unknown compression codec id {int(codec)}")


def decompress(codec: int, data: bytes | memoryview, magic: int = 2) -> bytes:
    """Decompress a wrapper value or v2 batch body.

    Bad data raises CorruptRecordError without a position: the caller knows where the entry is and adds it.
    """
    try:
        if codec == Compression.GZIP:
            return _gunzip(data)
        if codec == Compression.SNAPPY:
            return _unsnappy(bytes(data))
        if codec == Compression.LZ4:
            return _unlz4(bytes(data), magic)
        if codec == Compression.ZSTD:
            if magic < 2:
                raise UnsupportedFormatError(f"zstd compression in a magic {magic} entry (zstd is v2 only)")
            return _unzstd(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # the codec libraries raise a zoo of types for bad input
        name = Compression(codec).label if codec in Compression._value2member_map_ else str(codec)
        raise CorruptRecordError(f"cannot decompress {name} data: {exc}") from exc
    raise UnsupportedFormatError(f"unknown compression codec id {codec}")


def _gunzip(data: bytes | memoryview) -> bytes:
    out = []
    rest = bytes(data)
    total = 0
    while rest:
        d = zlib.decompressobj(47)
        out.append(d.decompress(rest, MAX_DECOMPRESSED_BYTES - total))
        total += len(out[-1])
        if d.unconsumed_tail:
            raise CorruptRecordError("gzip data expands beyond 2 GiB")
        if not d.eof:
            raise CorruptRecordError("gzip stream ends before its end marker")
        rest = d.unused_data
    if not out:
        raise CorruptRecordError("empty gzip stream")
    return b"".join(out)


def _unsnappy(data: bytes) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return snappy.uncompress(data)
    out = []
    pos = 0
    n = len(data)
    while pos < n:
        # snappy-java accepts a fresh stream header in the middle of a stream (concatenated streams)
        if data.startswith(XERIAL_MAGIC, pos):
            if pos + 16 > n:
                raise CorruptRecordError("truncated xerial snappy header")
            pos += 16
            continue
        if pos + 4 > n:
            raise CorruptRecordError("truncated xerial snappy chunk length")
        (length,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise CorruptRecordError(f"xerial snappy chunk of {length} bytes runs past the data")
        out.append(snappy.uncompress(data[pos : pos + length]))
        pos += length
    return b"".join(out)


def _unlz4(data: bytes, magic: int) -> bytes:
    if len(data) < 7 or not data.startswith(LZ4_MAGIC):
        raise CorruptRecordError("not an LZ4 frame (bad magic number)")
    if magic == 0:
        # KAFKA-3160: magic-0 writers checksummed the magic too; put the correct header checksum in its place.
        flg_bd_end = 6 + (8 if data[4] & 0x08 else 0)
        data = data[:flg_bd_end] + bytes([_xxh32(data[4:flg_bd_end]) >> 8 & 0xFF]) + data[flg_bd_end + 1 :]
    return lz4.frame.decompress(data)


def _unzstd(data: bytes | memoryview) -> bytes:
    d = _ZSTD_DECOMPRESSOR.decompressobj()
    out = d.decompress(bytes(data))
    if not d.eof:
        raise CorruptRecordError("zstd frame ends before its end")
    return out


def _xxh32(data: bytes) -> int:
    """xxHash32 (seed 0): the second byte of that of FLG..BD is an LZ4 frame's header checksum."""
    return xxhash.xxh32_intdigest(data)
