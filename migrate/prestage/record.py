"""The durable record of one staged segment, and what the cut-over asks of it.

Beside the staged ``<base>.log``, ``.index`` and ``.timeindex`` of a partition's staging dir lies
``<base>.prestaged.json``: written last, after the staged files are fsynced, and renamed into place, so its presence
says the files beside it are whole. It holds the source's identity taken before the read and checked again after it
(on the open descriptor and on the path), the source's edge digest, the options and tool that converted it, the
conversion's SegmentResult (its digests and output stats, what a verify needs) and each staged file's identity after
fsync. A source already in the target format gets a record too, with no staged files: the cut-over need not read it.

``staged_segments`` lists a log dir's records; ``judge_staged`` says whether one may replace a live source now. Both
are pure of engines, for ``plan``/``execute`` to call.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from migrate.codec import from_json, to_json
from migrate.errors import ModelError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import SegmentResult
from migrate.prestage.identity import EdgeDigest, FileIdentity
from migrate.prestage.location import default_staging_root
from migrate.run.workspace import write_durably

RECORD_VERSION = 1
RECORD_SUFFIX = ".prestaged.json"
RECORD_RE = re.compile(r"^(\d{20})\.prestaged\.json$", re.ASCII)
# every file a pass writes in a partition's staging dir: staged outputs, records, and a record's temporary file
STAGED_FILE_RE = re.compile(
    r"^(\d{20})(\.log|\.index|\.timeindex|\.prestaged\.json)$|^\.\d{20}\.prestaged\.json\.partial$", re.ASCII
)
STAGED_SUFFIXES = (".log", ".index", ".timeindex")


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
    result: SegmentResult  # outputs name the staged paths at staging time; ``StagedSegment.files`` is where they are
    staged: dict[str, FileIdentity]  # suffix -> the staged file after fsync; empty when nothing needed converting
    staged_at: str  # UTC, ISO 8601


@dataclass(frozen=True)
class StagedSegment:
    """A record as found on disk, with where its staged files are."""

    record: StagedRecord
    record_path: Path

    paths: dict[str, str] = field(init=False, repr=False, compare=False)  # suffix -> staged file, as strings

    def __post_init__(self) -> None:
        # plain strings, built once: the plan judges and the cut-over takes up to 10^6 of these, and a Path per file
        # cost more than the stat that follows; the record's own path names the segment already
        path = os.fspath(self.record_path)
        stem = (
            path[: -len(RECORD_SUFFIX)]
            if path.endswith(segment_name(self.record.base_offset, RECORD_SUFFIX))
            else os.path.join(os.path.dirname(path), segment_name(self.record.base_offset))
        )
        object.__setattr__(self, "paths", {sfx: stem + sfx for sfx in self.record.staged})

    @property
    def files(self) -> dict[str, Path]:
        return {sfx: Path(p) for sfx, p in self.paths.items()}


def record_path(partition_staging: Path, base_offset: int) -> Path:
    return partition_staging / segment_name(base_offset, RECORD_SUFFIX)


def write_record(path: Path, record: StagedRecord) -> None:
    """Durably: a temporary file fsynced, renamed over ``path``, the directory fsynced."""
    # one line: an indent sends json.dumps down its pure-Python encoder, a fifth of a tiny segment's staging
    write_durably(path, json.dumps(to_json(record), sort_keys=True, separators=(",", ":")) + "\n", hidden=True)


def read_record(path: Path) -> StagedRecord:
    """A record file; ModelError (naming the file) when it is not one this version writes."""
    try:
        # opened without blocking and checked a regular file on its descriptor: a FIFO of the record's name would
        # otherwise hang the cut-over, and a stat first costs a call per segment
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ModelError(f"{path}: not a pre-stage record (not a regular file)")
            data = json.loads(_read_to_end(fd, st.st_size))
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not a readable pre-stage record ({exc})") from exc
    record = from_json(StagedRecord, data, str(path))
    if record.version != RECORD_VERSION:
        raise ModelError(f"{path}: pre-stage record version {record.version}, this tool reads {RECORD_VERSION}")
    return record


def _read_to_end(fd: int, size_hint: int) -> bytes:
    """Every byte of the file open as ``fd``: one read when its stat's size is right (a cut-over reads 10^6 records;
    a file object around the descriptor cost as much as the read), more when it grew since."""
    parts = []
    while chunk := os.read(fd, max(size_hint, 4096) + 1):
        parts.append(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def staged_segments(log_dir: str | Path, staging_dir: str | Path | None = None) -> Iterator[StagedSegment]:
    """Every readable record of ``log_dir``'s staging tree (``staging_dir``: the one ``prestage --staging-dir``
    named), by partition then base offset. A record that cannot be read is left out: its segment is not staged."""
    root = default_staging_root(log_dir) if staging_dir is None else Path(os.path.realpath(staging_dir))
    if not root.is_dir():
        return
    for part in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in sorted(part.iterdir()):
            if RECORD_RE.match(path.name):
                try:
                    yield StagedSegment(read_record(path), path)
                except ModelError:
                    continue


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


def judge_staged(
    staged: StagedSegment,
    source: str | Path,
    options: ConvertOptions,
    *,
    edges: bool = True,
    deep: bool = False,
    source_stat: os.stat_result | None = None,
) -> Judgement:
    """Whether ``staged`` may replace the live ``source`` converted with ``options`` (the partition's, leader epoch
    included): the source's five identity fields and its edge digest as recorded, the same options, and every staged
    file's identity as recorded after its fsync. ``deep`` also re-reads the staged files and verifies them against
    the recorded digests (a full read: not for the cut-over's window by default); ``edges=False`` skips reading the
    source's edges (the passes, which re-stat every segment of a running broker each time, judge by stat alone).
    ``source_stat``: the source stated by the caller just before (who needs the stat too), instead of again."""
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
    files = staged.paths
    for sfx, want in record.staged.items():
        got = FileIdentity.at(files[sfx])
        if got != want:
            return Judgement(Verdict.STAGED_CHANGED, f"staged {files[sfx]}: {want.differences(got)}")
    if deep and record.staged:
        from migrate.segment.verify import verify_segment

        result = dataclasses.replace(record.result, outputs={sfx: str(p) for sfx, p in files.items()})
        check = verify_segment(result, record.options)
        if not check.ok:
            return Judgement(Verdict.STAGED_CHANGED, f"staged {files['.log']}: {'; '.join(check.problems[:3])}")
    return Judgement(Verdict.USABLE)


def is_usable(staged: StagedSegment, source: str | Path, options: ConvertOptions, *, deep: bool = False) -> bool:
    """``judge_staged(...).usable``, the source's edges read."""
    return judge_staged(staged, source, options, deep=deep).usable
