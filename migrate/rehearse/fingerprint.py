"""Fingerprints of a directory tree: every file, directory and symlink under it with its kind, size, mtime, mode,
inode and sha256, and the differences between two of them. The rehearsal takes one before and one after, and the
rollback passes only when they are identical."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from pathlib import Path

from migrate.errors import MigrateError
from migrate.rehearse.records import FileFingerprint, FingerprintChange, FingerprintComparison, TreeFingerprint, now

MAX_CHANGES_LISTED = 200


def _sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def fingerprint_tree(root: str | Path) -> TreeFingerprint:
    """Every entry under ``root`` and root itself. Symlinks are recorded as links and followed (a partition dir may
    be a symlink onto another disk, and its files are what Kafka reads), each directory once."""
    root = Path(root)
    entries: list[FileFingerprint] = []
    seen_dirs: set[tuple[int, int]] = set()

    def add(rel: str, path: Path) -> None:
        try:
            lst = os.lstat(path)
        except FileNotFoundError:
            raise MigrateError(
                f"{path} disappeared while it was being fingerprinted: something is using this log dir. Stop the "
                "broker (and any other tool working on it) and rehearse again."
            ) from None
        link = os.readlink(path) if stat.S_ISLNK(lst.st_mode) else ""
        try:
            st = os.stat(path) if link else lst
        except FileNotFoundError:
            entries.append(FileFingerprint(rel, "symlink", 0, lst.st_mtime_ns, lst.st_mode, lst.st_ino, "", link))
            return
        kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
        digest = _sha256_file(path) if kind == "file" else ""
        size = st.st_size if kind == "file" else 0
        if link:
            entries.append(
                FileFingerprint(rel, "symlink", size, st.st_mtime_ns, st.st_mode, lst.st_ino, digest, link, kind)
            )
        else:
            entries.append(FileFingerprint(rel, kind, size, st.st_mtime_ns, st.st_mode, st.st_ino, digest))
        if kind == "dir" and (st.st_dev, st.st_ino) not in seen_dirs:
            seen_dirs.add((st.st_dev, st.st_ino))
            with os.scandir(path) as it:
                names = sorted(e.name for e in it)
            for name in names:
                add(name if rel == "." else f"{rel}/{name}", path / name)

    add(".", root)
    entries.sort(key=lambda e: e.path)
    body = json.dumps([dataclasses.astuple(e) for e in entries], separators=(",", ":")).encode()
    return TreeFingerprint(
        root=str(root),
        taken=now(),
        files=sum(1 for e in entries if e.kind == "file"),
        dirs=sum(1 for e in entries if e.kind == "dir"),
        bytes=sum(e.size for e in entries if e.kind == "file"),
        digest=hashlib.sha256(body).hexdigest(),
        entries=tuple(entries),
    )


def compare_fingerprints(
    what: str, before: TreeFingerprint, after: TreeFingerprint, *, inodes: bool = True
) -> FingerprintComparison:
    """Every difference between two fingerprints; ``inodes=False`` compares a copy with its source."""
    old = {e.path: e for e in before.entries}
    new = {e.path: e for e in after.entries}
    changes: list[FingerprintChange] = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a is None:
            assert b is not None
            changes.append(FingerprintChange(path, "added", "", f"{b.kind}, {b.size} bytes"))
            continue
        if b is None:
            changes.append(FingerprintChange(path, "removed", f"{a.kind}, {a.size} bytes", ""))
            continue
        if a.kind != b.kind:
            changes.append(FingerprintChange(path, "kind", a.kind, b.kind))
            continue
        if a.size != b.size:
            changes.append(FingerprintChange(path, "size", str(a.size), str(b.size)))
        elif a.sha256 != b.sha256:
            changes.append(FingerprintChange(path, "content", a.sha256, b.sha256))
        if a.mtime_ns != b.mtime_ns:
            changes.append(FingerprintChange(path, "mtime", str(a.mtime_ns), str(b.mtime_ns)))
        if a.mode != b.mode:
            changes.append(FingerprintChange(path, "mode", oct(a.mode), oct(b.mode)))
        if a.target != b.target:
            changes.append(FingerprintChange(path, "target", a.target, b.target))
        if inodes and a.inode != b.inode:
            changes.append(FingerprintChange(path, "inode", str(a.inode), str(b.inode)))
    return FingerprintComparison(
        what=what,
        before_root=before.root,
        after_root=after.root,
        identical=not changes,
        entries_before=len(before.entries),
        entries_after=len(after.entries),
        before_digest=before.digest,
        after_digest=after.digest,
        total_changes=len(changes),
        changes=tuple(changes[:MAX_CHANGES_LISTED]),
    )


def dereferenced(fp: TreeFingerprint) -> TreeFingerprint:
    """The tree as a copy holds it: what each symlink leads to as a real directory or file, not the link itself."""
    entries = tuple(
        dataclasses.replace(e, kind=e.followed, target="", followed="") if e.kind == "symlink" and e.followed else e
        for e in fp.entries
    )
    return dataclasses.replace(fp, entries=entries)
