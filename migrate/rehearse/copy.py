"""The copy a rehearsal ``--on-copy`` runs on: segment files as hard links (else copy-on-write reflinks, else plain
copies), the broker's small files always as plain copies, so the canary's own live files are never renamed."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from migrate.rehearse.records import CopiedLogDir
from migrate.run import faults
from migrate.run.workspace import fsync_dir, sync_filesystem

COPY_LINK_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
COPY_MARKER = ".kafka-log-migrate-rehearsal-copy"
FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
# errors that mean "this filesystem cannot link/clone here", so the next method is tried; anything else is real
_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EACCES}
_NO_CLONE = {errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EBADF}


def copy_targets(log_dirs: Iterable[str], dest: str | Path) -> list[Path]:
    """Where each log dir's copy goes: DIR/<its name>, numbered when two log dirs share a name."""
    log_dirs = list(log_dirs)
    names = [Path(d).name for d in log_dirs]
    dest = Path(dest)
    if len(set(names)) == len(names):
        return [dest / n for n in names]
    return [dest / f"{i}-{n}" for i, n in enumerate(names)]


def _reflink(src: Path, dst: Path) -> bool:
    """A copy-on-write clone (FICLONE, what ``cp --reflink=always`` does): True if the filesystem made one."""
    try:
        with open(src, "rb") as s, open(dst, "xb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
    except OSError as exc:
        dst.unlink(missing_ok=True)
        if exc.errno in _NO_CLONE:
            return False
        raise
    shutil.copystat(src, dst)
    return True


class _Copier:
    """Copies one log dir; remembers which methods this filesystem refused so it does not retry them per file."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.segment_methods: Counter[str] = Counter()
        self.other_methods: Counter[str] = Counter()
        self.files = 0
        self.bytes = 0
        self.dereferenced: list[str] = []

    def file(self, src: Path, dst: Path) -> None:
        faults.point("rehearse:copy-file")
        size = os.stat(src).st_size
        if src.name.endswith(COPY_LINK_SUFFIXES):
            self.segment_methods[self._segment(src, dst)] += 1
        else:
            shutil.copy2(src, dst)  # a broker rewrites these in place: never share their inodes
            self.other_methods["copy"] += 1
        self.files += 1
        self.bytes += size

    def _segment(self, src: Path, dst: Path) -> str:
        if "hardlink" not in self.refused:
            try:
                os.link(src, dst, follow_symlinks=True)
                return "hardlink"
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                self.refused.add("hardlink")
        if "reflink" not in self.refused:
            if _reflink(src, dst):
                return "reflink"
            self.refused.add("reflink")
        shutil.copy2(src, dst)
        return "copy"

    def tree(self, src: Path, dst: Path, rel: str = ".") -> None:
        os.mkdir(dst)
        with os.scandir(src) as it:
            children = sorted(it, key=lambda e: e.name)
        for entry in children:
            child_rel = entry.name if rel == "." else f"{rel}/{entry.name}"
            s, d = src / entry.name, dst / entry.name
            if entry.is_symlink():
                self.dereferenced.append(child_rel)
            if entry.is_dir(follow_symlinks=True):
                self.tree(s, d, child_rel)
            elif entry.is_file(follow_symlinks=True):
                self.file(s, d)
            # sockets and fifos have no place in a log dir and nothing to copy
        shutil.copystat(src, dst)  # last: filling the directory changed its mtime


def copy_log_dir(source: str | Path, copy: str | Path) -> CopiedLogDir:
    copier = _Copier()
    copier.tree(Path(source).resolve(), Path(copy))
    sync_filesystem(copy)  # the copy is the rehearsal's "before": a power cut must not leave it half written
    fsync_dir(Path(copy).parent)
    return CopiedLogDir(
        source=str(source),
        copy=str(copy),
        files=copier.files,
        bytes=copier.bytes,
        segment_methods=dict(sorted(copier.segment_methods.items())),
        other_methods=dict(sorted(copier.other_methods.items())),
        dereferenced_symlinks=tuple(copier.dereferenced),
    )


def copy_method_words(copies: Iterable[CopiedLogDir]) -> str:
    seg: Counter[str] = Counter()
    other: Counter[str] = Counter()
    for c in copies:
        seg.update(c.segment_methods)
        other.update(c.other_methods)
    words = {"hardlink": "hard links", "reflink": "copy-on-write reflinks", "copy": "plain copies"}

    def describe(counts: Counter[str]) -> str:
        if not counts:
            return "none"
        return " and ".join(f"{words[m]} ({n})" for m, n in sorted(counts.items(), key=lambda kv: -kv[1]))

    return f"segment files: {describe(seg)}; the broker's other files: {describe(other)}"
