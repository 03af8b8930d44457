"""Where kafka-log-migrate keeps its own files, chosen so that a Kafka broker never acts on them.

Facts of Apache Kafka's log loading (``LogManager``, ``LogLoader``, ``LocalLog``) that bind these choices:
- Kafka's log loader reads only the *regular files* of a partition dir (``dir.listFiles if file.isFile``), so a
  subdirectory there is invisible to it: a run's work for a partition (the new directory a cold run builds, the
  original directory kept until finalize: ``migrate.run.partition.places``) lives in
  ``<partition>/.kafka-log-migrate-<plan id>/``, on the same filesystem as the live files, so the swap and keeping
  the original are renames, never copies.
- Any directory of a log dir that is not a topic-partition name stops a broker at start-up ("Found directory ...,
  '...' is not in the form of topic-partition"). The fence ``<log dir>/kafka-log-migrate.IN-PROGRESS`` uses that on
  purpose: while it exists no broker can start on the log dir, and the broker's error names it.
- Kafka ignores regular files it does not know in the log dir root: the run's state is the hidden SQLite file
  ``<log dir>/.kafka-log-migrate-<plan id>.db`` and the lock of the run that holds it
  ``<log dir>/.kafka-log-migrate-<plan id>.run``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from migrate.errors import UnsafePathError
from migrate.kafka.names import FileKind, segment_name

FENCE_NAME = "kafka-log-migrate.IN-PROGRESS"
WORK_DIR_NAME = ".kafka-log-migrate"
STATE_PREFIX = ".kafka-log-migrate-"
STATE_SUFFIX = ".db"
RUN_LOCK_SUFFIX = ".run"

FENCE_README = """This directory was made by kafka-log-migrate while it rewrites the segments of this log dir.

A Kafka broker refuses to start while it exists (it is not a topic-partition directory), because some
partitions may be half swapped. Do not delete it by hand. Instead run, with the same plan file:

    kafka-log-migrate execute --plan PLAN.json     # resume and finish the migration
    kafka-log-migrate rollback --plan PLAN.json    # or put every original file back

Plan id: {plan_id}
"""


def fence_path(log_dir: str | Path) -> Path:
    return Path(log_dir) / FENCE_NAME


def state_path(log_dir: str | Path, plan_id: str) -> Path:
    return Path(log_dir) / f"{STATE_PREFIX}{plan_id}{STATE_SUFFIX}"


def run_lock_path(log_dir: str | Path, plan_id: str) -> Path:
    return Path(log_dir) / f"{STATE_PREFIX}{plan_id}{RUN_LOCK_SUFFIX}"


# These run a few times per segment for 10^5 segments: one Path built from a joined string, not a chain of them.


def work_dir(partition_dir: str | Path, plan_id: str) -> Path:
    """One directory per partition and plan, holding the run's work for that partition
    (``migrate.run.partition.places``): one mkdir per partition, because at 10^4 partitions every metadata operation
    per partition counts."""
    return Path(os.path.join(partition_dir, f"{WORK_DIR_NAME}-{plan_id}"))


def _found(path: str | Path, st: os.stat_result) -> str | None:
    """What is wrong with ``path`` as a directory we may write in, or None."""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return f"a symbolic link (to {target}), not a directory"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return None


def real_directory(path: str | Path) -> bool:
    """True if ``path`` is a real directory, False if nothing is there; UnsafePathError if a symbolic link or another
    kind of file stands in its place. lstat, never stat: a link must not be followed to decide."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    found = _found(path, st)
    if found is not None:
        raise UnsafePathError(str(path), found)
    return True


def checked_work_dir(partition_dir: str | Path, plan_id: str, create: bool = False) -> Path:
    """The partition's work dir, with the partition dir and the work dir itself proven real directories (a work dir
    planted as a symbolic link would send backups and staged files elsewhere, and rollback would delete there);
    created here when ``create``. The partition dir's own path was confined to its log dir by the plan's checks."""
    if not real_directory(partition_dir):
        raise FileNotFoundError(errno.ENOENT, "the partition directory is gone", str(partition_dir))
    folder = work_dir(partition_dir, plan_id)
    if not real_directory(folder) and create:
        try:
            os.mkdir(folder)
        except FileExistsError:
            real_directory(folder)  # made meanwhile: by whom decides whether we may use it
    return folder


OUTPUT_DIR_NAME = "new"  # inside the work dir: the partition's new directory, where a cold run converts into


def output_dir(partition_dir: str | Path, plan_id: str) -> Path:
    """Where this run's conversions of the partition are written: the new directory the swap completes and exchanges
    with the live one (``migrate.run.partition.places``)."""
    return Path(os.path.join(partition_dir, f"{WORK_DIR_NAME}-{plan_id}", OUTPUT_DIR_NAME))


def checked_output_dir(partition_dir: str | Path, plan_id: str, create: bool = False) -> Path:
    """``output_dir``, with the partition dir, the work dir and the output dir each proven a real directory (one
    planted as a symbolic link would send the outputs elsewhere); made here with ``create``."""
    checked_work_dir(partition_dir, plan_id, create)
    folder = output_dir(partition_dir, plan_id)
    if not real_directory(folder) and create:
        try:
            os.mkdir(folder)
        except FileExistsError:
            real_directory(folder)
    return folder


def segment_file(directory: str | Path, base_offset: int, kind: FileKind) -> Path:
    return Path(os.path.join(directory, segment_name(base_offset, kind)))


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def durable_file(path: str | Path, hidden: bool = False) -> Iterator[BinaryIO]:
    """A file written whole or not at all: written as ``<name>.partial`` (``.<name>.partial`` when ``hidden``), fsynced,
    renamed over ``path``, and the directory fsynced, so that after a crash at any point the name holds the old
    content or the new, never a torn one, and the rename itself survives a power loss. Nothing is renamed if the body
    raises."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial" if hidden else f"{target.name}.partial")
    try:
        with open(partial, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    os.replace(partial, target)
    fsync_dir(target.parent)


def write_durably(path: str | Path, data: bytes | str, hidden: bool = False) -> None:
    """``data`` (text as UTF-8) at ``path`` through ``durable_file``."""
    with durable_file(path, hidden) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def other_states(log_dir: str | Path, plan_id: str) -> list[Path]:
    """State files of other plans in the log dir: another migration, finished or not."""
    mine = state_path(log_dir, plan_id).name
    return sorted(p for p in Path(log_dir).glob(f"{STATE_PREFIX}*{STATE_SUFFIX}") if p.name != mine)


_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)


def sync_filesystem(path: str | Path) -> None:
    """Make everything written on the filesystem of ``path`` durable: one syncfs for a task's many files instead of
    an fsync per file and directory (os.sync where syncfs is missing)."""
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        os.close(fd)
