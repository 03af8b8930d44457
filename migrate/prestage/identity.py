"""What names a file for pre-staging: the five stat fields no writer can keep equal across a change, plus a digest
of its first and last bytes.

mtime alone is not identity: Kafka's cleaner copies the last source's mtime onto its replacement segment
(``Cleaner.cleanSegments``, ``setLastModified``) and ext4 reuses inode numbers; ctime cannot be set from user space,
and every rename, truncate, write or link changes it. The edge digest catches what stat cannot see: a file rewritten
in place through a mapping (no ctime change is promised for mmap writes until the next msync).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

EDGE_BYTES = 64 << 10  # of the head and of the tail of a source: a few page reads even at the cut-over


@dataclass(frozen=True)
class FileIdentity:
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(int(st.st_dev), int(st.st_ino), int(st.st_size), int(st.st_mtime_ns), int(st.st_ctime_ns))

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> FileIdentity | None:
        """The identity of ``path`` now (a symlink is followed), or None when nothing is there."""
        try:
            return cls.of(os.stat(path))
        except FileNotFoundError:
            return None

    def differences(self, other: FileIdentity | None) -> str:
        """What differs from ``other``, for an operator: '' when nothing does."""
        if other is None:
            return "the file is gone"
        names = ("device", "inode", "size", "mtime_ns", "ctime_ns")
        changed = [
            f"{n} {getattr(self, n)} -> {getattr(other, n)}" for n in names if getattr(self, n) != getattr(other, n)
        ]
        return ", ".join(changed)


@dataclass(frozen=True)
class EdgeDigest:
    """sha256 of a file's first ``edge_bytes`` followed by its last ``edge_bytes`` (the whole file when smaller)."""

    edge_bytes: int
    sha256: str

    @classmethod
    def of_fd(cls, fd: int, size: int, edge_bytes: int = EDGE_BYTES) -> EdgeDigest:
        h = hashlib.sha256()
        head = min(size, edge_bytes)
        h.update(_pread_exactly(fd, head, 0))
        tail_start = max(head, size - edge_bytes)
        h.update(_pread_exactly(fd, size - tail_start, tail_start))
        return cls(edge_bytes, h.hexdigest())

    @classmethod
    def of_path(cls, path: str | os.PathLike[str], edge_bytes: int = EDGE_BYTES) -> EdgeDigest:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return cls.of_fd(fd, os.fstat(fd).st_size, edge_bytes)
        finally:
            os.close(fd)


def _pread_exactly(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        data = os.pread(fd, size, offset)
        if not data:
            break  # shorter than its stat said: the identity check that follows rejects it
        parts.append(data)
        size -= len(data)
        offset += len(data)
    return b"".join(parts)
