"""The fence: a directory in the log dir that stops any Kafka broker from starting while live files may be mixed.

Kafka's loader refuses to start on a log dir holding a directory that is not a topic-partition ("Found directory
.../kafka-log-migrate.IN-PROGRESS, 'kafka-log-migrate.IN-PROGRESS' is not in the form of topic-partition"), and its
error names the fence, whose README says which commands finish the job. The fence goes up before the first live
directory can move and comes down only when every partition is wholly old or wholly new: its own directory is where
a partition's directories pass during their swap, so it stays up while one is there.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from migrate.errors import UnsafePathError
from migrate.run import faults
from migrate.run.workspace import FENCE_README, fence_path, fsync_dir, real_directory

README_NAME = "README.txt"


def is_up(log_dir: str | Path) -> bool:
    """The fence is a real directory we made; a symbolic link or a file at its name is refused (UnsafePathError)
    before anything is converted, rather than found when it is to come down."""
    return real_directory(fence_path(log_dir))


def fence_plan_id(log_dir: str | Path) -> str | None:
    """The plan whose run put the fence up (its README's last line), or None where there is no fence of ours."""
    try:
        if not is_up(log_dir):
            return None
        text = (fence_path(log_dir) / README_NAME).read_text()
    except (OSError, UnsafePathError):
        return None
    for line in reversed(text.splitlines()):
        if line.startswith("Plan id: "):
            return line.removeprefix("Plan id: ").strip()
    return None


def raise_fence(log_dir: str | Path, plan_id: str) -> bool:
    """Put the fence up; True if it was down."""
    fence = fence_path(log_dir)
    if is_up(log_dir):
        return False
    faults.point("before:fence-up")
    fence.mkdir()
    (fence / README_NAME).write_text(FENCE_README.format(plan_id=plan_id))
    fsync_dir(fence)
    fsync_dir(log_dir)
    faults.point("after:fence-up")
    return True


def holds_directories(log_dir: str | Path) -> list[str]:
    """The partition directories passing through the fence right now (its own directory is where a swap moves them:
    ``migrate.run.partition.places``)."""
    try:
        return sorted(n for n in os.listdir(fence_path(log_dir)) if n != README_NAME)
    except FileNotFoundError:
        return []


def lower_fence(log_dir: str | Path) -> bool:
    """Take the fence down; True if it was up. Never while a partition's directory is in it (the caller has
    checked that no partition is mixed; a directory found there anyway keeps the fence up)."""
    fence = fence_path(log_dir)
    if not is_up(log_dir) or holds_directories(log_dir):
        return False
    faults.point("before:fence-down")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(fence / README_NAME)
    os.rmdir(fence)
    fsync_dir(log_dir)
    faults.point("after:fence-down")
    return True
