"""Reading a segment file in chunks: complete entries only, with their file positions, in bounded memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from migrate.errors import CorruptRecordError
from migrate.format.entries import read_entries

DEFAULT_CHUNK_BYTES = 8 << 20


class Decoded(Protocol):
    consumed: int  # bytes of complete entries decoded from the start of the buffer


@dataclass
class Chunk:
    position: int  # file position of buffer[0]
    buffer: bytes
    entries: Any  # what ``decode`` returned: by default Entries (positions relative to buffer; tail in the last)


def read_chunks(
    src: BinaryIO,
    path: str,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    deep: bool = True,
    decode: Callable[[bytes, bool], Decoded] | None = None,
) -> Iterator[Chunk]:
    """Every complete entry of ``src``, a chunk at a time; errors name ``path`` and the file position.

    ``decode(buffer, at_end)`` turns a buffer into entries (default ``read_entries``); the bytes it did not consume
    (a partial entry) are read again with the next chunk.
    """
    decode = decode or (lambda buf, final: read_entries(buf, final=final, deep=deep))
    buf = b""
    position = 0
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
