"""Where a log dir's staged segments live by default, and why there.

Never inside a log dir: Kafka moves or deletes a partition dir with everything in it (``LogManager.asyncDelete``,
``Utils.delete`` is recursive), an I/O error there takes the whole log dir offline
(``LocalLog.maybeHandleIOException``), and every unknown directory at a log dir's root fails the next start
(``LogManager.loadLogs`` parses each as a topic-partition name). On the log dir's filesystem: the cut-over renames
staged files into place. So by default a sibling of the log dir:
``<parent of log dir>/.kafka-log-migrate-staging/<log dir name>/<partition>/``, which ``plan`` and ``execute`` can
derive from the log dir alone. The place is opened and checked, without following any link, by
``migrate.prestage.tree.StagingTree``.
"""

from __future__ import annotations

import os
from pathlib import Path

from migrate.errors import MigrateError

STAGING_DIR_NAME = ".kafka-log-migrate-staging"
# what a directory holds when it is a Kafka log dir: no staging tree may lie below one
LOG_DIR_MARKERS = ("meta.properties", "recovery-point-offset-checkpoint", ".kafka_cleanshutdown")


class StagingPlaceError(MigrateError):
    """A staging place that Kafka or the cut-over would trip over."""


def default_staging_root(log_dir: str | Path) -> Path:
    """The staging tree of ``log_dir`` when none is named (the one ``plan``/``execute`` look in), by name: the tree
    opens and resolves it (``.kafka-log-migrate-staging`` itself may be a planted link)."""
    real = Path(os.path.realpath(log_dir))
    return real.parent / STAGING_DIR_NAME / real.name
