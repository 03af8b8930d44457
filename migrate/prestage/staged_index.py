"""The staged index of one partition's staging dir: the facts of every record in it, in one file, so that the
cut-over's plan and execute judge a partition's staged segments by stat without reading a record each.

    <staging dir>/staged-index.bin     (no Kafka suffix: were it ever left in a partition dir, Kafka's loader
                                        would take a name ending in .index for an index and parse an offset from it)
    magic    8 bytes    b"KLMSIDX" + version (1)
    head     u32 LE length, then JSON {"partition": str, "staging": str, "rows": int, "blob": int}
    rows     rows x ROW: numpy structured, little-endian (below), by base offset
    blob     each row's result text, concatenated: the record's SegmentResult as the state database stores it
    digest   32 bytes   sha256 of everything before it

A row holds what the record says (the source's identity, the staged files' identities, the comparable options'
digest, the counts a plan shows, the live files' stats at staging time) and the identity of the record file as the
pass wrote it. The records stay the truth: a row is used only where its record file is still the one it names
(device aside, inode, size, mtime and ctime by one lstat, which the plan's scan of the tree makes anyway); any other
record is read as before, and a missing, damaged or stale index only costs those reads. A row's result text is
taken verbatim by the cut-over where the take would write the same (``verbatim``: the outputs at the staging paths,
their stats the staged files', the live files as staged), so no result is decoded or encoded in the window.

The index is written after the records (by a pass, per partition it staged), as an unnamed file linked under a
temporary name and renamed over the old one: a crash leaves the old index or none, never a torn one that parses.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from migrate.codec import dumps_compact, to_json
from migrate.errors import ModelError
from migrate.kafka.names import segment_name
from migrate.model.plan_tree import ConvertOptions
from migrate.model.run_state import FileStat
from migrate.model.segment_files import SegmentFiles
from migrate.prestage.identity import FileIdentity
from migrate.prestage.record import (
    STAGED_FILES,
    Judgement,
    StagedSegment,
    Verdict,
    comparable,
    record_name,
)
from migrate.prestage.tree import NodeId, PartitionStaging

INDEX_NAME = "staged-index.bin"
INDEX_NEW_NAME = "staged-index.bin.new"  # the next index, linked here before it is renamed over the old one
INDEX_NAMES = (INDEX_NAME, INDEX_NEW_NAME)
MAGIC = b"KLMSIDX\x01"
_DIGEST = 32
_MAX_HEAD = 1 << 16
_MAX_INDEX = 1 << 32  # a few KB a staged segment; larger is not one of ours
_IDENTITY = ("dev", "ino", "size", "mtime", "ctime")
_FILES = ("log", "index", "timeindex")  # STAGED_FILES, as the row names its columns

ROW = np.dtype(
    [("base", "<i8")]
    + [(f"src_{f}", "<i8") for f in _IDENTITY]
    + [(f"rec_{f}", "<i8") for f in _IDENTITY[1:]]
    + [("staged", "<i8")]
    + [(f"{k}_{f}", "<i8") for k in _FILES for f in _IDENTITY]
    + [(f"live_{k}_{f}", "<i8") for k in _FILES for f in ("ino", "size", "mtime")]
    + [("entries_v0", "<i8"), ("entries_v1", "<i8"), ("entries_v2", "<i8")]
    + [("source_bytes", "<i8"), ("output_bytes", "<i8"), ("records", "<i8"), ("seconds", "<f8")]
    + [("mtime_records", "<i8")]
    + [("verbatim", "<i8"), ("text_at", "<i8"), ("text_len", "<i8")]
    # digests as 64-bit words, so that a row reads back as a tuple of plain numbers
    + [(f"options_{i}", "<u8") for i in range(2)]
    + [(f"record_digest_{i}", "<u8") for i in range(4)]
)
_AT = {name: i for i, name in enumerate(ROW.names or ())}  # a structured dtype: its names are never None
_SRC = _AT["src_dev"]
_REC = _AT["rec_ino"]
_STAGED_AT = tuple(_AT[f"{k}_dev"] for k in _FILES)
_LIVE_AT = tuple(_AT[f"live_{k}_ino"] for k in _FILES)
_OPTIONS = _AT["options_0"]
_DIGEST_AT = _AT["record_digest_0"]

Row = tuple  # one row of ROW as a tuple of numbers (``ndarray.tolist``): read by the functions below


def options_digest(options: ConvertOptions) -> tuple[int, int]:
    """What a row keeps of the options it was converted with (those that decide a closed segment's bytes): two
    words of their sha256."""
    text = json.dumps(to_json(comparable(options)), sort_keys=True, separators=(",", ":"))
    return struct.unpack("<2Q", hashlib.sha256(text.encode()).digest()[:16])


@dataclass(frozen=True)
class StagedIndex:
    partition: str
    staging: str  # the staging dir's path its rows were judged at: a row is verbatim only there
    rows: np.ndarray  # of ROW, by base offset
    blob: bytes
    by_base: dict[int, Row]  # base offset -> its row

    def row(self, base_offset: int) -> Row | None:
        return self.by_base.get(base_offset)

    def text(self, row: Row) -> str:
        at, n = row[_AT["text_at"]], row[_AT["text_len"]]
        return self.blob[at : at + n].decode()

    def take(self, base_offset: int) -> tuple[np.ndarray, bytes]:
        """A row of this index, as ``encode_index`` takes it into the next one."""
        row = np.array([self.by_base[base_offset]], dtype=ROW)
        start, n = int(row["text_at"][0]), int(row["text_len"][0])
        return row, self.blob[start : start + n]


def _identity(row: Row, at: int) -> FileIdentity:
    return FileIdentity(row[at], row[at + 1], row[at + 2], row[at + 3], row[at + 4])


def row_base(row: Row) -> int:
    return int(row[0])


def row_source(row: Row) -> FileIdentity:
    return _identity(row, _SRC)


def row_is_staged(row: Row) -> bool:
    return bool(row[_AT["staged"]])


def row_staged(row: Row) -> SegmentFiles[FileIdentity]:
    """The staged files a row names (none: the source needed no conversion)."""
    if not row[_AT["staged"]]:
        return SegmentFiles()
    return SegmentFiles.of((kind, _identity(row, at)) for kind, at in zip(STAGED_FILES, _STAGED_AT))


def _live(row: Row, at: int) -> FileStat | None:
    return FileStat(row[at], row[at + 1], row[at + 2]) if row[at] >= 0 else None


_LIVE_LOG_AT, _LIVE_INDEX_AT, _LIVE_TIME_INDEX_AT = _LIVE_AT  # STAGED_FILES: the .log, .index and .timeindex


def row_live_before(row: Row) -> SegmentFiles[FileStat]:
    """The live files' stats when the segment was staged (a file the source had not is None)."""
    return SegmentFiles(_live(row, _LIVE_LOG_AT), _live(row, _LIVE_INDEX_AT), _live(row, _LIVE_TIME_INDEX_AT))


def row_verbatim(row: Row) -> bool:
    return bool(row[_AT["verbatim"]])


class StagedCounts(NamedTuple):
    source_bytes: int
    output_bytes: int
    records: int
    seconds: float  # the pass's, converting and verifying it: what a cold run would have spent
    mtime_timestamped_records: int


def row_counts(row: Row) -> StagedCounts:
    at = _AT["source_bytes"]
    return StagedCounts(row[at], row[at + 1], row[at + 2], row[at + 3], row[at + 4])


def row_record_digest(row: Row) -> str:
    """The sha256 of the record the row was made from, as ``StagedSegment.digest`` spells it."""
    return struct.pack("<4Q", *row[_DIGEST_AT : _DIGEST_AT + 4]).hex()


def row_entries(row: Row) -> dict[int, int]:
    at = _AT["entries_v0"]
    return {m: row[at + m] for m in range(3) if row[at + m]}


def row_stands(row: Row, lstat: Callable[[str], os.stat_result | None]) -> bool:
    """The row's record file is still the one it was made from (else its record is read instead); ``lstat``: of a
    name in the partition's staging dir (``PartitionStaging.lstat``, or a scan's)."""
    st = lstat(record_name(row[0]))
    return st is not None and (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == row[_REC : _REC + 4]


def standing_row(
    index: StagedIndex | None,
    base_offset: int,
    source: Path,
    wanted: tuple[int, int],
    lstat: Callable[[str], os.stat_result | None],
    where: Path,
) -> tuple[Row, Judgement] | None:
    """The row of ``base_offset`` where it stands for its record (``row_stands``), judged against its source now
    (``judge_row``); None where the record must be read instead."""
    row = index.row(base_offset) if index is not None else None
    if row is None or not row_stands(row, lstat):
        return None
    try:
        source_stat: os.stat_result | None = os.stat(source)
    except FileNotFoundError:
        source_stat = None
    return row, judge_row(row, str(source), source_stat, wanted, lstat, where)


def judge_row(
    row: Row,
    source: str,
    source_stat: os.stat_result | None,
    wanted: tuple[int, int],
    lstat: Callable[[str], os.stat_result | None],
    where: Path,
) -> Judgement:
    """``record.judge_staged`` by stat (its edges not read), from a row that stands: the options (``wanted``:
    ``options_digest`` of the partition's), the source's five identity fields, every staged file a regular file with
    one name and the identity recorded once it was linked (``lstat`` as for ``row_stands``; ``where``: the staging
    dir, for messages)."""
    if row[_OPTIONS : _OPTIONS + 2] != wanted:
        return Judgement(Verdict.OPTIONS_DIFFER, "staged with other options (or another leader epoch) than wanted")
    if source_stat is None:
        return Judgement(Verdict.SOURCE_GONE, f"{source} is gone")
    st = source_stat
    now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if now != row[_SRC : _SRC + 5]:
        return Judgement(Verdict.SOURCE_CHANGED, f"{source}: {row_source(row).differences(FileIdentity(*now))}")
    if not row[_AT["staged"]]:
        return Judgement(Verdict.USABLE)
    base = row[0]
    for kind, at in zip(STAGED_FILES, _STAGED_AT):
        name = segment_name(base, kind)
        got = lstat(name)
        if (
            got is None
            or not stat.S_ISREG(got.st_mode)
            or got.st_nlink != 1
            or (got.st_dev, got.st_ino, got.st_size, got.st_mtime_ns, got.st_ctime_ns) != row[at : at + 5]
        ):
            want = _identity(row, at)
            what = (
                want.differences(FileIdentity.of(got))
                if got is not None and stat.S_ISREG(got.st_mode) and got.st_nlink == 1
                else "missing, or not a regular file with one name"
            )
            return Judgement(Verdict.STAGED_CHANGED, f"staged {where / name}: {what}")
    return Judgement(Verdict.USABLE)


def new_row(segment: StagedSegment, record_stat: os.stat_result, staging_path: str) -> tuple[np.ndarray, bytes]:
    """The row of one record (with the stat of its file as written) and its result text."""
    record = segment.record
    result = record.result
    rows = np.zeros(1, dtype=ROW)
    row = rows[0]
    row["base"] = record.base_offset
    for f, v in zip(_IDENTITY, _fields(record.source_identity)):
        row[f"src_{f}"] = v
    st = record_stat
    for f, v in zip(_IDENTITY[1:], (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)):
        row[f"rec_{f}"] = v
    row["staged"] = 1 if record.staged else 0
    for kind, k in zip(STAGED_FILES, _FILES):
        identity = record.staged.get(kind)
        for f, v in zip(_IDENTITY, _fields(identity) if identity else (-1,) * 5):
            row[f"{k}_{f}"] = v
        live = result.live_before.get(kind)
        for f, v in zip(("ino", "size", "mtime"), (live.inode, live.size, live.mtime_ns) if live else (-1,) * 3):
            row[f"live_{k}_{f}"] = v
    for m in range(3):
        row[f"entries_v{m}"] = int(result.magics_in.get(str(m), 0))
    row["source_bytes"], row["output_bytes"], row["records"] = result.source_bytes, result.output_bytes, result.records
    row["seconds"] = result.seconds
    row["mtime_records"] = result.mtime_timestamped_records
    row["options_0"], row["options_1"] = options_digest(record.options)
    for i, word in enumerate(struct.unpack("<4Q", bytes.fromhex(segment.digest))):
        row[f"record_digest_{i}"] = word
    # the take writes the outputs at their staging paths with the staged files' stats: where the record's result
    # already says exactly that, its text stands as it is
    prefix = os.path.join(staging_path, "")
    expected = record.staged.map(lambda kind, _: f"{prefix}{segment_name(record.base_offset, kind)}")
    stats = record.staged.map(lambda _, i: FileStat(i.inode, i.size, i.mtime_ns))
    row["verbatim"] = int(
        bool(record.staged) and result.outputs == expected and result.output_stats == stats and not result.parts
    )
    text = dumps_compact(to_json(result)).encode()
    row["text_len"] = len(text)
    return rows, text


def encode_index(partition: str, staging: str, rows: list[tuple[np.ndarray, bytes]]) -> bytes:
    """The index of ``rows`` (each one row of ROW and its result text, as ``new_row`` or ``StagedIndex.take``
    give them), put in base offset order."""
    ordered = sorted(rows, key=lambda r: int(r[0]["base"][0]))
    table = np.concatenate([r for r, _ in ordered]) if ordered else np.zeros(0, dtype=ROW)
    texts = [t for _, t in ordered]
    lengths = np.array([len(t) for t in texts], dtype=np.int64)
    table["text_len"] = lengths
    table["text_at"] = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(texts) else lengths
    blob = b"".join(texts)
    head = json.dumps({"partition": partition, "staging": staging, "rows": len(texts), "blob": len(blob)}).encode()
    body = MAGIC + struct.pack("<I", len(head)) + head + table.tobytes() + blob
    return body + hashlib.sha256(body).digest()


def decode_index(data: bytes, where: str) -> StagedIndex:
    """The index in ``data``; ModelError naming ``where`` and the byte position for anything else."""
    if len(data) < len(MAGIC) + 4 + _DIGEST or data[: len(MAGIC)] != MAGIC:
        raise ModelError(f"{where}: not a staged index of this version (byte position 0)")
    body, digest = data[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ModelError(f"{where}: its digest does not match its bytes (byte position {len(body)}): torn or edited")
    (head_len,) = struct.unpack_from("<I", body, len(MAGIC))
    start = len(MAGIC) + 4
    if head_len > _MAX_HEAD or start + head_len > len(body):
        raise ModelError(f"{where}: a head of {head_len} bytes at byte position {start} runs past the file")
    try:
        head = json.loads(body[start : start + head_len])
        partition, staging = str(head["partition"]), str(head["staging"])
        count, blob_len = int(head["rows"]), int(head["blob"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{where}: an unreadable head at byte position {start} ({exc})") from exc
    rows_at = start + head_len
    if count < 0 or blob_len < 0 or rows_at + count * ROW.itemsize + blob_len != len(body):
        raise ModelError(
            f"{where}: {count} rows and a blob of {blob_len} bytes do not fill the file (byte position {rows_at})"
        )
    rows = np.frombuffer(body, dtype=ROW, count=count, offset=rows_at)
    blob = body[rows_at + count * ROW.itemsize :]
    ends = rows["text_at"] + rows["text_len"]
    if count and (rows["text_at"].min() < 0 or rows["text_len"].min() < 0 or ends.max() > blob_len):
        raise ModelError(f"{where}: a row's result text lies outside the blob (byte position {rows_at})")
    if count and (np.diff(rows["base"]) <= 0).any():
        raise ModelError(f"{where}: its rows are not in base offset order (byte position {rows_at})")
    return StagedIndex(partition, staging, rows, blob, {row[0]: row for row in rows.tolist()})


def read_index(staging: PartitionStaging) -> StagedIndex | None:
    """The partition's index, or None where there is none, or it is not one this tool wrote whole (the records are
    read instead)."""
    try:
        fd = staging.open_read(INDEX_NAME)
    except (FileNotFoundError, OSError):
        return None
    try:
        size = os.fstat(fd).st_size
        if size > _MAX_INDEX:
            return None
        chunks = []
        while chunk := os.read(fd, max(size, 1 << 16)):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        index = decode_index(b"".join(chunks), str(staging.path / INDEX_NAME))
    except ModelError:
        return None
    # rows judged at another path (the tree reached another way since) say nothing of this one: the records decide
    return index if (index.partition, index.staging) == (staging.name, str(staging.path)) else None


def write_index(staging: PartitionStaging, rows: list[tuple[np.ndarray, bytes]]) -> bool:
    """Write the index of ``rows`` into ``staging``; False where it could not be (a file this tool did not write is
    under its name or its temporary one: left alone, and the records are read instead)."""
    data = encode_index(staging.name, str(staging.path), rows)
    old = staging.lstat(INDEX_NAME)
    if old is not None and not _is_ours(staging, INDEX_NAME):
        return False  # a file this tool did not write under the index's name: never replaced
    # a pass killed between the link and the rename leaves the new name: ours only if it reads as an index
    in_the_way = staging.lstat(INDEX_NEW_NAME)
    if in_the_way is not None and not (
        _is_ours(staging, INDEX_NEW_NAME) and staging.remove_owned(INDEX_NEW_NAME, NodeId.of(in_the_way))
    ):
        return False
    fd = staging.new_file(0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        staging.link(fd, INDEX_NEW_NAME)
    except BaseException:
        staging.forget_new(fd)
        raise
    os.close(fd)
    os.rename(INDEX_NEW_NAME, INDEX_NAME, src_dir_fd=staging.fd, dst_dir_fd=staging.fd)
    return True


def remove_index(staging: PartitionStaging) -> None:
    """The index out of a staging dir that becomes a partition's new directory (only where it is ours)."""
    for name in INDEX_NAMES:
        st = staging.lstat(name)
        if st is not None and _is_ours(staging, name):
            staging.remove_owned(name, NodeId.of(st))


def _is_ours(staging: PartitionStaging, name: str) -> bool:
    try:
        fd = staging.open_read(name)
    except OSError:
        return False
    try:
        data = os.pread(fd, _MAX_INDEX, 0)
    finally:
        os.close(fd)
    try:
        decode_index(data, name)
    except ModelError:
        return False
    return True


def _fields(identity: FileIdentity) -> tuple[int, int, int, int, int]:
    return identity.device, identity.inode, identity.size, identity.mtime_ns, identity.ctime_ns
