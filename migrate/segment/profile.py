"""What a segment holds, by format, without decoding a record: for ``scan`` and ``plan``. Streams the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import walk_entries
from migrate.format.records import Compression
from migrate.segment.reader import read_chunks


@dataclass
class SegmentProfile:
    entries_by_magic: dict[str, int] = field(default_factory=dict)
    bytes_by_magic: dict[str, int] = field(default_factory=dict)
    compressions: dict[str, int] = field(default_factory=dict)
    plain_legacy_by_magic: dict[str, int] = field(default_factory=dict)  # uncompressed v0/v1 messages
    wrappers: int = 0  # compressed v0/v1 messages
    valid_bytes: int = 0
    tail_position: int | None = None
    tail_bytes: int = 0

    def has_magic_below(self, magic: int) -> bool:
        return any(int(m) < magic for m in self.entries_by_magic)


def profile_segment(path: str | Path, chunk_bytes: int = 8 << 20) -> SegmentProfile:
    profile = SegmentProfile()
    with open(path, "rb") as src:
        for chunk in read_chunks(src, str(path), chunk_bytes, decode=lambda buf, final: walk_entries(buf)):
            walk = chunk.entries
            buf = chunk.buffer
            for p, size, magic in zip(walk.positions.tolist(), walk.sizes.tolist(), walk.magics.tolist()):
                key = str(magic)
                profile.entries_by_magic[key] = profile.entries_by_magic.get(key, 0) + 1
                profile.bytes_by_magic[key] = profile.bytes_by_magic.get(key, 0) + size
                at = v2.ATTRIBUTES_OFFSET + 1 if magic == v2.MAGIC else legacy.ATTRIBUTES_OFFSET  # codec bits' byte
                codec = Compression(buf[p + at] & legacy.CODEC_MASK) if buf[p + at] & 7 <= 4 else None
                name = codec.label if codec is not None else "unknown"
                profile.compressions[name] = profile.compressions.get(name, 0) + 1
                if magic < v2.MAGIC:
                    if codec == Compression.NONE:
                        profile.plain_legacy_by_magic[key] = profile.plain_legacy_by_magic.get(key, 0) + 1
                    else:
                        profile.wrappers += 1
            profile.valid_bytes = chunk.position + walk.consumed
    size = Path(path).stat().st_size
    if size > profile.valid_bytes:
        profile.tail_position = profile.valid_bytes
        profile.tail_bytes = size - profile.valid_bytes
    return profile
