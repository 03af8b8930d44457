"""Reading a segment file in chunks: complete entries only, with their file positions, in bounded memory."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from migrate.errors import CorruptRecordError
from migrate.format.entries import Entries, read_entries

DEFAULT_CHUNK_BYTES = 8 << 20


@dataclass
class Chunk:
    position: int  # file position of buffer[0]
    buffer: bytes
    entries: Entries  # positions relative to buffer; ``tail`` only in the last chunk


def read_chunks(src: BinaryIO, path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES, deep: bool = True) -> Iterator[Chunk]:
    """Every complete entry of ``src``, a chunk at a time; errors name ``path`` and the file position."""
    buf = b""
    position = 0
    eof = False
    while not eof:
        data = src.read(chunk_bytes)
        eof = not data
        buf = buf + data if buf else data
        try:
            entries = read_entries(buf, final=eof, deep=deep)
        except CorruptRecordError as exc:
            raise exc.with_path(path, position) from exc
        yield Chunk(position, buf, entries)
        buf = buf[entries.consumed :]
        position += entries.consumed


def read_file(path: str | Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES, deep: bool = True) -> Iterator[Chunk]:
    with open(path, "rb") as src:
        yield from read_chunks(src, str(path), chunk_bytes, deep)
