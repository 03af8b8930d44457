"""The directories of one partition's swap, by name.

    <log dir>/<partition>/                                    the live path: the original directory, later the new one
    <live>/.kafka-log-migrate-<plan id>/new/                 where a cold run builds the new directory
    <staging tree>/<partition>/                              where a cut-over built it instead, pass after pass
    <log dir>/kafka-log-migrate.IN-PROGRESS/<partition>      the new directory on its way in (the fence's own dir)
    <log dir>/kafka-log-migrate.IN-PROGRESS/<partition>.original    the original on its way out (two renames only)
    <new>/.kafka-log-migrate-<plan id>/original/             the original, kept until finalize
    <new>/.kafka-log-migrate-<plan id>/exchange.json          the record of the swap (``record``)

Kafka's loader reads only the regular files of a partition dir, so the work dirs inside one are invisible to it
(``LogLoader.loadSegmentFiles`` lists ``dir.listFiles`` filtered by ``isFile``); every other directory at a log dir's
root stops a broker from starting (``LogManager.loadLogs``), so the directories passing through the fence's own
directory are seen only while the fence is up, and the fence is up exactly while one is there.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from migrate.model.run_state import DirIdentity
from migrate.run.workspace import FENCE_NAME, WORK_DIR_NAME

NEW_DIR = "new"
KEPT_DIR = "original"
RECORD_FILE = "exchange.json"
ORIGINAL_SUFFIX = ".original"


@dataclass(frozen=True)
class PartitionPlaces:
    """The paths of one partition's swap (``staging``: the cut-over's built directory, where it has one)."""

    log_dir: str
    name: str
    plan_id: str
    staging: str | None = None

    @property
    def work_name(self) -> str:
        return f"{WORK_DIR_NAME}-{self.plan_id}"

    @property
    def live(self) -> str:
        return os.path.join(self.log_dir, self.name)

    @property
    def work(self) -> str:
        """The work dir of whatever directory is at the live path now."""
        return os.path.join(self.live, self.work_name)

    @property
    def built(self) -> str:
        """Where the new directory is built, and stays until it moves into the fence."""
        return self.staging if self.staging is not None else self.cold_built

    @property
    def cold_built(self) -> str:
        """Where a cold run builds the new directory (and a cut-over too, where its staging dir cannot be used)."""
        return os.path.join(self.work, NEW_DIR)

    @property
    def built_places(self) -> tuple[str, ...]:
        return (self.staging, self.cold_built) if self.staging is not None else (self.cold_built,)

    @property
    def fence(self) -> str:
        return os.path.join(self.log_dir, FENCE_NAME)

    @property
    def fence_entry(self) -> str:
        return os.path.join(self.fence, self.name)

    @property
    def fence_original(self) -> str:
        return os.path.join(self.fence, self.name + ORIGINAL_SUFFIX)

    @property
    def kept(self) -> str:
        """The original, inside the new directory's work dir (valid once the new directory is at the live path)."""
        return os.path.join(self.work, KEPT_DIR)

    def record_in(self, directory: str) -> str:
        """Where the record is inside the new directory, wherever that directory is now."""
        return os.path.join(directory, self.work_name, RECORD_FILE)


def dir_at(path: str) -> os.stat_result | None:
    """The directory at ``path`` itself (a link is never followed: a link there is no directory of ours), or None."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISDIR(st.st_mode) else None


def holds(path: str, identity: DirIdentity) -> bool:
    """``path`` is the directory ``identity`` names."""
    st = dir_at(path)
    return st is not None and identity.names(st)
