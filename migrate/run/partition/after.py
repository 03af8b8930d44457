"""What became of a converted partition's files after its swap, judged the way Kafka's own recovery would.

After the swap the broker owns the files, and a broker that runs on converted data changes them, each change one of
its own operations (``LogSegment``, ``LocalLog``, ``LogCleaner``, ``OffsetIndex`` in Apache Kafka):

- every start maps the active segment's ``.index`` and ``.timeindex``, resized to ``segment.index.bytes``, and trims
  them back to their entries at close (``AbstractIndex.resize``, ``trimToValidSize``): the same bytes, a new mtime
  (and, while the broker runs, a longer file that starts with the same bytes);
- producers append to the active segment (``LogSegment.append``): the swapped bytes stay its start;
- the log rolls (``LocalLog.roll``): new segments after the last one;
- a follower truncates the log's end to where its leader agrees and fetches again (``LocalLog.truncateTo``,
  ``LogSegment.truncateTo``): the last segment shorter, perhaps refilled, and the segments after it deleted;
- the cleaner of a compacted partition merges segments into one written under the first one's name and deletes the
  rest (``Cleaner.cleanSegments``, ``LocalLog.replaceSegments``);
- retention deletes segments from the log's start (``UnifiedLog.deleteOldSegments``);
- checkpoints, ``partition.metadata`` and producer snapshots are rewritten or made anew.

A converted segment is still the tool's when its bytes are: its size and the digest of its edges
(``migrate.segment.identity.edges_digest``, recorded when it was written), whatever its mtime and inode. What
changed otherwise is judged by where in the log it happened; only a change no operation above explains is
REWRITTEN: the one thing that stops finalize, and the only "bytes differ" of verify.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from migrate.errors import CorruptRecordError, MalformedLogDirFileError
from migrate.format import batch as v2
from migrate.format.checksums import crc32_ranges
from migrate.format.entries import Walk, walk_entries
from migrate.kafka.names import CLEANER_CHECKPOINT, INDEX_RE, SEGMENT_RE, FileKind, segment_name
from migrate.kafka.properties import read_offset_checkpoint
from migrate.model.run_state import Fate, FileAfter, FileStat, PartitionAfter
from migrate.run.partition.places import PartitionPlaces
from migrate.run.partition.record import ConvertedSegment, LinkedFile
from migrate.segment.identity import edges_digest_of
from migrate.segment.reader import read_chunks

PRESTAGE_RECORD_SUFFIX = ".prestaged.json"  # a cut-over's pre-stage records, carried in with the staged segments


@dataclass(frozen=True)
class _Output:
    base: int
    kind: FileKind
    stat: FileStat
    digest: str  # "" where the conversion recorded none (then the size and the inode decide)


def _outputs(segments: Sequence[ConvertedSegment]) -> dict[str, _Output]:
    out: dict[str, _Output] = {}
    for seg in segments:
        r = seg.result
        for kind, st in r.output_stats:
            digest = r.output_digests.get(kind) or ""
            out[segment_name(seg.base_offset, kind)] = _Output(seg.base_offset, kind, st, digest)
        for part in r.parts or ():
            for kind, st in part.output_stats:
                name = segment_name(part.base_offset, kind)
                out[name] = _Output(part.base_offset, kind, st, part.output_digests.get(kind) or "")
    return out


def cleaned_partitions(log_dir: str) -> frozenset[str]:
    """The partitions of ``log_dir`` the log cleaner has a position for (``cleaner-offset-checkpoint``): compacted
    ones. Unreadable as Kafka's reader would find it: none (every merge then counts as unexplained, never the
    other way round)."""
    try:
        entries = read_offset_checkpoint(os.path.join(log_dir, CLEANER_CHECKPOINT))
    except (OSError, MalformedLogDirFileError):
        return frozenset()
    return frozenset(f"{topic}-{partition}" for topic, partition in entries)


def judge_after_swap(
    places: PartitionPlaces,
    segments: Sequence[ConvertedSegment],
    linked_files: Sequence[LinkedFile] | None,
    compacted: bool,
) -> PartitionAfter:
    """Every file the swap put in the partition's new directory and every file in it now, each with its fate.
    ``segments``: the converted ones (the swap record's, or the state's after finalize removed the record);
    ``linked_files``: the original's files the new directory took as they were (None: not known any more, after
    finalize: then only the converted segments and what is new after them are judged). ``compacted``: the
    partition's topic is compacted (the cleaner may have merged or deleted its segments)."""
    outputs = _outputs(segments)
    linked = {f.name: f for f in linked_files or ()}
    swapped_logs = sorted(
        {o.base for o in outputs.values() if o.kind is FileKind.LOG}
        | {int(m.group(1)) for name in linked if (m := SEGMENT_RE.match(name))}
    )
    last_swapped = swapped_logs[-1] if swapped_logs else -1
    present: dict[str, os.stat_result] = {}
    with os.scandir(places.live) as entries:
        for entry in entries:
            if entry.name == places.work_name or entry.name.endswith(PRESTAGE_RECORD_SUFFIX):
                continue
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode):
                present[entry.name] = st
    now_logs = sorted(int(m.group(1)) for name in present if (m := SEGMENT_RE.match(name)))
    log_fates: dict[int, Fate] = {}
    files: list[FileAfter] = []
    for name, out in sorted(outputs.items(), key=lambda kv: (kv[1].base, kv[1].kind is not FileKind.LOG, kv[0])):
        if out.kind is not FileKind.LOG:
            continue
        judged = _log_fate(places, out, present.get(name), now_logs, swapped_logs, last_swapped, compacted)
        log_fates[out.base] = judged.fate
        files.append(judged)
    for name, out in sorted(outputs.items()):
        if out.kind is not FileKind.LOG:
            files.append(_index_fate(places, name, out, present.get(name), log_fates.get(out.base), last_swapped))
    for name, was in sorted(linked.items()):
        files.append(_linked_fate(places, name, was, present.get(name)))
    for name in sorted(present.keys() - outputs.keys() - linked.keys()):
        m = SEGMENT_RE.match(name) or INDEX_RE.match(name)
        if linked_files is None and not (m and int(m.group(1)) > last_swapped):
            continue  # one of the original's files, or the broker's: not known apart without the record
        rolled = m is not None and int(m.group(1)) > last_swapped
        what = "a segment rolled since" if rolled else "a file the broker made since"
        records = rolled and name.endswith(FileKind.LOG) and present[name].st_size > 0
        files.append(FileAfter(name, Fate.NEW, f"{what} ({present[name].st_size} bytes)", lost_by_rollback=records))
    return PartitionAfter(places.name, tuple(files))


def _linked_fate(places: PartitionPlaces, name: str, was: LinkedFile, now: os.stat_result | None) -> FileAfter:
    """One of the original's files the swap carried over as it was (the same inode in both directories)."""
    if now is None:
        return FileAfter(name, Fate.DELETED, "one of the original's files, deleted by the broker since")
    if (now.st_ino, now.st_size, now.st_mtime_ns) == (was.inode, was.size, was.mtime_ns):
        return FileAfter(name, Fate.UNCHANGED)
    if now.st_ino == was.inode:  # written in place: the original directory holds the same inode, and keeps it
        fate = Fate.APPENDED if now.st_size > was.size else Fate.TRUNCATED
        return FileAfter(name, fate, "one of the original's files, written in place (the original holds it too)")
    if now.st_size == was.size and now.st_size <= _SMALL and _same_bytes(os.path.join(places.kept, name), places, name):
        return FileAfter(name, Fate.UNCHANGED, "rewritten with the same bytes", metadata_only=True)
    segment = SEGMENT_RE.match(name) is not None
    return FileAfter(
        name, Fate.NEW, "one of the original's files, written anew by the broker since", lost_by_rollback=segment
    )


_SMALL = 1 << 20  # a file compared whole with the original's copy: a checkpoint, partition.metadata


def _same_bytes(original: str, places: PartitionPlaces, name: str) -> bool:
    try:
        with open(original, "rb") as a, open(os.path.join(places.live, name), "rb") as b:
            return a.read(_SMALL + 1) == b.read(_SMALL + 1)
    except OSError:
        return False


def _log_fate(
    places: PartitionPlaces,
    out: _Output,
    st: os.stat_result | None,
    now_logs: list[int],
    swapped_logs: list[int],
    last_swapped: int,
    compacted: bool,
) -> FileAfter:
    name = segment_name(out.base, FileKind.LOG)
    path = os.path.join(places.live, name)
    base = out.base
    if st is None:
        if not now_logs or base < now_logs[0]:
            return FileAfter(name, Fate.DELETED, "before the log's start now: deleted by retention")
        if base > now_logs[-1]:
            return FileAfter(name, Fate.DELETED, "after the log's end now: deleted by a truncation")
        if compacted:
            return FileAfter(name, Fate.DELETED, "merged into an earlier segment by the log cleaner")
        return FileAfter(
            name,
            Fate.REWRITTEN,
            "gone from the middle of the log: only the cleaner does that, and this partition is not compacted",
        )
    was = out.stat
    same = (st.st_ino, st.st_mtime_ns) == (was.inode, was.mtime_ns)
    if st.st_size == was.size and _holds(path, out, st):
        return FileAfter(name, Fate.UNCHANGED, metadata_only=not same)
    later_swapped = [b for b in swapped_logs if b > base]
    at_end = bool(now_logs) and base == now_logs[-1] and not any(b in now_logs for b in later_swapped)
    kept = st.st_size > was.size and _holds(path, out, st)  # the swapped bytes are its start: something appended
    damage = _unreadable(path, was.size if kept else 0)
    if damage:
        return FileAfter(
            name,
            Fate.DAMAGED,
            f"{damage}: no broker operation explains it (Kafka's recovery would cut the log there)",
            lost_by_rollback=kept,
        )
    if kept:
        if base == last_swapped or at_end:
            what = f"{_appended(path, was.size, st.st_size)} appended by the broker"
            return FileAfter(name, Fate.APPENDED, what, lost_by_rollback=True)
        if compacted:
            why = "rewritten by the log cleaner (its merge begins with this segment)"
            return FileAfter(name, Fate.REPLACED, why, lost_by_rollback=True)
    if at_end:  # the log's end since: a follower truncated into it, and may have fetched again
        return FileAfter(
            name,
            Fate.TRUNCATED,
            f"{was.size} bytes at the swap, {st.st_size} now: the log's end, truncated by the broker",
        )
    if compacted:
        return FileAfter(
            name, Fate.REPLACED, "another segment under its name: the log cleaner's merge", lost_by_rollback=True
        )
    return FileAfter(
        name,
        Fate.REWRITTEN,
        f"{st.st_size} bytes now, {was.size} at the swap, and not the bytes the swap put there, in the middle of a "
        "log that is not compacted: no broker operation explains it",
    )


def _index_fate(
    places: PartitionPlaces,
    name: str,
    out: _Output,
    st: os.stat_result | None,
    log_fate: Fate | None,
    last_swapped: int,
) -> FileAfter:
    if log_fate not in (
        Fate.UNCHANGED,
        Fate.REWRITTEN,
        Fate.DAMAGED,
        None,
    ):  # the index follows its segment's broker operation
        return FileAfter(name, log_fate, "as its segment")
    if st is None:
        return FileAfter(name, Fate.DELETED, "its segment intact: the broker rebuilds a missing index itself")
    path = os.path.join(places.live, name)
    was = out.stat
    same = (st.st_ino, st.st_mtime_ns) == (was.inode, was.mtime_ns)
    if st.st_size == was.size and _holds(path, out, st):
        return FileAfter(name, Fate.UNCHANGED, metadata_only=not same)
    if out.base == last_swapped and st.st_size > was.size and _holds(path, out, st):
        return FileAfter(name, Fate.UNCHANGED, "resized by a running broker (the same entries)", metadata_only=True)
    return FileAfter(name, Fate.NEW, "its segment intact: rebuilt by the broker (Kafka rebuilds indexes itself)")


def _holds(path: str, out: _Output, st: os.stat_result) -> bool:
    """``path`` starts with the bytes the swap put there: its edges over their size are the recorded digest (or,
    for an output recorded without one, it is that very file, untouched)."""
    if not out.digest:
        return (st.st_ino, st.st_size, st.st_mtime_ns) == (out.stat.inode, out.stat.size, out.stat.mtime_ns)
    return _edges(path, out.stat.size) == out.digest


def _unreadable(path: str, start: int) -> str:
    """Where the entries of ``path`` from ``start`` on stop reading as Kafka's recovery reads them (each batch's
    checksum, as ``LogSegment.recover`` validates it), for an operator; '' where every one reads."""
    try:
        with open(path, "rb", buffering=0) as src:
            src.seek(start)
            for _ in read_chunks(src, path, deep=False, decode=_checked, start=start):
                pass
    except CorruptRecordError as exc:
        at = f" at byte position {exc.position}" if exc.position is not None else ""
        return f"{exc.reason}{at}"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return ""


def _checked(buf: memoryview, final: bool) -> Walk:
    """``buf``'s whole entries, each checksum checked: a v2 batch's CRC-32C, a legacy message's CRC-32 over its
    magic byte to its end."""
    walk = walk_entries(buf)
    p, s, magics = walk.positions, walk.sizes, walk.magics
    legacy = magics < v2.MAGIC
    if legacy.any():
        lp, ls = p[legacy], s[legacy]
        u8 = np.frombuffer(buf, dtype=np.uint8)
        stored = (
            (u8[lp + 12].astype(np.uint32) << 24)
            | (u8[lp + 13].astype(np.uint32) << 16)
            | (u8[lp + 14].astype(np.uint32) << 8)
            | u8[lp + 15].astype(np.uint32)
        )
        computed = crc32_ranges(buf, lp + 16, lp + ls)
        bad = np.flatnonzero(stored != computed)
        if len(bad):
            raise CorruptRecordError("CRC-32 mismatch in a legacy message", position=int(lp[bad[0]]))
    for at, size in zip(p[~legacy].tolist(), s[~legacy].tolist()):
        v2.decode_batch(buf, at, size, deep=False)
    return walk


def _edges(path: str, size: int) -> str:
    """The edges digest of the first ``size`` bytes of ``path`` ('' where it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return edges_digest_of(fd, size)
    finally:
        os.close(fd)


def _appended(path: str, start: int, end: int) -> str:
    """What lies in ``path`` from ``start`` to ``end``, for an operator: its offsets where it reads as whole entries."""
    span = end - start
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, min(span, 64 << 20), start)
        finally:
            os.close(fd)
    except OSError:
        return f"{span} bytes"
    offsets = entry_offsets(data)
    return f"{span} bytes" if offsets is None else f"offsets {offsets[0]}..{offsets[1]} ({span} bytes)"


def entry_offsets(data: bytes) -> tuple[int, int] | None:
    """(first, last) offset of the whole entries at the start of ``data``, None where it holds none: a v2 batch
    names its base offset and its last offset delta; a legacy entry its (last) offset only."""
    walk = walk_entries(data)
    if not len(walk.positions):
        return None
    first_at, last_at = int(walk.positions[0]), int(walk.positions[-1])
    first = int.from_bytes(data[first_at : first_at + 8], "big", signed=True)
    last = int.from_bytes(data[last_at : last_at + 8], "big", signed=True)
    if int(walk.magics[-1]) >= 2:
        last += int.from_bytes(data[last_at + 23 : last_at + 27], "big", signed=True)
    return first, last


def appended_since_swap(after: PartitionAfter) -> list[str]:
    """What a rollback of this partition would lose, for an operator: what the broker appended, rolled or cleaned."""
    return [f"{after.partition}/{f.name}: {f.fate}, {f.detail}".rstrip(", ") for f in after.by_broker]
