"""The staging tree as untrusted ground: reached through directory descriptors, never through a path.

Whoever can write beside a log dir can plant, in the staging tree, a symbolic link (to the log dir, to a live
partition, to ``/etc``), a hard link to a live segment, or a directory where a file should be, at any moment. A pass
that followed one would write or delete a running broker's files. So:

- the tree's root is opened once, component by component from ``/`` with ``O_NOFOLLOW``, after every path given was
  resolved; it must be on the log dir's filesystem and neither inside, at, nor above any log dir of the broker (by
  device and inode, not by name);
- every walk, open, create, rename and delete below it is relative to a directory descriptor (``openat``,
  ``unlinkat``, ``renameat``), the last component never followed;
- ``scan`` refuses, before a pass writes or deletes anything, a tree that holds a link, a directory on another device,
  a directory where a file should be, a file with a name elsewhere (a hard link: ``st_nlink`` above one) or a
  directory that is one of the broker's, naming the path and what it is or points at;
- new files are created unnamed (``O_TMPFILE``) and linked under their name only once whole, so a crash never leaves
  a partial file under a name;
- a file is removed only where a record of this tool names it by device and inode, and it is still that regular
  file, with no other name (so never a live file's);
- one pass at a time holds the tree (an fcntl lock on ``.kafka-log-migrate-prestage.lock`` in its root, which the
  kernel drops on a crash), and the cut-over takes the same lock, so no pass rewrites what ``plan`` and ``execute``
  are reading; a second holder is refused with the first one's pid, host and start time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from migrate.errors import MigrateError
from migrate.prestage.location import LOG_DIR_MARKERS, StagingPlaceError, default_staging_root

LOCK_FILE = ".kafka-log-migrate-prestage.lock"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_LINKED_ERRNOS = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)  # what O_NOFOLLOW or O_DIRECTORY say of a wrong entry


class StagingTreeError(StagingPlaceError):
    """The staging tree holds something a pass must not follow or touch: nothing was written or deleted."""


class StagingTreeBusyError(MigrateError):
    """Another pass (or a cut-over) holds the staging tree."""


@dataclass(frozen=True, order=True)
class NodeId:
    """A file or directory by what names it on its filesystem: no rename, link or path trick changes these."""

    device: int
    inode: int

    @classmethod
    def of(cls, st: os.stat_result) -> NodeId:
        return cls(int(st.st_dev), int(st.st_ino))


def describe_entry(dir_fd: int, name: str) -> str:
    """What ``name`` under ``dir_fd`` is, for an operator: 'a symbolic link to X', 'a directory', ..."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return "gone"
    if stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link to {os.readlink(name, dir_fd=dir_fd)}"
        except OSError:
            return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a directory"
    if stat.S_ISREG(st.st_mode):
        return f"a regular file with {st.st_nlink} names" if st.st_nlink > 1 else "a regular file"
    return "a special file (FIFO, socket or device)"


def open_dir_path(path: Path) -> int:
    """A descriptor of the existing directory at the absolute, resolved ``path``, each component opened relative to
    the one before with ``O_NOFOLLOW``: a link planted in the path after it was resolved is refused, never followed.
    FileNotFoundError where a component is missing."""
    fd, missing = walk_existing(path)
    if missing:
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "no such directory", str(path))
    return fd


def walk_existing(path: Path) -> tuple[int, list[str]]:
    """A descriptor of the deepest existing directory on the way to ``path`` (walked as ``open_dir_path`` walks),
    and the names below it still to be made."""
    if not path.is_absolute():
        raise StagingPlaceError(f"{path}: the staging path must be absolute once resolved (a bug: report it)")
    fd = os.open("/", _DIR_FLAGS)
    walked = Path("/")
    parts = list(path.parts[1:])
    try:
        while parts:
            try:
                child = _open_child_dir(fd, parts[0], walked / parts[0], create=False)
            except FileNotFoundError:
                break
            walked /= parts.pop(0)
            fd = _replace_fd(fd, child)
    except BaseException:
        os.close(fd)
        raise
    return fd, parts


def _replace_fd(old: int, new: int) -> int:
    os.close(old)
    return new


def _open_child_dir(parent_fd: int, name: str, path: Path, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as exc:
        if exc.errno in _LINKED_ERRNOS:
            raise StagingTreeError(
                f"{path} is {describe_entry(parent_fd, name)}, where the staging tree needs a directory of its own: "
                "a pass follows no link. Nothing was written or deleted. Check what it is and who made it, remove it "
                "(or name another place with --staging-dir), then run the same command again."
            ) from None
        raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=parent_fd)
    return _open_child_dir(parent_fd, name, path, create=False)


def _ancestry(fd: int) -> list[tuple[NodeId, int]]:
    """The directory open as ``fd`` and each of its ancestors up to the filesystem root, as (identity, descriptor);
    the caller closes the descriptors. ``..`` is never a link, so this walks the real tree whatever names led here."""
    out = []
    current = os.dup(fd)
    try:
        while True:
            st = os.fstat(current)
            out.append((NodeId.of(st), current))
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=current)
            if NodeId.of(os.fstat(parent)) == NodeId.of(st):
                os.close(parent)
                return out
            current = parent
    except BaseException:
        for _, d in out:
            os.close(d)
        raise


def _close_all(pairs: list[tuple[NodeId, int]]) -> None:
    for _, d in pairs:
        os.close(d)


@dataclass(frozen=True)
class TreeRef:
    """A staging tree as another process can open it again: its resolved path and the identity it had when checked
    (``StagingTree.reopen`` refuses another directory put there since)."""

    root: str
    identity: NodeId
    log_dir: str
    log_dir_identity: NodeId


class StagingTree:
    """A log dir's staging tree, open as a directory descriptor and checked; close it (or use ``with``)."""

    def __init__(self, root: Path, fd: int, log_dir: Path, log_dir_identity: NodeId) -> None:
        self.root = root
        self.fd = fd
        self.log_dir = log_dir
        self.log_dir_identity = log_dir_identity
        self.identity = NodeId.of(os.fstat(fd))
        self._lock_fd: int | None = None
        self._holder = ""

    # --- opening and checking the place ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        log_dir: str | Path,
        override: str | Path | None = None,
        *,
        create: bool,
        other_log_dirs: tuple[str | Path, ...] = (),
    ) -> StagingTree | None:
        """The staging tree of ``log_dir`` (``override``: a ``--staging-dir``; else the default beside the log dir),
        opened without following any link and checked against the broker's log dirs (``log_dir`` and
        ``other_log_dirs``). None when it does not exist and ``create`` is False. StagingPlaceError (what to do)
        when the place is one Kafka or the broker's data would suffer from."""
        real = Path(os.path.realpath(log_dir))
        try:
            log_st = os.stat(real)
        except FileNotFoundError:
            raise StagingPlaceError(f"{log_dir}: no such directory. Check the log dir path (log.dirs).") from None
        if not stat.S_ISDIR(log_st.st_mode):
            raise StagingPlaceError(f"{log_dir}: not a directory. Check the log dir path (log.dirs).")
        if override is None and os.stat(real.parent).st_dev != log_st.st_dev:
            raise StagingPlaceError(
                f"{real} is the root of its own filesystem (a mount point), so every place on that filesystem is "
                "inside the log dir, where Kafka deletes or refuses unknown files: pre-staging has nowhere safe to "
                "write. --staging-dir cannot help either (it must be on the log dir's filesystem and outside the log "
                "dir). Mount the disk one level up and point log.dirs at a subdirectory (e.g. /data with "
                "log.dirs=/data/kafka), or migrate this log dir offline (plan/execute with the broker stopped)."
            )
        # the default's last two components are the tool's own, so they are walked, not resolved: a link planted
        # there is refused by name; a --staging-dir is the operator's path, resolved first, then walked alike
        root = default_staging_root(real) if override is None else Path(os.path.realpath(override))
        anchor, missing = walk_existing(root)
        try:
            # judged before anything is made: a refused place gets no directory, inside a log dir least of all
            _check_place(root, anchor, bool(missing), real, NodeId.of(log_st), [real, *map(Path, other_log_dirs)])
            if missing and not create:
                os.close(anchor)
                return None
            walked = root.parents[len(missing) - 1] if missing else root
            for name in missing:
                walked /= name
                anchor = _replace_fd(anchor, _open_child_dir(anchor, name, walked, create=True))
        except BaseException:
            os.close(anchor)
            raise
        return cls(root, anchor, real, NodeId.of(log_st))

    @classmethod
    def reopen(cls, ref: TreeRef) -> StagingTree:
        """The tree ``ref`` names, in another process: refused if another directory stands at its path now."""
        fd = open_dir_path(Path(ref.root))
        tree = cls(Path(ref.root), fd, Path(ref.log_dir), ref.log_dir_identity)
        if tree.identity != ref.identity:
            tree.close()
            raise StagingTreeError(
                f"staging tree {ref.root} is another directory than the one checked (device and inode "
                f"{ref.identity.device}:{ref.identity.inode}, now {tree.identity.device}:{tree.identity.inode}): "
                "was it replaced while this command ran? Nothing was written or deleted; run the command again."
            )
        return tree

    def ref(self) -> TreeRef:
        return TreeRef(str(self.root), self.identity, str(self.log_dir), self.log_dir_identity)

    # --- the lock -----------------------------------------------------------------------------------------------

    def lock(self, holder: str, *, claim: bool = True) -> None:
        """Hold the tree for this process (``holder``: 'prestage pass', 'plan', 'execute'): StagingTreeBusyError,
        naming who holds it, when another process does. ``claim=False``: who holds it is written by ``claim``."""
        if self._lock_fd is not None:
            return
        for _ in range(10):
            fd = self._open_lock_file()
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                who = _holder_text(fd)
                os.close(fd)
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                raise StagingTreeBusyError(
                    f"the staging tree {self.root} is held by {who}: two passes at once would race on the same staged "
                    "files. Wait for it to end (or create its --abort-file to stop it), then run this command again."
                ) from None
            try:  # a lock file replaced since it was opened (by hand) guards nothing: open the one there now
                same = NodeId.of(os.fstat(fd)) == NodeId.of(os.stat(LOCK_FILE, dir_fd=self.fd, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd = fd
                self._holder = holder
                if claim:
                    self.claim()
                return
            os.close(fd)
        raise StagingTreeBusyError(f"{self.root}/{LOCK_FILE} keeps being replaced: another pass is starting or ending")

    def claim(self) -> None:
        """Write who holds the tree into its lock file (the next holder's refusal names it): once the tree was
        scanned, so that a refused pass leaves even the lock file as it found it."""
        if self._lock_fd is None:
            raise StagingTreeError(f"{self.root}: claimed without its lock (a bug: report it)")
        info = {
            "holder": self._holder,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, json.dumps(info).encode(), 0)

    def _open_lock_file(self) -> int:
        """The lock file, made where missing; refused where it is a link, not a regular file, or has another name
        elsewhere (a hard link to a live file would have the holder's name written into it)."""
        path = self.root / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(LOCK_FILE, flags, 0o644, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno not in (*_LINKED_ERRNOS, errno.EISDIR, errno.ENXIO):
                raise
            raise StagingTreeError(
                f"{path} is {describe_entry(self.fd, LOCK_FILE)}, where the staging tree keeps its lock file: "
                "nothing was written or deleted. Remove it (after checking what it is), then run the command again."
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            os.close(fd)
            raise StagingTreeError(
                f"{path} is {describe_entry(self.fd, LOCK_FILE)}, not the lock file this tool makes (a regular file "
                "with no other name): nothing was written or deleted. Remove it (after checking what it is), then "
                "run the command again."
            )
        return fd

    def unlock(self) -> None:
        """Release the tree. The lock file stays (it is the tree's own, empty of meaning once no process holds it):
        a pass that is refused then leaves the tree exactly as it found it."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.unlock()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> StagingTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what is in it ------------------------------------------------------------------------------------------

    def partition_names(self) -> list[str]:
        """The names at the tree's root, but its lock file, in order (each checked a directory by ``partition``)."""
        return sorted(n for n in os.listdir(self.fd) if n != LOCK_FILE)

    def partition(self, name: str, create: bool = False) -> PartitionStaging | None:
        """The staging dir ``name`` of one partition (made, with ``create``), None where there is none;
        StagingTreeError where ``name`` is a link or not a directory, or a directory of another filesystem."""
        if not name or "/" in name or name in (".", ".."):
            raise StagingTreeError(f"{self.root}: {name!r} is not a partition's name (a bug: report it)")
        path = self.root / name
        try:
            fd = _open_child_dir(self.fd, name, path, create)
        except FileNotFoundError:
            return None
        st = os.fstat(fd)
        if st.st_dev != self.identity.device:
            os.close(fd)
            raise StagingTreeError(
                f"{path} is on another filesystem (device {st.st_dev}, the staging tree {self.identity.device}): "
                "something is mounted there. Nothing was written or deleted. Unmount it (after checking what it is), "
                "then run the same command again."
            )
        return PartitionStaging(name, path, fd)

    def scan(self, live: frozenset[NodeId] = frozenset(), skip: frozenset[str] = frozenset()) -> TreeScan:
        """Every entry of the tree checked before anything is written or deleted in it; ``live``: the identities of
        the broker's log dirs, partition dirs and segment files (none may be in the tree under any name); ``skip``:
        partitions the caller scanned itself (``PartitionStaging.scan``). StagingTreeError names the first entry
        that is wrong and what it is."""
        files = 0
        for name in self.partition_names():
            if name in skip:
                continue
            part = self.partition(name)
            if part is None:
                continue  # gone since it was listed: nothing to check
            with part:
                files += len(part.scan(live))
        return TreeScan(files)


def _check_place(
    root: Path, anchor: int, missing: bool, log_dir: Path, log_dir_id: NodeId, log_dirs: list[Path]
) -> None:
    """Refuse a staging root that is not on ``log_dir``'s filesystem, lies inside (or at) one of ``log_dirs`` or
    inside a directory that looks like a log dir, or contains a log dir: judged by device and inode from ``anchor``,
    the deepest directory of ``root`` that exists (``missing``: ``root`` itself does not yet, it would be made in
    ``anchor``)."""
    anchor_st = os.fstat(anchor)
    if anchor_st.st_dev != log_dir_id.device:
        raise StagingPlaceError(
            f"staging dir {root} is on another filesystem than log dir {log_dir} (device {anchor_st.st_dev} vs "
            f"{log_dir_id.device}): the cut-over must rename staged files into place. Name a directory on the log "
            "dir's filesystem, outside the log dir, with --staging-dir."
        )
    ancestry = _ancestry(anchor)
    try:
        ids = [node for node, _ in ancestry]
        for other in log_dirs:
            try:
                log_fd = os.open(os.path.realpath(other), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                log_id = NodeId.of(os.fstat(log_fd))
                log_ancestry = _ancestry(log_fd)
            finally:
                os.close(log_fd)
            log_ids = [node for node, _ in log_ancestry]
            _close_all(log_ancestry)
            if log_id in ids:
                raise StagingPlaceError(
                    f"staging dir {root} is inside log dir {other} (or is it, through a link): Kafka deletes "
                    "partition dirs with everything in them and refuses to start on an unknown directory at a log "
                    "dir's root. Name a directory outside every log dir, on the same filesystem, with --staging-dir."
                )
            if not missing and ids[0] in log_ids:
                raise StagingPlaceError(
                    f"staging dir {root} contains log dir {other}: name a directory beside the log dir, not above it."
                )
        for node, ancestor_fd in ancestry[(0 if missing else 1) :]:
            markers = [m for m in LOG_DIR_MARKERS if _exists_at(ancestor_fd, m)]
            if markers:
                raise StagingPlaceError(
                    f"staging dir {root} would be inside a directory (device and inode {node.device}:{node.inode}) "
                    f"that looks like a Kafka log dir (it holds {', '.join(markers)}): Kafka refuses to start on an "
                    "unknown directory at a log dir's root. Name a directory outside every log dir with "
                    "--staging-dir."
                )
    finally:
        _close_all(ancestry)


@dataclass(frozen=True)
class TreeScan:
    files: int


def _exists_at(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _holder_text(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or not info:
        return "another process (it wrote no name yet)"
    return (
        f"a {info.get('holder', 'kafka-log-migrate process')} (pid {info.get('pid', '?')} on host "
        f"{info.get('host', '?')}, since {info.get('since', '?')})"
    )


class PartitionStaging:
    """One partition's staging dir, open as a directory descriptor: every file reached by name below it."""

    def __init__(self, name: str, path: Path, fd: int) -> None:
        self.name = name
        self.path = path
        self.fd = fd
        self._named_new: dict[int, str] = {}  # new files given a hidden name (no O_TMPFILE here), by descriptor

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PartitionStaging:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry ``name`` itself (a link is not followed), or None."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def scan(self, live: frozenset[NodeId] = frozenset()) -> dict[str, os.stat_result]:
        """This dir and every entry in it checked as ``StagingTree.scan`` checks them: each entry's stat, by name
        (the caller judges the staged files by it, with no second lstat)."""
        node = NodeId.of(os.fstat(self.fd))
        if node in live:
            raise StagingTreeError(
                f"{self.path} is one of the broker's own directories (device and inode {node.device}:{node.inode}: a "
                "bind mount?). Nothing was written or deleted. Remove it from the staging tree (after checking what "
                "it is), then run the same command again."
            )
        return {entry: self.check_entry(entry, live) for entry in os.listdir(self.fd)}

    def check_entry(self, name: str, live: frozenset[NodeId] = frozenset()) -> os.stat_result:
        """``name`` must be a regular file with no other name, and none of the broker's: else StagingTreeError."""
        st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        problem = ""
        if not stat.S_ISREG(st.st_mode):
            problem = describe_entry(self.fd, name)
        elif NodeId.of(st) in live:
            problem = "one of the broker's live files, under a second name (a hard link)"
        elif st.st_nlink > 1:
            problem = f"a file with {st.st_nlink} names (a hard link to a file elsewhere)"
        if problem:
            raise StagingTreeError(
                f"{self.path / name} is {problem}, where a pass keeps only regular files it wrote: it follows, "
                "overwrites and deletes none of that. Nothing was written or deleted. Remove it from the staging tree "
                "(after checking what it is and who made it), then run the same command again."
            )
        return st

    def open_read(self, name: str) -> int:
        """``name`` opened read-only (not followed, not blocking on a FIFO); OSError where it is not a regular file
        (ELOOP for a link)."""
        fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.path / name))
        except BaseException:
            os.close(fd)
            raise
        return fd

    def new_file(self, mode: int = 0o644) -> int:
        """A new unnamed file in this dir, open read-write (``O_TMPFILE``): nothing appears under any name until
        ``link``; a crash leaves nothing. Where the filesystem has no ``O_TMPFILE``, a file of a fresh hidden name
        (``.kafka-log-migrate-new-<pid>-<n>``) created exclusively, which ``link`` renames."""
        try:
            return os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
        for n in range(1000):
            name = f"{_NAMED_NEW_PREFIX}{os.getpid()}-{time.monotonic_ns()}-{n}"
            try:
                flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(name, flags, mode, dir_fd=self.fd)
            except FileExistsError:
                continue
            self._named_new[fd] = name
            return fd
        raise OSError(errno.EEXIST, "no fresh name for a new file", str(self.path))

    def link(self, fd: int, name: str) -> None:
        """Give the file open as ``fd`` (from ``new_file``) the name ``name``; FileExistsError where something is
        there already (never replaced: the caller removed its own file of that name first)."""
        named = self._named_new.pop(fd, None)
        if named is None:
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=self.fd, follow_symlinks=True)
            return
        if self.lstat(name) is not None:
            self._named_new[fd] = named
            raise FileExistsError(errno.EEXIST, "exists", str(self.path / name))
        os.rename(named, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def forget_new(self, fd: int) -> None:
        """A ``new_file`` that will not be linked: closed, and removed where it has a hidden name."""
        named = self._named_new.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)
        if named is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(named, dir_fd=self.fd)

    def remove_owned(self, name: str, owned: NodeId) -> bool:
        """Unlink ``name`` where it is still the regular file ``owned`` names, with no other name: True when removed
        (or gone already), False where something else is there now (left alone)."""
        st = self.lstat(name)
        if st is None:
            return True
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or NodeId.of(st) != owned:
            return False
        os.unlink(name, dir_fd=self.fd)
        return True

    def rename_out(self, name: str, dst_fd: int, dst_name: str) -> None:
        """Move ``name`` out of the staging tree, into the directory open as ``dst_fd`` (renameat: neither name is
        followed)."""
        os.rename(name, dst_name, src_dir_fd=self.fd, dst_dir_fd=dst_fd)

    def fsync(self) -> None:
        os.fsync(self.fd)


_NAMED_NEW_PREFIX = ".kafka-log-migrate-new-"


def iter_partitions(tree: StagingTree) -> Iterator[PartitionStaging]:
    """Each partition staging dir of ``tree`` in name order, open (closed after each step of the iteration)."""
    for name in tree.partition_names():
        part = tree.partition(name)
        if part is None:
            continue
        with part:
            yield part
