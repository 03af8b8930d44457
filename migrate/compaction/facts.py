"""What compaction needs of every record of a partition, read from its segments as columns (``Facts``).

Pass one (``migrate.compaction.pass_one``) reduces these per key; its tally reads them again for the plan's counts.
Each entry answers for itself what differs by format: the timestamps the conversion gives its records
(``effective_timestamps``), which of them are deletes (``tombstones``), whether it is transactional or control.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import xxhash

from migrate.compaction.rules import CompactionRefusedError, Settings
from migrate.errors import CorruptRecordError
from migrate.format.batch import V2Batch
from migrate.format.entries import Entry
from migrate.format.records import NO_TIMESTAMP, RecordColumns
from migrate.model.plan_tree import CompactionStrategy, TimestampPolicy
from migrate.segment.reader import read_chunks


@dataclass(frozen=True)
class SegmentSource:
    """One segment of a partition as compaction reads it."""

    path: str
    base_offset: int
    mtime_ms: int  # v0 records' timestamp under the mtime policy, and their tombstone clock


def iter_entries(
    sources: Iterable[SegmentSource], chunk_bytes: int = 8 << 20
) -> Iterator[tuple[SegmentSource, Entry, int]]:
    """Every complete entry of the segments in order, with the file position of its chunk; a torn tail is skipped
    (the plan lists the ones it drops)."""
    for src in sources:
        with open(src.path, "rb") as f:
            for chunk in read_chunks(f, src.path, chunk_bytes):
                for item in chunk.entries.items:
                    yield src, item, chunk.position


def _header_values(headers: list | None, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    values = np.zeros(n, np.int64)
    has = np.zeros(n, bool)
    if headers is None or not name:
        return values, has
    for i, hs in enumerate(headers):
        value = None
        for k, v in hs:
            if k == name:
                value = v  # the last occurrence counts
        if value is not None and len(value) == 8:
            has[i] = True
            values[i] = int.from_bytes(value, "big", signed=True)
    return values, has


def _header_bytes(headers: list | None, n: int) -> np.ndarray:
    if headers is None:
        return np.zeros(n, np.int64)
    return np.fromiter(
        (sum(len(k.encode()) + (len(v) if v is not None else 0) for k, v in hs) for hs in headers), np.int64, n
    )


def key_digests(cols: RecordColumns) -> tuple[np.ndarray, np.ndarray]:
    """xxh3-128 of every key as two uint64 halves (a null key digests as an empty one; keyless records never reach
    the state)."""
    mv = memoryview(cols.buffer).cast("B")
    starts = cols.key_pos.tolist()
    ends = (cols.key_pos + np.maximum(cols.key_len, 0)).tolist()
    raw = b"".join(map(xxhash.xxh3_128_digest, map(mv.__getitem__, map(slice, starts, ends))))
    halves = np.frombuffer(raw, ">u8").astype(np.uint64)
    return halves[0::2], halves[1::2]


@dataclass(slots=True)
class Facts:
    """What compaction needs of an entry's records, as columns."""

    offsets: np.ndarray
    keyless: np.ndarray
    delete: np.ndarray
    clock: np.ndarray
    sizes: np.ndarray  # keys, values and headers
    hi: np.ndarray | None = None
    lo: np.ndarray | None = None
    cmp: np.ndarray | None = None
    has: np.ndarray | None = None


def entry_facts(
    item: Entry, src: SegmentSource, settings: Settings, digests: bool = True, chunk_position: int = 0
) -> Facts:
    cols = item.records
    assert cols is not None
    n = len(cols)
    if isinstance(item, V2Batch) and (item.is_transactional or item.is_control):  # only a v2 batch can be
        raise CompactionRefusedError(
            f"a {'control' if item.is_control else 'transactional'} batch in a partition planned for compaction: "
            "which of its records an abort hides is the broker's cleaner's business",
            position=chunk_position + item.first_position,
            offset=item.base_offset,
            path=src.path,
            hint="Nothing was changed. Leave this topic out of --compact: it is then converted without compaction "
            "and Kafka's own cleaner compacts it, knowing the transactions.",
        )
    # the timestamps the conversion gives the records (what ``migrate.segment.convert`` writes), and the tombstone
    # clock: a record's timestamp, a v0 record's segment mtime whatever the policy
    mtime_policy = settings.timestamps == TimestampPolicy.MTIME
    converted = item.effective_timestamps(src.mtime_ms if mtime_policy else NO_TIMESTAMP)
    facts = Facts(
        offsets=cols.offsets,
        keyless=cols.key_len < 0,
        delete=item.tombstones(),
        clock=converted if mtime_policy else item.effective_timestamps(src.mtime_ms),
        sizes=np.maximum(cols.key_len, 0) + np.maximum(cols.value_len, 0) + _header_bytes(cols.headers, n),
    )
    if digests:
        facts.hi, facts.lo = key_digests(cols)
        if settings.strategy == CompactionStrategy.TIMESTAMP:
            facts.cmp = converted
        elif settings.strategy == CompactionStrategy.HEADER:
            facts.cmp, facts.has = _header_values(cols.headers, settings.header, n)
    return facts


def iter_facts(
    sources: Iterable[SegmentSource], settings: Settings, chunk_bytes: int = 8 << 20, digests: bool = True
) -> Iterator[Facts]:
    """Facts of every non-empty entry in offset order; offsets going backwards across entries or segments refuse."""
    last: int | None = None
    for src, item, chunk_position in iter_entries(sources, chunk_bytes):
        cols = item.records
        if cols is None or not len(cols):
            continue
        facts = entry_facts(item, src, settings, digests, chunk_position)
        first = int(facts.offsets[0])
        if last is not None and first <= last:
            raise CorruptRecordError(
                f"offset {first} does not follow offset {last}: compaction needs the partition in offset order",
                position=chunk_position + item.first_position,
                offset=first,
                path=src.path,
            )
        last = item.last_offset
        yield facts
