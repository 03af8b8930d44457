"""Reading a segment file in chunks: complete entries only, with their file positions, in bounded memory.

Two ways to read: ``read_chunks`` hands each chunk out as its own ``bytes`` (callers may keep it), and
``read_chunks(..., reuse=True)`` reads every chunk into one buffer that is overwritten by the next chunk, so the
hot paths (convert, verify) copy nothing on the way in and touch no fresh memory per chunk; their callers are done
with a chunk before they ask for the next one.

``find_entry_start`` finds where an entry starts at or after an arbitrary byte of a segment, which is how a range of a
large segment converted by its own worker finds its first entry (the join then checks that each range starts exactly
where the previous one stopped, so a false find is caught and never trusted).
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from migrate.errors import CorruptRecordError
from migrate.format import legacy
from migrate.format.checksums import crc32, crc32c
from migrate.format.entries import HEADER_SIZE_UP_TO_MAGIC, MIN_ENTRY_SIZE, read_entries
from migrate.model.plan_tree import DEFAULT_CHUNK_BYTES

_SIZE = struct.Struct(">i")
_OFFSET_SIZE = struct.Struct(">qi")
MAX_RELATIVE_OFFSET = 2**31 - 1


class SegmentFile(Protocol):
    """What the readers use of a segment file open for reading: a FileIO or a BufferedReader (typing.BinaryIO has no
    ``readinto``)."""

    def read(self, size: int = ..., /) -> bytes: ...
    def readinto(self, buffer: memoryview, /) -> int | None: ...
    def seek(self, offset: int, whence: int = ..., /) -> int: ...


class Decoded(Protocol):
    consumed: int  # bytes of complete entries decoded from the start of the buffer


@dataclass
class Chunk:
    position: int  # file position of buffer[0]
    buffer: bytes | memoryview  # a memoryview over the reused buffer when reading with reuse=True
    entries: Any  # what ``decode`` returned: by default Entries (positions relative to buffer; tail in the last)

    @property
    def end(self) -> int:
        """File position just after the last complete entry of this chunk."""
        return self.position + self.entries.consumed


def read_chunks(
    src: SegmentFile,
    path: str,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    deep: bool = True,
    decode: Callable[[Any, bool], Decoded] | None = None,
    *,
    reuse: bool = False,
    start: int = 0,
    limit: int | None = None,
    size_hint: int | None = None,
) -> Iterator[Chunk]:
    """Every complete entry of ``src``, a chunk at a time; errors name ``path`` and the file position.

    ``decode(buffer, at_end)`` turns a buffer into entries (default ``read_entries``); the bytes it did not consume
    (a partial entry) are read again with the next chunk. ``src`` is read from its current position, which is file
    position ``start``.

    ``reuse``: read into one buffer, overwritten chunk after chunk (see the module docstring). ``limit``: read the
    entries that start before this file position, and no further than the end of the last of them (an entry that
    starts before ``limit`` is read whole; the first chunk's end past it is that entry's end). ``size_hint``: the
    bytes left to read, when known, so that a small file is read and decoded at once, in one buffer of its size.
    """
    decode = decode or (lambda buf, final: read_entries(buf, final=final, deep=deep))
    if not reuse:
        yield from _read_copies(src, path, chunk_bytes, decode, start, limit)
        return
    capacity = chunk_bytes
    if size_hint is not None:
        capacity = max(HEADER_SIZE_UP_TO_MAGIC, min(chunk_bytes, size_hint + 1))  # +1: the read that finds the end
    buf = bytearray(capacity)
    view = memoryview(buf)
    have = 0  # bytes of a partial entry kept at the front of the buffer
    position = start  # file position of buf[0]
    while True:
        straddling = limit is not None and position + have >= limit
        if straddling:
            # everything before the limit is read: what is left is the entry that starts before it, if any
            if have == 0:
                return
            want = _rest_of_entry(view[:have])
            if have + want > len(buf):
                buf, view = _grown(buf, have, have + want)
        else:
            want = len(buf) - have
            if limit is not None:
                want = min(want, limit - position - have)
        got = _fill(src, view, have, want)
        total = have + got
        eof = got < want
        final = eof or (straddling and _rest_of_entry(view[:total]) == 0)
        try:
            decoded = decode(view[:total], final)
        except CorruptRecordError as exc:
            raise exc.with_path(path, position) from exc
        yield Chunk(position, view[:total], decoded)
        consumed = decoded.consumed
        if final:
            return
        position += consumed
        have = total - consumed
        if consumed:
            buf[:have] = buf[consumed:total]  # the partial entry to the front: a memmove of at most one entry
        elif have == len(buf):
            buf, view = _grown(buf, have, have + max(_rest_of_entry(view[:have]), len(buf)))


def _grown(buf: bytearray, have: int, size: int) -> tuple[bytearray, memoryview]:
    """A larger buffer holding the first ``have`` bytes (the old one may still be referenced by the caller)."""
    grown = bytearray(size)
    grown[:have] = buf[:have]
    return grown, memoryview(grown)


def _rest_of_entry(buf: memoryview) -> int:
    """Bytes still missing from the one partial entry that ``buf`` holds from its start: the rest of the 12-byte
    header while its size is not there yet; 0 when it is complete or declares an impossible size (the decoder then
    names the damage)."""
    if len(buf) < 12:
        return 12 - len(buf)
    (size,) = _SIZE.unpack_from(buf, 8)
    if size < MIN_ENTRY_SIZE:
        return 0
    return max(0, 12 + size - len(buf))


def _fill(src: SegmentFile, view: memoryview, have: int, want: int) -> int:
    """Read up to ``want`` bytes into ``view[have:]``; fewer only at the end of the file."""
    got = 0
    while got < want:
        n = src.readinto(view[have + got : have + want])
        if not n:
            break
        got += n
    return got


def _read_copies(
    src: SegmentFile, path: str, chunk_bytes: int, decode: Callable[[Any, bool], Decoded], start: int, limit: int | None
) -> Iterator[Chunk]:
    if limit is not None:
        raise ValueError("read_chunks: limit needs reuse=True")
    buf = b""
    position = start
    eof = False
    while not eof:
        data = src.read(chunk_bytes)
        eof = not data
        buf = buf + data if buf else data
        try:
            decoded = decode(buf, eof)
        except CorruptRecordError as exc:
            raise exc.with_path(path, position) from exc
        yield Chunk(position, buf, decoded)
        buf = buf[decoded.consumed :]
        position += decoded.consumed


def read_file(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES, deep: bool = True) -> Iterator[Chunk]:
    with open(path, "rb") as src:
        yield from read_chunks(src, str(path), chunk_bytes, deep)


def read_whole(fd: int, size: int) -> bytes | None:
    """The file open as ``fd``, whole, when it holds exactly ``size`` bytes: what ``read_chunks`` reads from position 0
    when ``size`` is below its chunk size (one read of ``size + 1`` bytes that comes back short, one that finds the
    end), with pread: the file position is left alone. None when the file is not that size now (it grew or shrank
    since ``size`` was taken): the caller reads it in chunks then."""
    data = os.pread(fd, size + 1, 0)
    if len(data) != size or os.pread(fd, 1, size):
        return None
    return data


def decode_whole(data: bytes, path: str, decode: Callable[[Any, bool], Decoded] | None = None) -> Chunk:
    """``data``, a whole file (``read_whole``), as the one chunk ``read_chunks`` would make of it: decoded as the final
    buffer (default ``read_entries``), errors naming ``path`` and the file position."""
    try:
        decoded = decode(data, True) if decode is not None else read_entries(data, final=True)
    except CorruptRecordError as exc:
        raise exc.with_path(path, 0) from exc
    return Chunk(0, data, decoded)


def open_unbuffered(path: str | Path) -> tuple[io.FileIO, os.stat_result]:
    """The file for ``read_chunks(reuse=True)`` (no second buffer in between) and its stat, from one open."""
    src = open(path, "rb", buffering=0)  # noqa: SIM115 - the caller closes it
    return src, os.fstat(src.fileno())


# --- finding an entry start in the middle of a segment -------------------------------------------------------------

RESYNC_CHAIN = 4  # entries that must chain from a candidate start (fewer only at the end of the file or window)
_RESYNC_FIRST_WINDOW = 64 << 10
_RESYNC_BLOCK = 1 << 20


def find_entry_start(src: SegmentFile, nominal: int, file_size: int, base_offset: int, max_window: int) -> int | None:
    """The first position at or after ``nominal`` where entries chain: each declares a size of at least 14, a known
    magic and an offset field above the previous one inside base..base+2^31-1, the first one's checksum matches,
    and ``RESYNC_CHAIN`` of them follow one another (fewer where the file ends). ``file_size`` if the file ends
    before one starts; None if none shows within ``max_window`` bytes.

    Record bytes can look like entries (a value may hold a whole message set), so a find is only a proposal: the
    join accepts a range only if the previous range stopped exactly here, and converts the segment whole otherwise.
    """
    if nominal >= file_size:
        return file_size
    window = min(_RESYNC_FIRST_WINDOW, max_window)
    skip = 0  # candidates before this position are refuted already
    while True:
        src.seek(nominal)
        data = src.read(min(window, file_size - nominal))
        at_eof = nominal + len(data) >= file_size
        verdict = _first_chain(data, skip, at_eof, base_offset)
        if isinstance(verdict, tuple):  # a candidate needs more bytes to be judged
            skip = verdict[0]
        elif verdict >= 0:
            return nominal + verdict
        else:  # -1: no candidate left in this window
            if at_eof:
                return file_size
            skip = max(skip, len(data) - HEADER_SIZE_UP_TO_MAGIC + 1)
        if at_eof or window >= max_window:
            return None
        window = min(2 * window, max_window)


def _first_chain(data: bytes, skip: int, at_eof: bool, base_offset: int) -> int | tuple[int]:
    """Offset of the first candidate from ``skip`` whose chain holds; -1 if none; (p,) if candidate p cannot be
    judged within ``data`` (its first entry does not fit)."""
    u8 = np.frombuffer(data, np.uint8)
    n = len(data)
    count = n - HEADER_SIZE_UP_TO_MAGIC + 1
    for block in range(skip, max(count, 0), _RESYNC_BLOCK):
        width = min(_RESYNC_BLOCK, count - block)
        sizes = _be32_at(u8, block + 8, width)
        magics = u8[block + legacy.MAGIC_OFFSET : block + legacy.MAGIC_OFFSET + width]
        for p in (block + np.flatnonzero((sizes >= MIN_ENTRY_SIZE) & (magics <= 2))).tolist():
            holds = _chain_holds(data, p, at_eof, base_offset)
            if holds is None:
                return (p,)
            if holds:
                return p
    return -1


def _be32_at(u8: np.ndarray, at: int, count: int) -> np.ndarray:
    """The big-endian int32s starting at bytes at..at+count-1 (overlapping)."""
    b = [u8[at + k : at + k + count].astype(np.int64) for k in range(4)]
    value = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    return np.where(value >= 2**31, value - 2**32, value)


def _chain_holds(data: bytes, p: int, at_eof: bool, base_offset: int) -> bool | None:
    """Whether entries chain from ``p``; None if the first entry does not fit in ``data`` (read more to judge)."""
    n = len(data)
    previous = base_offset - 1
    for hop in range(RESYNC_CHAIN):
        if p + HEADER_SIZE_UP_TO_MAGIC > n:
            return hop > 0 or None
        offset, size = _OFFSET_SIZE.unpack_from(data, p)
        magic = data[p + legacy.MAGIC_OFFSET]
        if size < MIN_ENTRY_SIZE or magic > 2 or not previous < offset <= base_offset + MAX_RELATIVE_OFFSET:
            return False
        previous = offset
        end = p + 12 + size
        if end > n:
            return True if hop > 0 else (False if at_eof else None)
        if hop == 0 and not _checksum_holds(data, p, end, magic):
            return False
        if end == n:
            return True if at_eof or hop > 0 else None
        p = end
    return True


def _checksum_holds(data: bytes, p: int, end: int, magic: int) -> bool:
    view = memoryview(data)
    if magic < 2:
        if end - p < legacy.LOG_OVERHEAD + legacy.MIN_MESSAGE_SIZE:
            return False
        (stored,) = struct.unpack_from(">I", data, p + legacy.CRC_OFFSET)
        return crc32(view[p + legacy.MAGIC_OFFSET : end]) == stored
    if end - p < 61:
        return False
    (stored,) = struct.unpack_from(">I", data, p + 17)
    return crc32c(view[p + 21 : end]) == stored
