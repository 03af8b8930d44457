"""The names a broker gives its files and directories, and how it parses them (Apache Kafka's ``LocalLog``).

- Every sub-directory of a log dir except ``remote-log-index-cache`` goes through
  ``LocalLog.parseTopicPartitionName``: ``<topic>-<partition>`` (topic = text before the last ``-``, partition an
  int), or ``<topic>-<partition>.<id>-delete`` / ``-future`` / ``-stray``. Any other directory stops the broker at
  start-up ("Found directory ..., '...' is not in the form of topic-partition"). ``__cluster_metadata-*`` is the
  KRaft metadata log, not data.
- A segment is ``<20-digit base offset>.log`` with ``.index``, ``.timeindex`` and ``.txnindex`` siblings
  (``LogFileUtils.filenamePrefixFromOffset``: the one place here that builds such a name is ``segment_name``).
  ``.swap`` and ``.cleaned`` files are left by a broker that died during a cleaner or split operation; it completes
  or discards them at its next start. ``.deleted`` files are segments retention or the cleaner already replaced,
  waiting for ``file.delete.delay.ms``: a clean stop leaves them, and the next start unlinks them unread
  (``LogLoader.removeTempFilesAndCollectSwapFiles``), so they are not data and are ignored.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from migrate.kafka.java_text import JAVA_NOT_WS, java_int

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, REPLICATION_CHECKPOINT, LOG_START_CHECKPOINT, CLEANER_CHECKPOINT)

SEGMENT_RE = re.compile(r"^(\d{20})\.log$", re.ASCII)
INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex")
INDEX_RE = re.compile(r"^(\d{20})(\.index|\.timeindex|\.txnindex)$", re.ASCII)
STRAY_SUFFIXES = (".swap", ".cleaned")
DELETED_SUFFIX = ".deleted"
SKIPPED_DIRS = {"remote-log-index-cache"}
METADATA_TOPIC = "__cluster_metadata"
DIR_SUFFIXES = {"-delete": "delete", "-future": "future", "-stray": "stray"}
# our own fence (migrate.run.workspace.FENCE_NAME): deliberately not a topic-partition name, see workspace.py
FENCE_NAME = "kafka-log-migrate.IN-PROGRESS"
SPECIAL_DIR_RE = {
    suffix: re.compile(rf"({JAVA_NOT_WS}+)-({JAVA_NOT_WS}+)\.({JAVA_NOT_WS}+){suffix}") for suffix in DIR_SUFFIXES
}


class FileKind(str, enum.Enum):
    """The files of one segment, by the suffix Kafka gives them."""

    LOG = ".log"
    INDEX = ".index"
    TIME_INDEX = ".timeindex"
    TXN_INDEX = ".txnindex"

    def __str__(self) -> str:
        return self.value


def segment_name(base_offset: int, suffix: str = "") -> str:
    """``<20-digit base offset><suffix>``: Kafka's ``LogFileUtils.filenamePrefixFromOffset`` and a suffix (a
    ``FileKind``, or another: ``.prestaged.json``, ...)."""
    # a concatenation, not a format: a FileKind is joined as the str it is, without a call of its __format__
    return f"{base_offset:020d}" + suffix


# --- partition directory names ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionDirName:
    """A directory name Kafka's loader accepts: ``kind`` is current, delete, future or stray."""

    name: str
    topic: str
    partition: int
    kind: str = "current"

    @property
    def topic_partition(self) -> str:
        return f"{self.topic}-{self.partition}"


def parse_partition_dir_name(name: str) -> PartitionDirName | None:
    """Parse a log dir child's name exactly as Kafka's ``LocalLog.parseTopicPartitionName`` does; None where Kafka
    throws (and so refuses to start). ``__cluster_metadata-0`` parses (the caller skips it, as Kafka does)."""
    if not name or "-" not in name:
        return None
    kind = "current"
    base = name
    for suffix, suffix_kind in DIR_SUFFIXES.items():
        if name.endswith(suffix):
            if not SPECIAL_DIR_RE[suffix].fullmatch(name):
                return None
            kind = suffix_kind
            base = name[: name.rindex(".")]
            break
    topic, _, number = base.rpartition("-")
    if not topic or not number:
        return None
    partition = java_int(number)
    if partition is None:
        return None
    return PartitionDirName(name, topic, partition, kind)


# a live partition dir with a plain partition number: what nearly every name is; always one parse accepts
_PLAIN_PARTITION_DIR = re.compile(r"[^/]+-(?:0|[1-9][0-9]{0,8})")


def is_partition_dir_name(name: str) -> bool:
    """Whether Kafka's loader accepts ``name`` (``parse_partition_dir_name`` is not None), fast for plain names: a
    plan of 10^5 partitions checks every one when it is loaded."""
    return _PLAIN_PARTITION_DIR.fullmatch(name) is not None or parse_partition_dir_name(name) is not None


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a live ``<topic>-<partition>`` directory name; None for anything else (including
    ``-delete``/``-future``/``-stray`` dirs)."""
    parsed = parse_partition_dir_name(name)
    if parsed is None or parsed.kind != "current":
        return None
    return parsed.topic, parsed.partition
