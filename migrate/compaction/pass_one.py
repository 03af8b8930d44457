"""Compaction during migration: KIP-280 strategies and KIP-87 deletes, the computation itself (no files, no state).

Compacted topics are the ones that keep v0/v1 data forever, so the one-shot migration is the natural moment to
compact them with the strategy their producers need (``plan --compact TOPIC_REGEX=offset|timestamp|header:NAME``).

Pass one (``pass_one``) reads every record of a partition in offset order and keeps, per distinct key, the winning
offset and the one value the strategy compares, exactly as KIP-280 states the rules:

- ``offset``: the highest offset wins (Kafka's own cleaner);
- ``timestamp``: the highest timestamp wins, ties to the highest offset. A v0 record compares by the timestamp the
  conversion gives it (the segment's mtime under ``--timestamps mtime``, -1 under ``none``);
- ``header``: the last occurrence of the named header in a record, read as a big-endian signed 8-byte long, wins
  when highest, ties to the highest offset; a record with the header beats one without; a value that is not 8 bytes
  counts as missing; neither having it falls back to offset; a blank header name falls back to offset.

The record at the log end offset always survives (KIP-280's replica-consistency case). A delete is a record with a
null value or with the KIP-87 flag (bit 5 of a v2 record's attributes); deletes that win their key are kept, as the
cleaner keeps them until delete.retention.ms, unless ``--drop-tombstones-older-than`` drops those whose timestamp
(a v0 record's: its segment's mtime) is older than that much before the partition's newest timestamp. A keyless
record (Kafka refuses them on compacted topics), a transactional or control batch (which records an abort makes
invisible is the cleaner's business) and a state over the memory limit refuse the partition.

Memory is what KIP-280 estimates per distinct key: a 16-byte key digest (xxh3-128; Kafka's cleaner uses MD5) and the
8-byte offset, plus the 8-byte comparison value for timestamp and header, plus one flags byte for header (has the
header) or with a tombstone horizon (is a delete), plus an 8-byte timestamp with a horizon when the compared value
is not already it (``bytes_per_key``). The state is numpy arrays sorted by digest, in 256 buckets by its top byte:
pending records (at most an eighth of the state) are reduced by a sort and merged in by binary search, a bucket at a
time, so a merge neither sorts the state nor holds a second copy of it (``benchmarks/bench_compaction.py``: peak
about 1.5 times the KIP's estimate at 10^7 keys, reading buffers included).

Pass two (``retained``, ``encode_retained_v2``) is the conversion dropping the losers: survivors keep their offsets,
dropped records leave gaps, as Kafka's cleaner does. ``migrate.compaction.reference`` is the deliberately simple
implementation the verification trusts instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from migrate.errors import CorruptRecordError, SegmentRefusedError
from migrate.format import batch as v2
from migrate.format import codecs, legacy
from migrate.format.checksums import crc32c
from migrate.format.entries import Entry
from migrate.format.records import NO_TIMESTAMP, RecordColumns, TimestampType
from migrate.format.varint import decode_varint
from migrate.model import CompactionPlan, CompactionStrategy, ConvertOptions, TimestampPolicy
from migrate.segment.reader import read_chunks

KEY_DIGEST_BYTES = 16
HAS_HEADER = 1
IS_DELETE = 2
MERGE_AT_LEAST = 1 << 18  # pending records merged into the state at once, at least
BUCKETS = 256  # the state's sorted runs, by the top byte of the key digest
_BUCKET_STARTS = np.array([b << 56 for b in range(1, BUCKETS)], np.uint64)  # where buckets 1.. begin
KEYLESS_LISTED = 50  # offsets of keyless records named in a refusal (ranges count as one)


class CompactionRefusedError(SegmentRefusedError):
    """A partition planned for compaction that cannot be compacted as asked (keyless records, transactions, the
    memory limit): it is left as it was."""

    default_hint = (
        "Nothing was changed. Leave the topic out of --compact (it is then converted without compaction) or fix the "
        "cause, and plan again."
    )


# --- rules, durations, sizes (the plan command's vocabulary) ----------------------------------------------------


@dataclass(frozen=True)
class CompactionRule:
    """One ``--compact TOPIC_REGEX=offset|timestamp|header:NAME``: topics whose whole name matches, and how."""

    topics: str
    strategy: CompactionStrategy
    header: str = ""

    @classmethod
    def parse(cls, text: str) -> CompactionRule:
        # the last '=' that is followed by a strategy separates them: topic regexes may hold '=' and header names too
        m = re.fullmatch(r"(?P<topics>.+)=(?P<strategy>offset|timestamp|header:(?P<header>.*))", text, re.DOTALL)
        if m is None:
            raise ValueError(
                f"--compact {text!r}: expected TOPIC_REGEX=offset, TOPIC_REGEX=timestamp or TOPIC_REGEX=header:NAME"
            )
        try:
            re.compile(m["topics"])
        except re.error as exc:
            raise ValueError(f"--compact {text!r}: {m['topics']!r} is not a regular expression ({exc})") from None
        if m["header"] is not None:
            return cls(m["topics"], CompactionStrategy.HEADER, m["header"])
        return cls(m["topics"], CompactionStrategy(m["strategy"]))

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topics, topic) is not None

    def __str__(self) -> str:
        strategy = f"header:{self.header}" if self.strategy == CompactionStrategy.HEADER else self.strategy.value
        return f"{self.topics}={strategy}"


# --- what pass one needs of a partition --------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How one partition is compacted: its plan entry's rule and the conversion's timestamp policy."""

    strategy: CompactionStrategy  # effective: a blank header name is offset already
    header: str = ""
    timestamps: TimestampPolicy = TimestampPolicy.MTIME
    drop_tombstones_older_than_ms: int | None = None
    memory_limit_bytes: int | None = None

    @classmethod
    def of(cls, plan: CompactionPlan, options: ConvertOptions) -> Settings:
        return cls(
            plan.effective_strategy,
            plan.header if plan.effective_strategy == CompactionStrategy.HEADER else "",
            options.timestamps,
            plan.drop_tombstones_older_than_ms,
            plan.memory_limit_bytes,
        )

    @property
    def compares(self) -> bool:
        return self.strategy != CompactionStrategy.OFFSET

    @property
    def tracks_flags(self) -> bool:
        return self.strategy == CompactionStrategy.HEADER or self.drop_tombstones_older_than_ms is not None

    @property
    def tracks_clock(self) -> bool:
        """The tombstone horizon needs each winner's timestamp; under the timestamp strategy with the mtime policy
        it is the compared value already (a v0 record's clock is its segment's mtime either way)."""
        if self.drop_tombstones_older_than_ms is None:
            return False
        return not (self.strategy == CompactionStrategy.TIMESTAMP and self.timestamps == TimestampPolicy.MTIME)

    @property
    def bytes_per_key(self) -> int:
        return (
            KEY_DIGEST_BYTES
            + 8
            + (8 if self.compares else 0)
            + (1 if self.tracks_flags else 0)
            + (8 if self.tracks_clock else 0)
        )


@dataclass(frozen=True)
class SegmentSource:
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


def record_attributes(batch: v2.V2Batch) -> np.ndarray:
    """Each record's attributes byte (KIP-87 puts the delete flag in bit 5): the decoder skips it, so walk the
    records' length prefixes once more."""
    cols = batch.records
    assert cols is not None
    n = len(cols)
    out = np.zeros(n, np.uint8)
    body = memoryview(cols.buffer).cast("B")
    limit = len(body)
    pos = 0
    for i in range(n):
        length, pos = decode_varint(body, pos, limit, 5)
        out[i] = body[pos]
        pos += length
    return out


def converted_timestamps(item: Entry, mtime_ms: int, policy: TimestampPolicy) -> np.ndarray:
    """The timestamps the conversion gives the entry's records (what ``migrate.segment.convert`` writes)."""
    cols = item.records
    assert cols is not None
    if isinstance(item, legacy.LegacyRun):
        if policy == TimestampPolicy.MTIME:
            return np.where(item.magics == 0, mtime_ms, cols.timestamps)
        return cols.timestamps
    if isinstance(item, legacy.LegacyWrapper):
        if item.magic == 0:
            return np.full(len(cols), mtime_ms if policy == TimestampPolicy.MTIME else NO_TIMESTAMP, np.int64)
        if item.timestamp_type == TimestampType.LOG_APPEND_TIME:
            return np.full(len(cols), item.timestamp, np.int64)
    return cols.timestamps


def _clock(item: Entry, mtime_ms: int, converted: np.ndarray) -> np.ndarray:
    """The tombstone clock: a record's timestamp, a v0 record's segment mtime whatever the policy."""
    if isinstance(item, legacy.LegacyRun):
        return np.where(item.magics == 0, mtime_ms, converted)
    if isinstance(item, legacy.LegacyWrapper) and item.magic == 0:
        return np.full(len(converted), mtime_ms, np.int64)
    return converted


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
    delete = cols.value_len < 0
    if isinstance(item, v2.V2Batch):
        if item.is_transactional or item.is_control:
            raise CompactionRefusedError(
                f"a {'control' if item.is_control else 'transactional'} batch in a partition planned for compaction: "
                "which of its records an abort hides is the broker's cleaner's business",
                position=chunk_position + item.position,
                offset=item.base_offset,
                path=src.path,
                hint="Nothing was changed. Leave this topic out of --compact: it is then converted without compaction "
                "and Kafka's own cleaner compacts it, knowing the transactions.",
            )
        if n:
            delete = delete | ((record_attributes(item) & v2.KIP87_TOMBSTONE_BIT) != 0)
    converted = converted_timestamps(item, src.mtime_ms, settings.timestamps)
    facts = Facts(
        offsets=cols.offsets,
        keyless=cols.key_len < 0,
        delete=delete,
        clock=_clock(item, src.mtime_ms, converted),
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


# --- pass one ----------------------------------------------------------------------------------------------------


@dataclass
class _State:
    """Per distinct key, sorted by (hi, lo): the winner's offset and what it is compared or judged by."""

    hi: np.ndarray
    lo: np.ndarray
    off: np.ndarray
    cmp: np.ndarray | None
    flags: np.ndarray | None
    clock: np.ndarray | None

    def names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) is not None]

    def columns(self) -> dict[str, np.ndarray]:
        # getattr, not dataclasses.asdict: that deep-copies every array
        return {name: getattr(self, name) for name in self.names()}

    def absent(self) -> dict[str, None]:
        return {f.name: None for f in dataclasses.fields(self) if getattr(self, f.name) is None}

    def __len__(self) -> int:
        return len(self.off)


def _empty_state(settings: Settings) -> _State:
    return _State(
        np.zeros(0, np.uint64),
        np.zeros(0, np.uint64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64) if settings.compares else None,
        np.zeros(0, np.uint8) if settings.tracks_flags else None,
        np.zeros(0, np.int64) if settings.tracks_clock else None,
    )


@dataclass(frozen=True)
class Survivors:
    """Pass one's result: the offsets to keep, in order, and what the plan reports about them."""

    offsets: np.ndarray  # int64, strictly increasing
    records: int
    distinct_keys: int
    tombstones_dropped: int
    bytes_per_key: int
    log_end_offset: int | None  # the last record's offset, kept whatever the strategy says
    newest_timestamp: int | None  # the tombstone clock's latest value in the partition

    @property
    def state_bytes(self) -> int:
        return self.distinct_keys * self.bytes_per_key

    def sha256(self) -> str:
        return survivors_sha256(self.offsets)


def survivors_sha256(offsets: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(offsets, ">i8").tobytes()).hexdigest()


class PassOne:
    """The reduction of one partition: feed ``Facts`` in offset order, then ``finish``.

    The state is split into ``BUCKETS`` sorted runs by the top byte of the key digest, so a merge inserts into one
    small run at a time: its transient memory is a bucket's column, not a second copy of the state. Pending records
    wait until they number an eighth of the state (at least ``merge_at``): each merge copies the state once, so
    they cost a few copies of it in all, and at most an eighth more memory.
    """

    def __init__(self, settings: Settings, partition: str = "", merge_at: int = MERGE_AT_LEAST) -> None:
        self.settings = settings
        self.partition = partition
        self.merge_at = merge_at
        self.buckets = [_empty_state(settings) for _ in range(BUCKETS)]
        self.keys = 0
        self.pending: list[_State] = []
        self.pending_records = 0
        self.records = 0
        self.keyless: list[np.ndarray] = []
        self.last_offset: int | None = None
        self.newest: int | None = None

    @property
    def state_bytes(self) -> int:
        return self.keys * self.settings.bytes_per_key

    def add(self, facts: Facts) -> None:
        n = len(facts.offsets)
        if not n:
            return
        self.records += n
        self.last_offset = int(facts.offsets[-1])
        newest = int(facts.clock.max())
        self.newest = newest if self.newest is None else max(self.newest, newest)
        keyed = ~facts.keyless
        if not keyed.all():
            self.keyless.append(facts.offsets[facts.keyless])
        part = self._state_of(facts, None if keyed.all() else keyed)
        self.pending.append(part)
        self.pending_records += len(part)
        if self.pending_records >= max(self.merge_at, self.keys // 8):
            self._merge()

    def _state_of(self, f: Facts, keyed: np.ndarray | None) -> _State:
        """Only the columns the state keeps (pending records cost what a key costs, no more)."""
        s = self.settings
        assert f.hi is not None and f.lo is not None
        flags = None
        if s.tracks_flags:
            flags = f.delete.astype(np.uint8) * IS_DELETE
            if f.has is not None:
                flags |= f.has.astype(np.uint8) * HAS_HEADER
        part = _State(f.hi, f.lo, f.offsets, f.cmp if s.compares else None, flags, f.clock if s.tracks_clock else None)
        if keyed is not None:
            part = _State(**{k: v[keyed] for k, v in part.columns().items()}, **part.absent())
        return part

    def _take_pending(self) -> _State:
        parts, self.pending, self.pending_records = self.pending, [], 0
        out = _empty_state(self.settings)
        for name in out.names():
            # a column at a time, each part's released as it is copied: never two copies of the pending records
            setattr(out, name, np.concatenate([getattr(p, name) for p in parts]))
            for p in parts:
                setattr(p, name, None)
        return out

    def _merge(self) -> None:
        if not self.pending:
            return
        winners = self._reduce(self._take_pending())
        # sorted by digest, so each bucket's keys are one slice
        cuts = np.concatenate([[0], np.searchsorted(winners.hi, _BUCKET_STARTS), [len(winners)]])
        for b, (start, end) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist())):
            if start == end:
                continue
            part = _State(**{k: v[start:end] for k, v in winners.columns().items()}, **winners.absent())
            before = len(self.buckets[b])
            self.buckets[b] = self._merge_sorted(self.buckets[b], part)
            self.keys += len(self.buckets[b]) - before
        del winners
        limit = self.settings.memory_limit_bytes
        if limit is not None and self.state_bytes > limit:
            raise CompactionRefusedError(
                f"partition {self.partition}: pass one of compaction holds {self.keys} distinct keys after offset "
                f"{self.last_offset} (and more may follow), {self.state_bytes} bytes at "
                f"{self.settings.bytes_per_key} bytes per key, over the memory limit of {limit} bytes",
                offset=self.last_offset,
                hint="Nothing was changed. Raise --compact-memory-limit to at least the partition's distinct keys "
                "times the bytes per key (with room to spare: keys arrive until the log end), or leave the topic out "
                "of --compact.",
            )

    def _reduce(self, p: _State) -> _State:
        """Per key, the winner among records in offset order: a stable sort by (key, rank) puts it last in its key's
        run (stability keeps equal ranks in offset order, so ties go to the highest offset)."""
        keys: list[np.ndarray] = []
        if self.settings.strategy != CompactionStrategy.OFFSET:
            assert p.cmp is not None
            keys.append(p.cmp)
        if self.settings.strategy == CompactionStrategy.HEADER:
            assert p.flags is not None
            keys.append(p.flags & HAS_HEADER)
        order = np.lexsort((*keys, p.lo, p.hi))
        hi, lo = p.hi[order], p.lo[order]
        last = np.ones(len(order), bool)
        last[:-1] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
        del hi, lo
        pick = order[last]
        del order, last
        return _State(**{k: v[pick] for k, v in p.columns().items()}, **p.absent())

    def _wins(self, new: _State, i: np.ndarray, old: _State, j: np.ndarray) -> np.ndarray:
        """Whether ``new[i]`` beats ``old[j]``, the new record having the higher offset."""
        strategy = self.settings.strategy
        if strategy == CompactionStrategy.OFFSET:
            return np.ones(len(i), bool)
        assert new.cmp is not None and old.cmp is not None
        if strategy == CompactionStrategy.TIMESTAMP:
            return new.cmp[i] >= old.cmp[j]
        assert new.flags is not None and old.flags is not None
        hn, ho = new.flags[i] & HAS_HEADER, old.flags[j] & HAS_HEADER
        return (hn > ho) | ((hn == ho) & (new.cmp[i] >= old.cmp[j]))

    def _merge_sorted(self, old: _State, new: _State) -> _State:
        """Merge two key-sorted states whose keys are each unique; ``new`` holds the later offsets."""
        if not len(old):
            # a copy, not a view: a view would keep all of ``new``'s arrays alive for this bucket's share of them
            return _State(**{k: v.copy() for k, v in new.columns().items()}, **new.absent())
        left = np.searchsorted(old.hi, new.hi, "left")
        right = np.searchsorted(old.hi, new.hi, "right")
        span = right - left
        if (span > 1).any():
            # two distinct keys share the digest's high half (about one partition in 10^6 at 10^7 keys): the general
            # way, a sort of both
            both = _State(**{k: np.concatenate([v, getattr(new, k)]) for k, v in old.columns().items()}, **old.absent())
            return self._reduce(both)
        at = np.minimum(left, len(old) - 1)
        same = (span == 1) & (old.lo[at] == new.lo)
        idx = np.flatnonzero(same)
        won = idx[self._wins(new, idx, old, at[idx])]
        for name, column in old.columns().items():
            column[at[won]] = getattr(new, name)[won]
        fresh = np.flatnonzero(~same)
        if not len(fresh):
            return old
        where = np.where((span == 1) & (new.lo > old.lo[at]), right, left)[fresh]
        return _State(
            **{name: np.insert(column, where, getattr(new, name)[fresh]) for name, column in old.columns().items()},
            **old.absent(),
        )

    def finish(self) -> Survivors:
        self._merge()
        if self.keyless:
            raise keyless_refusal(self.partition, np.concatenate(self.keyless))
        s = self.settings
        horizon = None
        if s.drop_tombstones_older_than_ms is not None and self.newest is not None:
            horizon = self.newest - s.drop_tombstones_older_than_ms
        # the survivors fill one array as the buckets are released: never the state and a copy of it at once
        offsets = np.empty(self.keys, np.int64)
        filled = dropped = 0
        leo_dropped = False
        for b, st in enumerate(self.buckets):
            self.buckets[b] = _empty_state(s)
            kept = st.off
            if horizon is not None:
                assert st.flags is not None
                clock = st.clock if st.clock is not None else st.cmp
                assert clock is not None
                old = (st.flags & IS_DELETE).astype(bool) & (clock < horizon)
                kept = st.off[~old]
                dropped += int(old.sum())
                leo_dropped |= bool((st.off[old] == self.last_offset).any())
            offsets[filled : filled + len(kept)] = kept
            filled += len(kept)
            del st, kept
        offsets = offsets[:filled]
        offsets.sort()
        if self.last_offset is not None and (not filled or offsets[-1] != self.last_offset):
            offsets = np.append(offsets, np.int64(self.last_offset))  # the log end record stays (KIP-280)
        return Survivors(
            offsets=offsets,
            records=self.records,
            distinct_keys=self.keys,
            tombstones_dropped=dropped - int(leo_dropped),  # a delete at the log end stays anyway
            bytes_per_key=s.bytes_per_key,
            log_end_offset=self.last_offset,
            newest_timestamp=self.newest,
        )


def offset_ranges(offsets: np.ndarray, limit: int = KEYLESS_LISTED) -> str:
    """``3, 7, 10-19`` for an operator: consecutive offsets as ranges, at most ``limit`` of them."""
    if not len(offsets):
        return ""
    breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [len(offsets)]]) - 1
    parts = [
        f"{int(offsets[a])}" if a == b else f"{int(offsets[a])}-{int(offsets[b])}"
        for a, b in zip(starts[:limit].tolist(), ends[:limit].tolist())
    ]
    more = len(starts) - limit
    return ", ".join(parts) + (f" and {more} more ranges" if more > 0 else "")


def keyless_refusal(partition: str, offsets: np.ndarray) -> CompactionRefusedError:
    return CompactionRefusedError(
        f"partition {partition}: {len(offsets)} records without a key, which Kafka refuses on a compacted topic, at "
        f"offsets {offset_ranges(offsets)}",
        offset=int(offsets[0]),
        hint="Nothing was changed. Compaction cannot tell which keyless record to keep: leave this topic out of "
        "--compact (it is then converted as it is), or check why the topic holds keyless records.",
    )


def pass_one(
    sources: Iterable[SegmentSource],
    settings: Settings,
    partition: str = "",
    chunk_bytes: int = 8 << 20,
    merge_at: int = MERGE_AT_LEAST,
) -> Survivors:
    """The survivors of a partition whose segments are ``sources`` (in offset order)."""
    reduction = PassOne(settings, partition, merge_at)
    for facts in iter_facts(sources, settings, chunk_bytes):
        reduction.add(facts)
    return reduction.finish()


@dataclass(frozen=True)
class Tally:
    records_kept: int
    bytes: int
    bytes_kept: int
    tombstones_kept: int


def tally(
    sources: Iterable[SegmentSource], settings: Settings, survivors: np.ndarray, chunk_bytes: int = 8 << 20
) -> Tally:
    """What the survivors amount to (records, bytes of keys, values and headers, deletes): a second read, so pass
    one need not keep a size per key."""
    kept = total = kept_bytes = deletes = 0
    for facts in iter_facts(sources, settings, chunk_bytes, digests=False):
        mask = kept_mask(facts.offsets, survivors)
        kept += int(mask.sum())
        total += int(facts.sizes.sum())
        kept_bytes += int(facts.sizes[mask].sum())
        deletes += int((facts.delete & mask).sum())
    return Tally(kept, total, kept_bytes, deletes)


def plan_compaction(
    sources: list[SegmentSource], settings: Settings, draft: CompactionPlan, partition: str
) -> CompactionPlan:
    """What ``plan`` records for a compacted partition: ``draft`` (its rule) with pass one's and a tally's findings."""
    survivors = pass_one(sources, settings, partition)
    counts = tally(sources, settings, survivors.offsets)
    return dataclasses.replace(
        draft,
        records=survivors.records,
        distinct_keys=survivors.distinct_keys,
        records_kept=counts.records_kept,
        bytes=counts.bytes,
        bytes_kept=counts.bytes_kept,
        tombstones_kept=counts.tombstones_kept,
        tombstones_dropped=survivors.tombstones_dropped,
        pass_one_bytes=survivors.state_bytes,
        survivors_sha256=survivors.sha256(),
    )


# --- pass two: the conversion drops the losers ---------------------------------------------------------------


def kept_mask(offsets: np.ndarray, survivors: np.ndarray) -> np.ndarray:
    """Which of ``offsets`` are survivors (``survivors`` sorted; a memory map is fine: only the probed pages load)."""
    if not len(survivors) or not len(offsets):
        return np.zeros(len(offsets), bool)
    at = np.minimum(np.searchsorted(survivors, offsets), len(survivors) - 1)
    return np.asarray(survivors[at]) == offsets


def subset_columns(cols: RecordColumns, keep: np.ndarray) -> RecordColumns:
    headers = None
    if cols.headers is not None:
        headers = [h for h, k in zip(cols.headers, keep.tolist()) if k]
        headers = headers if any(headers) else None
    return RecordColumns(
        cols.buffer,
        cols.offsets[keep],
        cols.timestamps[keep],
        cols.key_pos[keep],
        cols.key_len[keep],
        cols.value_pos[keep],
        cols.value_len[keep],
        headers,
    )


def retained(item: Entry, survivors: np.ndarray) -> tuple[Entry | None, np.ndarray | None]:
    """The entry with only its surviving records: (None, None) when none survives, (item, None) when all do, else
    (the entry cut down, the mask). A cut v2 batch must be re-encoded (``encode_retained_v2``), never copied."""
    cols = item.records
    assert cols is not None
    if not len(cols):
        return item, None  # an empty v2 batch (a producer's retained state) is not ours to drop
    keep = kept_mask(cols.offsets, survivors)
    if keep.all():
        return item, None
    if not keep.any():
        return None, None
    kept = subset_columns(cols, keep)
    if isinstance(item, legacy.LegacyRun):
        return (
            legacy.LegacyRun(
                item.positions[keep], item.sizes[keep], item.magics[keep], item.attributes[keep], item.crcs[keep], kept
            ),
            keep,
        )
    return dataclasses.replace(item, records=kept), keep


def encode_retained_v2(batch: v2.V2Batch, keep: np.ndarray) -> tuple[bytes, RecordColumns, int]:
    """A v2 batch that lost records, as Kafka's cleaner rebuilds it (``MemoryRecords.buildRetainedRecordsInto``):
    the same base offset and last offset delta (the offset range and the producer's last sequence stay), codec,
    timestamp type, producer fields, flags and leader epoch; base and max timestamp from the kept records. Unlike
    the cleaner it keeps each record's attributes, so a KIP-87 delete flag survives. Returns the bytes, the kept
    records and the batch's max timestamp."""
    cols = batch.records
    assert cols is not None
    kept = subset_columns(cols, keep)
    attributes = record_attributes(batch)[keep]
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamps = np.full(len(kept), batch.max_timestamp, np.int64)
        max_ts = batch.max_timestamp
    else:
        timestamps = kept.timestamps
        max_ts = max(int(timestamps.max()), NO_TIMESTAMP)
    horizon = batch.delete_horizon_ms
    base_ts = horizon if horizon is not None else int(timestamps[0])
    body = v2._encode_records(kept, kept.offsets - batch.base_offset, timestamps - base_ts, attributes)
    if batch.compression:
        body = codecs.compress(batch.compression, body, v2.MAGIC)
    tail = (
        v2._COVERED.pack(
            batch.attributes,
            batch.last_offset_delta,
            base_ts,
            max_ts,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            len(kept),
        )
        + body
    )
    head = v2._UNCOVERED.pack(batch.base_offset, len(tail) + 9, batch.partition_leader_epoch, v2.MAGIC, crc32c(tail))
    return head + tail, dataclasses.replace(kept, timestamps=timestamps), max_ts


def load_survivors(path: str | Path) -> np.ndarray:
    """The survivors file the compact stage wrote, memory-mapped (a segment probes only its own range)."""
    return np.load(path, mmap_mode="r", allow_pickle=False)
