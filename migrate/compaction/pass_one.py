"""Compaction's pass one: the survivors of a partition, computed for memory (no files, no state).

``pass_one`` reads every record of a partition in offset order (``migrate.compaction.facts``) and keeps, per
distinct key, the winning offset and the one value the strategy compares, by KIP-280's rules
(``migrate.compaction.rules``). The state is numpy arrays sorted by key digest, in 256 buckets by its top byte:
pending records (at most an eighth of the state) are reduced by a sort and merged in by binary search, a bucket at a
time, so a merge neither sorts the state nor holds a second copy of it (``benchmarks/bench_compaction.py``: peak
about 1.5 times the KIP's estimate at 10^7 keys, reading buffers included).

Pass two is the conversion dropping the losers (``migrate.segment.compacted``): survivors keep their offsets,
dropped records leave gaps, as Kafka's cleaner does. ``migrate.compaction.reference`` is the deliberately simple
implementation the verification trusts instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from migrate.compaction.facts import Facts, SegmentSource, iter_facts
from migrate.compaction.rules import CompactionRefusedError, Settings
from migrate.model.plan_tree import CompactionPlan, CompactionStrategy
from migrate.segment.compacted import kept_mask

HAS_HEADER = 1
IS_DELETE = 2
MERGE_AT_LEAST = 1 << 18  # pending records merged into the state at once, at least
BUCKETS = 256  # the state's sorted runs, by the top byte of the key digest
_BUCKET_STARTS = np.array([b << 56 for b in range(1, BUCKETS)], np.uint64)  # where buckets 1.. begin
KEYLESS_LISTED = 50  # offsets of keyless records named in a refusal (ranges count as one)


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

    def with_columns(self, columns: dict[str, np.ndarray]) -> _State:
        """This state with ``columns`` (the present ones, by name) replaced; the absent ones stay absent."""
        return dataclasses.replace(self, **columns)

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
            part = part.with_columns({k: v[keyed] for k, v in part.columns().items()})
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
            part = winners.with_columns({k: v[start:end] for k, v in winners.columns().items()})
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
        return p.with_columns({k: v[pick] for k, v in p.columns().items()})

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
            return new.with_columns({k: v.copy() for k, v in new.columns().items()})
        left = np.searchsorted(old.hi, new.hi, "left")
        right = np.searchsorted(old.hi, new.hi, "right")
        span = right - left
        if (span > 1).any():
            # two distinct keys share the digest's high half (about one partition in 10^6 at 10^7 keys): the general
            # way, a sort of both
            both = old.with_columns({k: np.concatenate([v, getattr(new, k)]) for k, v in old.columns().items()})
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
        return old.with_columns(
            {name: np.insert(column, where, getattr(new, name)[fresh]) for name, column in old.columns().items()}
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
