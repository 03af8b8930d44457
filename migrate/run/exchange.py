"""Two directories exchanged in one atomic step: Linux ``renameat2(RENAME_EXCHANGE)``, and how a log dir's
filesystem is judged able to do it.

After the exchange each name holds the other's directory: a reader of the partition's path sees either the whole
original directory or the whole converted one, never a mix, and a crash leaves one or the other. ext4, xfs, btrfs,
f2fs and tmpfs implement the flag (``Documentation/filesystems/vfs.rst``, ``rename`` with ``RENAME_EXCHANGE``); a
filesystem that does not answers EINVAL (some network and FUSE filesystems), and a kernel without ``renameat2``
ENOSYS: such a log dir gets two renames under the fence instead (``ExchangeMethod.RENAMES``), with a record that
makes a crash between them finishable (``migrate.run.partition``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

from migrate.model.plan_tree import ExchangeMethod

RENAME_NOREPLACE = 1 << 0  # linux/fs.h
RENAME_EXCHANGE = 1 << 1
_AT_FDCWD = -100

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
if _renameat2 is not None:
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    _renameat2.restype = ctypes.c_int

# statfs(2) f_type of the filesystems known to implement RENAME_EXCHANGE (linux/magic.h)
_EXCHANGING_FILESYSTEMS = {
    0xEF53: "ext4",  # also ext2 and ext3, which share the magic; ext4's driver serves them on modern kernels
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0xF2F52010: "f2fs",
    0x01021994: "tmpfs",
}


class ExchangeUnsupported(OSError):
    """The filesystem (or the kernel) cannot exchange two names atomically: use two renames."""


def exchange(dir_a: int, name_a: str, dir_b: int, name_b: str) -> None:
    """Exchange ``name_a`` under the directory open as ``dir_a`` with ``name_b`` under ``dir_b`` (both must exist,
    on one filesystem). ExchangeUnsupported where the filesystem or kernel cannot; OSError otherwise."""
    if _renameat2 is None:
        raise ExchangeUnsupported(errno.ENOSYS, "renameat2 is not in this C library", name_a)
    if _renameat2(dir_a, os.fsencode(name_a), dir_b, os.fsencode(name_b), RENAME_EXCHANGE) == 0:
        return
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        raise ExchangeUnsupported(err, os.strerror(err), name_a)
    raise OSError(err, os.strerror(err), name_a)


def rename_noreplace(dir_a: int, name_a: str, dir_b: int, name_b: str) -> None:
    """Move ``name_a`` to ``name_b``, never over a file already there (FileExistsError): ``RENAME_NOREPLACE``, or a
    hard link and an unlink where the filesystem has no such flag."""
    if _renameat2 is not None:
        if _renameat2(dir_a, os.fsencode(name_a), dir_b, os.fsencode(name_b), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), name_b)
        if err not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(err, os.strerror(err), name_a)
    os.link(name_a, name_b, src_dir_fd=dir_a, dst_dir_fd=dir_b, follow_symlinks=False)
    os.unlink(name_a, dir_fd=dir_a)


def filesystem_name(path: str | os.PathLike[str]) -> str:
    """What statfs(2) says the filesystem of ``path`` is, by its magic number ('0x...' where not known here)."""
    magic = _statfs_type(path)
    return _EXCHANGING_FILESYSTEMS.get(magic, f"0x{magic:x}") if magic is not None else "unknown"


def expected_method(path: str | os.PathLike[str]) -> ExchangeMethod:
    """The method a log dir is expected to get, by its filesystem's type alone (nothing is written): what ``plan``
    says; ``execute`` tries the exchange itself and falls back on its answer."""
    return ExchangeMethod.EXCHANGE if _statfs_type(path) in _EXCHANGING_FILESYSTEMS else ExchangeMethod.RENAMES


class _Statfs(ctypes.Structure):
    # struct statfs on 64-bit Linux: f_type first, then the counts this module does not read
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112)]


_statfs = getattr(_libc, "statfs", None)


def _statfs_type(path: str | os.PathLike[str]) -> int | None:
    if _statfs is None:
        return None
    buf = _Statfs()
    if _statfs(os.fsencode(os.fspath(path)), ctypes.byref(buf)) != 0:
        return None
    return buf.f_type & 0xFFFFFFFF
