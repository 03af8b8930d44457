"""The ``.lock`` a running broker holds on its log dir, and ours while we act on a stopped one.

A running broker holds an fcntl (POSIX record) lock on ``<log dir>/.lock`` (``FileChannel.tryLock``, i.e.
``fcntl(F_SETLK)``, not ``flock``) and deletes the file on a clean stop.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
import threading
from pathlib import Path

from migrate.errors import LogDirAccessError, LogDirLockedError
from migrate.kafka.names import LOCK_FILE

# --- .lock ------------------------------------------------------------------------------------------------------

# fcntl locks belong to the process: a second descriptor of the same file in this process would "succeed" in
# locking it again, and closing it would drop the first one's lock. So this process remembers what it holds.
_held: dict[str, tuple[int, LogDirLock]] = {}
_held_guard = threading.Lock()


def _lock_key(lock_path: Path) -> str:
    return os.path.realpath(lock_path)


def _held_here(lock_path: Path) -> LogDirLock | None:
    entry = _held.get(_lock_key(lock_path))
    if entry is None or entry[0] != os.getpid():  # after fork() the child holds no fcntl lock
        return None
    return entry[1]


# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid (native alignment)
_FLOCK = struct.Struct("@hhqqi4x")


def getlk_pid(fd: int) -> int | None:
    """fcntl(F_GETLK): the pid of a process whose lock would block an exclusive lock of the whole file, 0 if
    its pid is unknown (another pid namespace), None if nobody's would. Linux only."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    l_type, _, _, _, pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if l_type == fcntl.F_UNLCK else max(pid, 0)


_CAN_GETLK = sys.platform.startswith("linux")


def lock_holder(log_dir: str | Path) -> int | None:
    """Who holds Kafka's fcntl lock on ``<log dir>/.lock``: a pid (0 if unknown), or None if nobody does.

    Read-only: never creates the file; probes with F_GETLK on a read-only descriptor (elsewhere than Linux: takes
    and releases the lock on the existing file). ``flock`` locks are not Kafka's and do not count. This process's
    own LogDirLock counts (its pid is returned).
    """
    path = Path(log_dir) / LOCK_FILE
    if _held_here(path) is not None:
        return os.getpid()
    try:
        fd = os.open(path, (os.O_RDONLY if _CAN_GETLK else os.O_WRONLY) | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # a broker creates .lock before locking it: no file, no holder
    except PermissionError:
        if not _CAN_GETLK:
            raise
        raise LogDirAccessError(
            f"{path}: permission denied opening Kafka's lock file. Run as the broker's user to check whether a "
            "broker is using this log dir."
        ) from None
    try:
        if _CAN_GETLK:
            return getlk_pid(fd)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return 0
            raise
        fcntl.lockf(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class LogDirLock:
    """Hold Kafka's own lock on a log dir (as ``LogManager.lockLogDirs`` does), so no broker can start on it while
    files change: ``fcntl(F_SETLK)`` on ``<log dir>/.lock``, created if missing.

    The one descriptor stays open for the whole hold (closing any descriptor of the file would drop the lock).
    On release the file is deleted if this lock created it (``remove_after`` overrides: a run resumed after a crash
    passes what the first run saw, since the crash left our .lock behind); Kafka's own is left in place.
    """

    def __init__(self, log_dir: str | Path, remove_after: bool | None = None) -> None:
        self.log_dir = Path(log_dir)
        self.path = self.log_dir / LOCK_FILE
        self.remove_after = remove_after
        self.created = False
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> LogDirLock:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this LogDirLock")
        with _held_guard:
            if _held_here(self.path) is not None:
                raise LogDirLockedError(str(self.log_dir), os.getpid(), same_process=True)
            for _ in range(5):
                fd, created = self._open()
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    holder = getlk_pid(fd) if _CAN_GETLK else None
                    os.close(fd)  # the file stays: whoever holds the lock is using it, even one we just created
                    if exc.errno in (errno.EACCES, errno.EAGAIN):
                        raise LogDirLockedError(str(self.log_dir), holder) from None
                    raise LogDirAccessError(f"{self.path}: cannot lock ({exc.strerror})") from exc
                # a broker stopping right now unlocks and deletes .lock: a lock on a deleted file fences nothing
                if self._same_file(fd):
                    break
                os.close(fd)
            else:
                raise LogDirAccessError(
                    f"{self.path} keeps being replaced while we try to lock it: something is starting or stopping on "
                    f"{self.log_dir}. Make sure the broker is stopped, then try again."
                )
            self._fd = fd
            self.created = created
            if self.remove_after is None:
                self.remove_after = created
            _held[_lock_key(self.path)] = (os.getpid(), self)
        return self

    def _open(self) -> tuple[int, bool]:
        flags = os.O_RDWR | os.O_CLOEXEC
        try:
            try:
                return os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                return os.open(self.path, flags), False
        except PermissionError:
            raise LogDirAccessError(
                f"{self.path}: permission denied opening Kafka's lock file for writing. Run kafka-log-migrate as "
                f"the user the broker runs as (the owner of {self.log_dir})."
            ) from None
        except (FileNotFoundError, NotADirectoryError):
            raise LogDirAccessError(f"{self.log_dir}: no such log dir. Check the path (log.dirs).") from None

    def _same_file(self, fd: int) -> bool:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def release(self) -> None:
        fd = self._fd
        if fd is None:
            return
        with _held_guard:
            try:
                if self.remove_after and self._same_file(fd):
                    self.path.unlink(missing_ok=True)  # still locked while it goes, as Kafka's FileLock.destroy
                fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
                self._fd = None
                _held.pop(_lock_key(self.path), None)

    def __enter__(self) -> LogDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
