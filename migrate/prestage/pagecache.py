"""Leave the page cache as it was found: pages of a source that were resident before it was read stay resident (the
broker's consumers read them), pages the read brought in are dropped after, and staged outputs are dropped once on
disk. Kafka relies on the page cache for its consumers and never fadvises itself (design.html, "Don't fear the
filesystem!"); this follows ``nocache``: mincore before, POSIX_FADV_DONTNEED after, on the ranges that were not
resident. Advisory: where mincore or fadvise is missing, nothing is dropped (a broker's pages are never evicted on a
guess).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

import numpy as np

PAGE = mmap.PAGESIZE
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_MAP_FAILED = ctypes.c_void_p(-1).value


def _function(name: str, restype: object, argtypes: list[object]):
    fn = getattr(_LIBC, name, None)
    if fn is not None:
        fn.restype, fn.argtypes = restype, argtypes
    return fn


_mmap = _function(
    "mmap",
    ctypes.c_void_p,
    [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long],
)
_munmap = _function("munmap", ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t])
_mincore = _function("mincore", ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
_sync_file_range = _function(
    "sync_file_range", ctypes.c_int, [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
)
SYNC_FILE_RANGE_START = 2  # SYNC_FILE_RANGE_WRITE: start writeback, do not wait
SYNC_FILE_RANGE_WAIT_ALL = 1 | 2 | 4  # wait for earlier writeback, write, wait for it


def resident_pages(fd: int, size: int) -> np.ndarray | None:
    """One bool per page of the first ``size`` bytes of ``fd``: resident in the page cache now. None when it cannot
    be told (no mincore here, or the mapping failed). Mapping does not fault anything in."""
    if size <= 0:
        return np.zeros(0, bool)
    if _mmap is None or _mincore is None or _munmap is None:
        return None
    addr = _mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        pages = (size + PAGE - 1) // PAGE
        vec = (ctypes.c_ubyte * pages)()
        if _mincore(addr, size, vec) != 0:
            return None
        return (np.ctypeslib.as_array(vec) & 1).astype(bool)
    finally:
        _munmap(addr, size)


def drop_brought_in(fd: int, before: np.ndarray | None) -> int:
    """Drop the pages of ``fd`` that were not resident ``before`` (as ``resident_pages`` told); returns the bytes
    advised. Nothing when ``before`` is None."""
    if before is None or not len(before):
        return 0
    cold = np.concatenate([[False], ~before, [False]])
    edges = np.flatnonzero(cold[1:] != cold[:-1])
    dropped = 0
    for first, end in zip(edges[::2].tolist(), edges[1::2].tolist()):
        os.posix_fadvise(fd, first * PAGE, (end - first) * PAGE, os.POSIX_FADV_DONTNEED)
        dropped += (end - first) * PAGE
    return dropped


def start_writeback(fd: int, offset: int, size: int, wait: bool = False) -> None:
    """Write ``size`` bytes at ``offset`` of ``fd`` to disk now (``wait``: and wait for them), so that dirty data
    stays bounded and the kernel's global dirty limit never stalls the broker's own appends. Advisory."""
    if _sync_file_range is not None and size > 0:
        _sync_file_range(fd, offset, size, SYNC_FILE_RANGE_WAIT_ALL if wait else SYNC_FILE_RANGE_START)
