"""The durable record of one staged segment, and what the cut-over asks of it.

Beside the staged ``<base>.log``, ``.index`` and ``.timeindex`` of a partition's staging dir lies
``<base>.prestaged.json``: written last, after the staged files are fsynced and linked under their names, so its
presence says the files beside it are whole. It holds the source's identity taken before the read and checked again
after it (on the open descriptor and on the path), the source's edge digest, the options and tool that converted it,
the conversion's SegmentResult (its digests and output stats, what a verify needs) and each staged file's identity
after it was linked. A source already in the target format gets a record too, with no staged files: the cut-over need
not read it.

While a segment's files are being linked, ``<base>.prestaging.json`` names them by device and inode (the files were
created unnamed, so this is the only moment a crash could leave them under a name with no record): the next pass
removes exactly those files, and nothing else it did not write.

Every file here is read through the partition's directory descriptor (``migrate.prestage.tree``): the staging tree is
untrusted, so a record is evidence of what a pass wrote, never of what the source holds: the cut-over checks the
source's own identity, and finalize proves each taken segment against its original before deleting it.

``staged_segments`` lists a log dir's records; ``judge_staged`` says whether one may replace a live source now. Both
are pure of engines, for ``plan``/``execute`` to call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.kafka.names import FileKind, segment_name
from migrate.model.plan_tree import CONVERTED_FILES, ConvertOptions
from migrate.model.run_state import SegmentResult
from migrate.model.segment_files import SegmentFiles
from migrate.prestage.identity import EdgeDigest, FileIdentity
from migrate.prestage.tree import NodeId, PartitionStaging, StagingTree

RECORD_VERSION = 2
RECORD_SUFFIX = ".prestaged.json"
PENDING_SUFFIX = ".prestaging.json"
RECORD_RE = re.compile(r"^(\d{20})\.prestaged\.json$", re.ASCII)
PENDING_RE = re.compile(r"^(\d{20})\.prestaging\.json$", re.ASCII)
STAGED_FILES = CONVERTED_FILES  # what a staged conversion holds: the files a conversion writes
_RECORD_MAX_BYTES = 16 << 20  # a record is a few KB; anything this large is not one of ours


@dataclass(frozen=True)
class StagedRecord:
    version: int
    tool: str  # "kafka-log-migrate <version>"
    log_dir: str  # the log dir's real path when staged
    partition: str  # the partition dir name
    base_offset: int
    source: str  # the live <base>.log path that was read
    source_identity: FileIdentity  # equal before and after the read, on the descriptor and the path
    source_edge: EdgeDigest
    options: ConvertOptions  # with the partition's leader epoch
    result: SegmentResult  # outputs name the staged paths at staging time; the staging dir holds them by name
    staged: SegmentFiles[FileIdentity]  # each staged file once linked; none when nothing needed converting
    staged_at: str  # UTC, ISO 8601


@dataclass(frozen=True)
class PendingRecord:
    """The files of one segment being linked under their names: removed by the next pass if no record follows."""

    version: int
    base_offset: int
    files: SegmentFiles[NodeId]  # each unnamed file being linked as <base><suffix>


@dataclass(frozen=True)
class StagedSegment:
    """A record as found on disk: its partition's staging dir (by name), and the sha256 of its bytes (what a plan
    keeps, so that a record edited after the plan is not taken)."""

    record: StagedRecord
    root: Path  # the staging tree it was read in
    digest: str = ""

    @property
    def partition(self) -> str:
        return self.record.partition

    def name(self, kind: FileKind) -> str:
        return segment_name(self.record.base_offset, kind)

    @property
    def record_path(self) -> Path:
        """Where the record is, for an operator's message (never opened by this path)."""
        return self.root / self.record.partition / record_name(self.record.base_offset)

    @property
    def files(self) -> SegmentFiles[Path]:
        """Where the staged files are, for an operator's message (never opened by these paths)."""
        return self.record.staged.map(lambda kind, _: self.root / self.record.partition / self.name(kind))


def record_name(base_offset: int) -> str:
    return segment_name(base_offset, RECORD_SUFFIX)


def pending_name(base_offset: int) -> str:
    return segment_name(base_offset, PENDING_SUFFIX)


def _encode(record: StagedRecord | PendingRecord) -> bytes:
    # one line: an indent sends json.dumps down its pure-Python encoder, a fifth of a tiny segment's staging
    return (json.dumps(to_json(record), sort_keys=True, separators=(",", ":")) + "\n").encode()


def write_new(staging: PartitionStaging, name: str, data: bytes, *, durable: bool) -> None:
    """``data`` as the new file ``name`` of ``staging``: written unnamed, then linked (never over an existing file:
    FileExistsError). ``durable``: the file and the directory fsynced."""
    fd = staging.new_file(0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        staging.link(fd, name)
    except BaseException:
        staging.forget_new(fd)
        raise
    os.close(fd)
    if durable:
        staging.fsync()


def write_record(staging: PartitionStaging, record: StagedRecord, root: Path) -> StagedSegment:
    """Durably, under ``<base>.prestaged.json`` (no file of that name may exist); the record as it is found there."""
    data = _encode(record)
    write_new(staging, record_name(record.base_offset), data, durable=True)
    return StagedSegment(record, root, hashlib.sha256(data).hexdigest())


def write_pending(staging: PartitionStaging, pending: PendingRecord) -> None:
    """Not fsynced: it guards against a crash of the process, which leaves the page cache as it was; a crash of the
    machine may lose it, and then the files it named stay, unnamed by any record (reported, never deleted)."""
    write_new(staging, pending_name(pending.base_offset), _encode(pending), durable=False)


def read_bytes(staging: PartitionStaging, name: str) -> tuple[bytes, os.stat_result] | None:
    """The whole file ``name`` (not followed, checked a regular file on its descriptor: a FIFO of a record's name
    would otherwise hang the cut-over) and its stat; None where nothing is there. ModelError where it is a link, not
    a regular file, too large to be a record, or unreadable."""
    try:
        fd = staging.open_read(name)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModelError(f"{staging.path / name}: not a readable pre-stage record ({exc.strerror or exc})") from exc
    try:
        st = os.fstat(fd)
        if st.st_size > _RECORD_MAX_BYTES:
            raise ModelError(f"{staging.path / name}: {st.st_size} bytes, not a pre-stage record")
        parts = []
        while chunk := os.read(fd, max(st.st_size, 4096) + 1):
            parts.append(chunk)
            if sum(map(len, parts)) > _RECORD_MAX_BYTES:
                raise ModelError(f"{staging.path / name}: grew past {_RECORD_MAX_BYTES} bytes, not a pre-stage record")
    except OSError as exc:
        raise ModelError(f"{staging.path / name}: not a readable pre-stage record ({exc.strerror or exc})") from exc
    finally:
        os.close(fd)
    return (parts[0] if len(parts) == 1 else b"".join(parts)), st


def read_record(staging: PartitionStaging, base_offset: int, root: Path) -> StagedSegment | None:
    """The record of ``base_offset`` in ``staging``; None where there is none; ModelError (naming the file) where it
    is not one this version writes."""
    name = record_name(base_offset)
    found = read_bytes(staging, name)
    if found is None:
        return None
    data, _ = found
    where = str(staging.path / name)
    try:
        record = from_json(StagedRecord, json.loads(data), where)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{where}: not a readable pre-stage record ({exc})") from exc
    if record.version != RECORD_VERSION:
        raise ModelError(f"{where}: pre-stage record version {record.version}, this tool reads {RECORD_VERSION}")
    if record.base_offset != base_offset or record.partition != staging.name:
        raise ModelError(f"{where}: the record of {record.partition} segment {record.base_offset}, not of this file")
    return StagedSegment(record, root, hashlib.sha256(data).hexdigest())


def read_pending(staging: PartitionStaging, name: str) -> PendingRecord:
    found = read_bytes(staging, name)
    if found is None:
        raise ModelError(f"{staging.path / name}: gone")
    try:
        pending = from_json(PendingRecord, json.loads(found[0]), str(staging.path / name))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelError(f"{staging.path / name}: not a readable pre-stage record ({exc})") from exc
    if pending.version != RECORD_VERSION or pending_name(pending.base_offset) != name:
        raise ModelError(f"{staging.path / name}: not a pending record of this tool for that name")
    return pending


def remove_staged(staging: PartitionStaging, staged: StagedSegment) -> list[str]:
    """Remove what a record names (each file only where it is still the file recorded, by device and inode, and has
    no other name), then the record itself: what was left alone, for an operator (empty: all gone)."""
    left = []
    for kind, identity in staged.record.staged:
        name = staged.name(kind)
        if not staging.remove_owned(name, NodeId(identity.device, identity.inode)):
            left.append(f"{staging.path / name}: not the file this tool staged there (left alone)")
    if left:
        return left  # the record stays: it is the only proof of which files are ours
    st = staging.lstat(record_name(staged.record.base_offset))
    if st is not None and not staging.remove_owned(record_name(staged.record.base_offset), NodeId.of(st)):
        left.append(f"{staged.record_path}: not a file this tool wrote (left alone)")
    return left


def remove_pending(staging: PartitionStaging, name: str, *, files_too: bool) -> list[str]:
    """Remove a pending record (``files_too``: and the files it names, each only where still that file)."""
    try:
        pending = read_pending(staging, name)
    except ModelError as exc:
        return [f"{exc} (left alone)"]
    left = []
    if files_too:
        for kind, node in pending.files:
            target = segment_name(pending.base_offset, kind)
            if not staging.remove_owned(target, node):
                left.append(f"{staging.path / target}: not the file this tool was staging there (left alone)")
    if not left:
        st = staging.lstat(name)
        if st is not None:
            staging.remove_owned(name, NodeId.of(st))
    return left


def staged_segments(log_dir: str | Path, staging_dir: str | Path | None = None) -> Iterator[StagedSegment]:
    """Every readable record of ``log_dir``'s staging tree (``staging_dir``: the one ``prestage --staging-dir``
    named), by partition then base offset. A record that cannot be read is left out: its segment is not staged."""
    tree = StagingTree.open(log_dir, staging_dir, create=False)
    if tree is None:
        return
    with tree:
        for name in tree.partition_names():
            try:
                part = tree.partition(name)
            except (OSError, ModelError):
                continue
            if part is None:
                continue
            with part:
                for entry in part.names():
                    m = RECORD_RE.match(entry)
                    if m is None:
                        continue
                    with contextlib.suppress(ModelError):
                        found = read_record(part, int(m.group(1)), tree.root)
                        if found is not None:
                            yield found


class Verdict(str, enum.Enum):
    USABLE = "usable"  # the staged outputs may replace the source (or, with no staged files, it needs none)
    SOURCE_GONE = "source-gone"  # retention, the cleaner or a partition move: drop it, never resurrect it
    SOURCE_CHANGED = "source-changed"  # another inode, size or time, or other edge bytes: convert what is there
    STAGED_CHANGED = "staged-changed"  # a staged file is missing, replaced, truncated or written: reconvert
    OPTIONS_DIFFER = "options-differ"  # converted with other options (or another leader epoch) than wanted now

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    reason: str = ""

    @property
    def usable(self) -> bool:
        return self.verdict == Verdict.USABLE


def comparable(options: ConvertOptions) -> ConvertOptions:
    """Options as they decide a closed segment's bytes: ``truncate_tail`` applies to a partition's last segment only,
    which is never pre-staged."""
    return dataclasses.replace(options, truncate_tail=False)


def staged_identity(staging: PartitionStaging, name: str) -> FileIdentity | None:
    """The staged file ``name`` as it is now, where it is a regular file with no other name; None otherwise (gone,
    a link, a directory, a hard link): such a file is never taken."""
    st = staging.lstat(name)
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return None
    return FileIdentity.of(st)


def judge_staged(
    staged: StagedSegment,
    source: str | Path,
    options: ConvertOptions,
    staging: PartitionStaging,
    *,
    edges: bool = True,
    deep: bool = False,
    source_stat: os.stat_result | None = None,
) -> Judgement:
    """Whether ``staged`` may replace the live ``source`` converted with ``options`` (the partition's, leader epoch
    included): the source's five identity fields and its edge digest as recorded, the same options, and every staged
    file in ``staging`` a regular file with one name and the identity recorded once it was linked. ``deep`` also
    re-reads the staged files and verifies them against the recorded digests (a full read: not for the cut-over's
    window by default); ``edges=False`` skips reading the source's edges (the passes, which re-stat every segment of a
    running broker each time, judge by stat alone). ``source_stat``: the source stated by the caller just before
    (who needs the stat too), instead of again."""
    record = staged.record
    if record.options != options and comparable(record.options) != comparable(options):
        return Judgement(Verdict.OPTIONS_DIFFER, f"staged with {record.options}, wanted {options}")
    now = FileIdentity.of(source_stat) if source_stat is not None else FileIdentity.at(source)
    if now is None:
        return Judgement(Verdict.SOURCE_GONE, f"{source} is gone")
    if now != record.source_identity:
        return Judgement(Verdict.SOURCE_CHANGED, f"{source}: {record.source_identity.differences(now)}")
    try:
        edge = EdgeDigest.of_path(source, record.source_edge.edge_bytes) if edges else record.source_edge
    except FileNotFoundError:
        return Judgement(Verdict.SOURCE_GONE, f"{source} is gone")
    if edge != record.source_edge:
        return Judgement(Verdict.SOURCE_CHANGED, f"{source}: its first or last bytes changed (same stat)")
    for kind, want in record.staged:
        got = staged_identity(staging, staged.name(kind))
        if got != want:
            what = want.differences(got) if got is not None else "missing, or not a regular file with one name"
            return Judgement(Verdict.STAGED_CHANGED, f"staged {staging.path / staged.name(kind)}: {what}")
    if deep and record.staged:
        problems = reverify(staged, staging)
        if problems:
            return Judgement(Verdict.STAGED_CHANGED, f"staged {staging.path / staged.name(FileKind.LOG)}: {problems}")
    return Judgement(Verdict.USABLE)


def reverify(staged: StagedSegment, staging: PartitionStaging) -> str:
    """The staged files read back through their descriptors and verified against the record's digests: '' when they
    hold what the record says, else the first problems."""
    from migrate.segment.verify import verify_segment

    fds: dict[FileKind, int] = {}
    try:
        for kind, _ in staged.record.staged:
            fds[kind] = staging.open_read(staged.name(kind))
        outputs = SegmentFiles.of((kind, f"/proc/self/fd/{fd}") for kind, fd in fds.items())
        result = dataclasses.replace(staged.record.result, outputs=outputs)
        check = verify_segment(result, staged.record.options)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    finally:
        for fd in fds.values():
            os.close(fd)
    return "" if check.ok else "; ".join(check.problems[:3])
