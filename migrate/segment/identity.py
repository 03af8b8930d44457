"""Is this still the planned file, the file that was converted? The tests used wherever the tool is about to trust a
file it saw earlier.

A file's identity here is what a broker or an operator cannot change without it showing: the inode (a rename or a
replacement changes it), the size and the mtime (an append or a truncation), the ctime (any write, truncate, chmod,
link or utime, even one that puts size and mtime back: the kernel sets ctime to now and no unprivileged call can set
it back), and a digest of the first and last bytes (a same-size rewrite by a tool that also forged the times, and a
copy restored over the file). Reading the whole file again would cost as much as converting it; the edges cost two
small reads.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol

from migrate.model.plan_tree import SegmentPlan
from migrate.model.run_state import FileStat, SegmentResult

EDGE_BYTES = 64 << 10


def edges_digest(path: str | Path) -> str:
    """sha256 over the size, the first and the last ``EDGE_BYTES`` of the file (the whole file when it is smaller).
    Through a bare file descriptor, no file object: a swap and a finalize ask it of 10^6 live and staged files."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return edges_digest_of(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def edges_digest_of(fd: int, size: int) -> str:
    """``edges_digest`` of an open file, read with pread (the file position is left alone)."""
    h = hashlib.sha256(size.to_bytes(8, "big"))
    h.update(os.pread(fd, min(size, EDGE_BYTES), 0))
    if size > EDGE_BYTES:
        tail = max(EDGE_BYTES, size - EDGE_BYTES)
        h.update(os.pread(fd, size - tail, tail))
    return h.hexdigest()


def edges_digest_of_bytes(data: bytes | memoryview, size: int) -> str:
    """``edges_digest`` of a file whose ``size`` bytes are ``data`` (read whole already)."""
    if len(data) != size:
        raise ValueError(f"edges_digest_of_bytes: {len(data)} bytes given for a file of {size}")
    h = hashlib.sha256(size.to_bytes(8, "big"))
    h.update(data[: min(size, EDGE_BYTES)])
    if size > EDGE_BYTES:
        h.update(data[max(EDGE_BYTES, size - EDGE_BYTES) : size])
    return h.hexdigest()


def _describe(st: os.stat_result) -> str:
    return f"{st.st_size} bytes, mtime_ns {st.st_mtime_ns}, inode {st.st_ino}, ctime_ns {st.st_ctime_ns}"


def planned_file_change(path: str | Path, seg: SegmentPlan) -> str | None:
    """What differs between the live ``path`` and the segment file the plan saw (inode, size, mtime), or None.

    The plan keeps no ctime: a rollback of the same plan sets the originals' ctimes (its links and renames) and the
    plan must still run after it. The conversion records ctime and edges as it reads; ``changed_since_stat``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} is missing"
    planned = f"planned {seg.size} bytes, mtime_ns {seg.mtime_ns}, inode {seg.inode}"
    if FileStat.of(st) != FileStat(seg.inode, seg.size, seg.mtime_ns):
        return f"{path}: {_describe(st)}; {planned}"
    return None


class ReadSource(Protocol):
    """What a conversion recorded of its source as it read it (a SegmentResult, or the swap's SwapSource)."""

    source_ctime_ns: int
    source_edges: str


def changed_since_stat(path: str | Path, st: os.stat_result | None, result: SegmentResult | ReadSource) -> str | None:
    """What changed in the live source ``path`` since the conversion read it, though its size, mtime and inode may
    not have: its ctime, or its first and last bytes. ``st``: a stat of ``path`` just taken by the caller (None: it
    was missing). None where the conversion recorded neither (a joined range conversion, a state from an older
    version)."""
    if st is None:
        return f"{path} is missing"
    if result.source_ctime_ns and st.st_ctime_ns != result.source_ctime_ns:
        return (
            f"{path} changed after it was converted: same size, mtime and inode, but its ctime is {st.st_ctime_ns}, "
            f"{result.source_ctime_ns} when it was read: it was written, truncated, linked or had its times set since"
        )
    if result.source_edges and edges_digest(path) != result.source_edges:
        return f"{path} changed after it was converted: its first or last bytes differ from those that were read"
    return None
