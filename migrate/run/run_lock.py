"""One run at a time: execute, rollback and finalize hold an exclusive lock on the plan's state for their whole run.

The lock is an fcntl lock on ``<log dir>/.kafka-log-migrate-<plan id>.run``, a hidden file Kafka ignores, holding
who took it (pid, host, verb, since when). The kernel releases it when the process ends however it ends, so a crash
never leaves a stale lock; the file itself is removed on a normal release. A second run is refused at once with the
holder's pid and host.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path

from migrate.errors import RunLockedError
from migrate.kafka.lock import getlk_pid
from migrate.run.workspace import RUN_LOCK_SUFFIX, STATE_SUFFIX, run_lock_path, state_path


class RunLock:
    def __init__(self, log_dirs: list[str], plan_id: str, verb: str) -> None:
        self.paths = [run_lock_path(d, plan_id) for d in log_dirs]
        self.plan_id = plan_id
        self.verb = verb
        self._held: list[tuple[Path, int]] = []
        self.dir_mtimes: dict[str, int] = {}  # each log dir's mtime before our lock file appeared in it
        self.dir_names: dict[str, set[str]] = {}  # and the names in it then, our lock file aside

    def acquire(self) -> RunLock:
        try:
            for path in self.paths:
                self._held.append((path, self._lock(path)))
        except BaseException:
            self.release()
            raise
        return self

    def _lock(self, path: Path) -> int:
        for _ in range(10):
            fd = self._try_lock(path)
            # a holder releasing right now unlinks the file it locked: a lock on an unlinked file guards nothing
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                return self._claim(fd)
            os.close(fd)
        raise RunLockedError(f"{path} keeps being replaced: another kafka-log-migrate is starting or ending; try again")

    def _try_lock(self, path: Path) -> int:
        if str(path.parent) not in self.dir_mtimes:
            self.dir_mtimes[str(path.parent)] = os.stat(path.parent).st_mtime_ns
            self.dir_names[str(path.parent)] = _names(path.parent, path.name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            who = (
                f"{holder.get('verb', 'a run')} (pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, "
                f"since {holder.get('since', '?')})"
                if holder
                else "run (it has not written who it is yet: it is starting)"
            )
            raise RunLockedError(
                f"another kafka-log-migrate {who} holds the state of plan {self.plan_id} in {path.parent}. Wait for "
                "it to finish (`status --plan` shows its progress); two runs of one plan at once would race on the "
                "same files."
            ) from None
        return fd

    def _claim(self, fd: int) -> int:
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "verb": self.verb,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        return fd

    def release(self) -> None:
        while self._held:
            path, fd = self._held.pop()
            try:
                path.unlink(missing_ok=True)  # still locked while it goes: nobody can take a lock on a dying file
                log_dir = str(path.parent)
                if log_dir in self.dir_mtimes and (
                    not state_path(log_dir, self.plan_id).exists()
                    or _names(log_dir, path.name) == self.dir_names[log_dir]
                ):
                    # a run that left no state, or added and removed nothing but its lock file (a refusal under a
                    # state that was there before it), leaves no trace: not even the log dir's mtime
                    st = os.stat(log_dir)
                    os.utime(log_dir, ns=(st.st_atime_ns, self.dir_mtimes[log_dir]))
            finally:
                os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _names(directory: str | Path, lock_name: str) -> set[str]:
    """The names in a log dir but our lock file and SQLite's side files of our state (reading a database in WAL mode
    creates them, and they come and go with its connections)."""
    state = lock_name.removesuffix(RUN_LOCK_SUFFIX) + STATE_SUFFIX
    return set(os.listdir(directory)) - {lock_name, f"{state}-wal", f"{state}-shm"}


def running(log_dir: str | Path, plan_id: str) -> str | None:
    """The live run holding this plan's state in ``log_dir`` ("execute (pid 123 on host h, since ...)"), or None
    when no process holds it: a lock file left without a holder is a run that died (the kernel released its lock).
    Read-only: asks the kernel with F_GETLK and takes no lock, so it never refuses a run that is starting."""
    path = run_lock_path(log_dir, plan_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if getlk_pid(fd) is None:
            return None
        holder = _read_holder(fd)
    finally:
        os.close(fd)
    return (
        f"{holder.get('verb', 'a run')} (pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, since "
        f"{holder.get('since', '?')})"
    )


def _read_holder(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}
