"""What a Kafka broker running on converted data does to a partition's files, operation by operation, as its own code
does it (Apache Kafka 3.9 ``storage``: ``AbstractIndex``, ``LogSegment``, ``LocalLog``, ``LogCleaner``,
``UnifiedLog``); the tests of finalize, verify and rollback after a start run these on real migrated log dirs.

- ``start_and_stop``: ``LogLoader`` resizes the active segment's indexes to ``segment.index.bytes`` (10 MiB, rounded
  down to a multiple of the entry size: ``AbstractIndex.resize`` is ``RandomAccessFile.setLength``) and a clean stop
  trims them back to their entries (``trimToValidSize``); the leader epoch file and the log dir's checkpoints are
  written anew (``CheckpointFile.write``: a temporary file renamed over the old one); the clean-shutdown marker goes
  at the start and comes back at the stop;
- ``append``: producer batches appended to the active segment (``LogSegment.append``), an index entry per
  ``index.interval.bytes`` (4096) of them;
- ``roll``: a new active segment named by the next offset (``LocalLog.roll``);
- ``truncate_to``: a follower's truncation to an offset (``LocalLog.truncateTo``: later segments deleted, the one
  holding the offset cut at the batch that holds it, ``LogSegment.truncateTo``);
- ``clean``: the cleaner's merge of segments into ``<first>.log.cleaned`` with the last source's mtime, renamed
  ``.swap``, the sources renamed ``.deleted``, the ``.swap`` renamed into place, the ``.deleted`` unlinked
  (``Cleaner.cleanSegments``, ``LocalLog.replaceSegments``), and the partition's position checkpointed
  (``cleaner-offset-checkpoint``);
- ``delete_oldest``: retention, the oldest segment's files renamed ``.deleted`` and unlinked
  (``LocalLog.deleteSegmentFiles``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from prestage_layout import retention_delete

from migrate.demo.legacy_logdir import checkpoint_text
from migrate.format import batch as v2
from migrate.format import legacy
from migrate.format.entries import walk_entries
from migrate.format.records import Record
from migrate.kafka.names import segment_name

MAX_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes
INDEX_INTERVAL_BYTES = 4096


def _segments(part: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in part.glob("*.log"))


def _rewrite(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def start_and_stop(log_dir: Path) -> None:
    """A broker started on ``log_dir`` and stopped cleanly, with no client at all."""
    (log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir() and "-" in p.name and not p.name.startswith(".")):
        bases = _segments(part)
        if not bases:
            continue
        for sfx, entry in ((".index", 8), (".timeindex", 12)):
            index = part / segment_name(bases[-1], sfx)
            if index.exists():
                valid = index.stat().st_size
                os.truncate(index, MAX_INDEX_BYTES // entry * entry)  # resize at load
                os.truncate(index, valid)  # trimToValidSize at close: the same entries
        epochs = part / "leader-epoch-checkpoint"
        if epochs.exists():
            _rewrite(epochs, epochs.read_text())
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        checkpoint = log_dir / name
        if checkpoint.exists():
            _rewrite(checkpoint, checkpoint.read_text())
    (log_dir / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":8}')


def _next_offset(part: Path) -> int:
    last = part / segment_name(_segments(part)[-1], ".log")
    data = last.read_bytes()
    walk = walk_entries(data)
    if not len(walk.positions):
        return _segments(part)[-1]
    at = int(walk.positions[-1])
    base = struct.unpack_from(">q", data, at)[0]
    return base + (struct.unpack_from(">i", data, at + 23)[0] + 1 if int(walk.magics[-1]) == 2 else 1)


def append(
    part: Path, count: int, *, at_ms: int = 1_700_000_000_000, value: bytes = b"after the swap", magic: int = 2
) -> range:
    """``count`` single-record batches appended to the active segment, as a producer's would; their offsets.
    ``magic`` 1: v1 messages, as a follower appends what a leader at an old inter.broker.protocol.version wrote
    (the replica fetcher appends the leader's batches as they are)."""
    base = _segments(part)[-1]
    log = part / segment_name(base, ".log")
    first = _next_offset(part)
    position = log.stat().st_size
    since_index = INDEX_INTERVAL_BYTES  # an entry for the first batch
    with log.open("ab") as out, (part / segment_name(base, ".index")).open("ab") as index:
        for offset in range(first, first + count):
            record = Record(offset, at_ms + offset, f"k{offset}".encode(), value)
            if magic == 2:
                batch = v2.encode_batch([record], partition_leader_epoch=5)
            else:
                batch = legacy.encode_messages([record], magic)
            if since_index >= INDEX_INTERVAL_BYTES:
                index.write(struct.pack(">ii", offset - base, position))
                since_index = 0
            out.write(batch)
            position += len(batch)
            since_index += len(batch)
    return range(first, first + count)


def roll(part: Path) -> int:
    """A new active segment, named by the next offset; its base offset."""
    base = _next_offset(part)
    for sfx in (".log", ".index", ".timeindex"):
        (part / segment_name(base, sfx)).touch()
    return base


def truncate_to(part: Path, offset: int) -> None:
    """A follower's truncation: every segment after the one holding ``offset`` deleted, that one cut before the
    batch that holds it, its index entries past the cut dropped."""
    bases = _segments(part)
    keep = max(b for b in bases if b <= offset)
    for base in bases:
        if base > keep:
            retention_delete(part, base)
    log = part / segment_name(keep, ".log")
    data = log.read_bytes()
    walk = walk_entries(data)
    cut = len(data)
    for at, _size in zip(walk.positions.tolist(), walk.sizes.tolist()):
        first = struct.unpack_from(">q", data, at)[0]
        if first >= offset:
            cut = at
            break
    os.truncate(log, cut)
    index = part / segment_name(keep, ".index")
    if index.exists():
        entries = index.read_bytes()
        kept = [entries[i : i + 8] for i in range(0, len(entries), 8) if struct.unpack_from(">ii", entries, i)[1] < cut]
        index.write_bytes(b"".join(kept))


def clean(part: Path, bases: list[int]) -> Path:
    """The cleaner's merge of ``bases`` (consecutive segments) into one under the first's name; the partition's
    cleaner checkpoint written. The merge keeps every record here (a dictionary that drops none): what matters is
    the file operations and that the merged file is another file."""
    first = part / segment_name(bases[0], ".log")
    cleaned = first.with_name(first.name + ".cleaned")
    last_mtime = (part / segment_name(bases[-1], ".log")).stat().st_mtime_ns
    cleaned.write_bytes(b"".join((part / segment_name(b, ".log")).read_bytes() for b in bases))
    os.utime(cleaned, ns=(last_mtime, last_mtime))
    swap = cleaned.with_name(first.name + ".swap")
    cleaned.rename(swap)
    doomed = []
    for base in bases:
        for sfx in (".log", ".index", ".timeindex"):
            old = part / segment_name(base, sfx)
            if old.exists():
                doomed.append(old.rename(old.with_name(old.name + ".deleted")))
    swap.rename(first)
    for path in doomed:
        path.unlink()
    topic, _, number = part.name.rpartition("-")
    _rewrite(part.parent / "cleaner-offset-checkpoint", checkpoint_text([(topic, int(number), _next_offset(part))]))
    return first


def delete_oldest(part: Path) -> int:
    """Retention: the oldest segment deleted; its base offset."""
    base = _segments(part)[0]
    retention_delete(part, base)
    return base
