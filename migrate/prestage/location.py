"""Where a log dir's staged segments live, and the places refused for them.

Never inside a log dir: Kafka moves or deletes a partition dir with everything in it (``LogManager.asyncDelete``,
``Utils.delete`` is recursive), an I/O error there takes the whole log dir offline
(``LocalLog.maybeHandleIOException``), and every unknown directory at a log dir's root fails the next start
(``LogManager.loadLogs`` parses each as a topic-partition name). On the log dir's filesystem: the cut-over renames
staged files into place. So by default a sibling of the log dir:
``<parent of log dir>/.kafka-log-migrate-staging/<log dir name>/<partition>/``, which ``plan`` and ``execute`` can
derive from the log dir alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from migrate.errors import MigrateError

STAGING_DIR_NAME = ".kafka-log-migrate-staging"
_LOG_DIR_MARKERS = ("meta.properties", "recovery-point-offset-checkpoint", ".kafka_cleanshutdown")


class StagingPlaceError(MigrateError):
    """A staging place that Kafka or the cut-over would trip over."""


def default_staging_root(log_dir: str | Path) -> Path:
    """The staging tree of ``log_dir`` when none is named: the one ``plan``/``execute`` look in."""
    real = Path(os.path.realpath(log_dir))
    return real.parent / STAGING_DIR_NAME / real.name


def staging_root(log_dir: str | Path, override: str | Path | None = None) -> Path:
    """The staging tree of ``log_dir`` (``override`` or the default), checked: refused (StagingPlaceError, with what
    to do) when it is inside a log dir, at a log dir's root, or on another filesystem than the log dir."""
    real = Path(os.path.realpath(log_dir))
    if not real.is_dir():
        raise StagingPlaceError(f"{log_dir}: no such directory. Check the log dir path (log.dirs).")
    parent_dev = os.stat(real.parent).st_dev
    own_dev = os.stat(real).st_dev
    if override is None and own_dev != parent_dev:
        raise StagingPlaceError(
            f"{real} is the root of its own filesystem (a mount point), so every place on that filesystem is inside "
            "the log dir, where Kafka deletes or refuses unknown files: pre-staging has nowhere safe to write. "
            "--staging-dir cannot help either (it must be on the log dir's filesystem and outside the log dir). "
            "Mount the disk one level up and point log.dirs at a subdirectory (e.g. /data with log.dirs=/data/kafka), "
            "or migrate this log dir offline (plan/execute with the broker stopped)."
        )
    root = default_staging_root(real) if override is None else Path(os.path.realpath(override))
    _refuse_inside(real, root)
    anchor = _existing_ancestor(root)
    if os.stat(anchor).st_dev != own_dev:
        raise StagingPlaceError(
            f"staging dir {root} is on another filesystem than log dir {real} (device {os.stat(anchor).st_dev} vs "
            f"{own_dev}): the cut-over must rename staged files into place. Name a directory on the log dir's "
            "filesystem, outside the log dir, with --staging-dir."
        )
    for ancestor in root.parents:
        if any((ancestor / marker).exists() for marker in _LOG_DIR_MARKERS):
            _refuse_log_dir_ancestor(ancestor, root)
    return root


def refuse_overlap(log_dirs: list[Path], roots: list[Path]) -> None:
    """No staging tree may lie inside or at the root of any log dir of the broker (another log dir's too)."""
    for log_dir in log_dirs:
        for root in roots:
            _refuse_inside(log_dir, root)


def _refuse_inside(log_dir: Path, root: Path) -> None:
    if root == log_dir or log_dir in root.parents:
        raise StagingPlaceError(
            f"staging dir {root} is inside log dir {log_dir}: Kafka deletes partition dirs with everything in them "
            "and refuses to start on an unknown directory at a log dir's root. Name a directory outside every log "
            "dir, on the same filesystem, with --staging-dir."
        )
    if root in log_dir.parents:
        raise StagingPlaceError(
            f"staging dir {root} contains log dir {log_dir}: name a directory beside the log dir, not above it."
        )


def _refuse_log_dir_ancestor(ancestor: Path, root: Path) -> None:
    raise StagingPlaceError(
        f"staging dir {root} would be created inside {ancestor}, which looks like a Kafka log dir (it holds "
        f"{', '.join(m for m in _LOG_DIR_MARKERS if (ancestor / m).exists())}): Kafka refuses to start on an unknown "
        "directory at a log dir's root. Name a directory outside every log dir with --staging-dir."
    )


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")
