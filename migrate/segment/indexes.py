"""Building both indexes from the batches of a segment, the way ``LogSegment.recover`` does (K41 line ~478).

Per batch, in file order: the max timestamp so far is raised to the batch's max (remembering the batch's last
offset the first time a max is reached); then, once more than ``index.interval.bytes`` lie between the batch's start
and the last offset-index entry, an entry (the batch's last offset, its start position) is added, with a time-index
entry (max so far, its offset) when that max grew past the last time entry. When the segment is rolled, the time
index gets the final max once more if it grew since.

``index_entries`` is that loop over a run of batches; the C accelerator has a twin of it (one pass, no Python per
batch), and ``IndexBuilder`` feeds it chunk after chunk, carrying the loop's state between calls.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from migrate.format import accel
from migrate.format.buffers import int64_column
from migrate.format.records import NO_TIMESTAMP
from migrate.model.plan_tree import DEFAULT_INDEX_INTERVAL_BYTES
from migrate.segment import offset_index, time_index

_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_TIME_ENTRY = struct.Struct(">qi")  # a time-index entry: timestamp, offset relative to the base

# (valid bytes, last index entry, max timestamp so far, offset of that max, timestamp of the last time-index entry)
IndexState = tuple[int, int, int, int, int]
INITIAL_STATE: IndexState = (0, 0, NO_TIMESTAMP, -1, NO_TIMESTAMP)


def index_entries(
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    interval: int,
    valid: int,
    last_entry: int,
    max_ts: int,
    off_of_max: int,
    last_time_ts: int,
) -> tuple[bytes, bytes, int, int, int, int, int]:
    """The reference of the accelerator's ``index_entries``: same arguments, same result, same refusals.

    Returns (offset entries, time entries, *state after the last batch): entries as native int64 pairs, (last offset,
    position) and (timestamp, offset). Raises ValueError for arrays of different lengths, a negative size or a state
    whose last entry is not in 0..valid, OverflowError for positions beyond int64.
    """
    for name, value in (("interval", interval), ("valid", valid), ("last_entry", last_entry), ("max_ts", max_ts)):
        if not -(2**63) <= value <= _INT64_MAX:
            raise OverflowError(f"{name} {value} is not an int64")
    for name, value in (("off_of_max", off_of_max), ("last_time_ts", last_time_ts)):
        if not -(2**63) <= value <= _INT64_MAX:
            raise OverflowError(f"{name} {value} is not an int64")
    if valid < 0 or last_entry < 0 or last_entry > valid:
        raise ValueError(f"index state: last entry {last_entry} must lie in 0..valid bytes {valid}")
    n = len(sizes)
    for name, column in (("last_offsets", last_offsets), ("max_timestamps", max_timestamps)):
        if len(column) != n:
            raise ValueError(f"{name} has {len(column)} items but sizes has {n}")
    sizes = np.asarray(sizes, np.int64)
    # the accelerator's order: the first batch, in file order, that is negative or ends beyond int64 is refused
    negative = sizes < 0
    first_negative = int(np.argmax(negative)) if negative.any() else n
    if float(valid) + float(np.sum(sizes[:first_negative], dtype=np.float64)) > 2**62:  # near the limit: exactly
        end = valid
        for size in sizes[:first_negative].tolist():
            end += size
            if end > _INT64_MAX:
                raise OverflowError("batches end beyond an int64 byte position")
    if first_negative < n:
        raise ValueError(f"batch {first_negative} has a negative size {int(sizes[first_negative])}")
    offsets_out: list[tuple[int, int]] = []
    times_out: list[tuple[int, int]] = []
    if n:
        # Indexed batches are rare (one per ~4 KiB), so the work per batch is a cumulative sum and a search for the
        # next batch past the interval, not a Python step per batch.
        starts = valid + np.concatenate([[0], np.cumsum(sizes[:-1])])
        running = np.maximum.accumulate(max_timestamps)
        since = 0  # first batch not yet folded into (max_ts, off_of_max)

        def fold_through(j: int) -> None:
            nonlocal max_ts, off_of_max, since
            if j >= since and int(running[j]) > max_ts:
                top = int(running[j])
                first = since + int(np.argmax(max_timestamps[since : j + 1] == top))
                max_ts, off_of_max = top, int(last_offsets[first])
            since = max(since, j + 1)

        while True:
            threshold = last_entry + interval
            if threshold < int(starts[-1]):
                j = int(np.searchsorted(starts, threshold, side="right"))
                j = max(j, since)
            else:
                j = n
            if j >= n:
                break
            fold_through(j)
            offsets_out.append((int(last_offsets[j]), int(starts[j])))
            if max_ts > last_time_ts:
                times_out.append((max_ts, off_of_max))
                last_time_ts = max_ts
            last_entry = int(starts[j])
        fold_through(n - 1)
        valid = int(starts[-1]) + int(sizes[-1])
    return (
        np.array(offsets_out, np.int64).tobytes(),
        np.array(times_out, np.int64).tobytes(),
        valid,
        last_entry,
        max_ts,
        off_of_max,
        last_time_ts,
    )


_index_entries = accel.pick(accel.compiled("index_entries"), index_entries)


@dataclass
class IndexBuilder:
    """Fed each written batch in order (size, last offset, max timestamp); yields both index files."""

    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    state: IndexState = INITIAL_STATE
    offset_parts: list[bytes] = field(default_factory=list)
    time_parts: list[bytes] = field(default_factory=list)

    @property
    def valid_bytes(self) -> int:
        return self.state[0]

    def add_batches(self, sizes: np.ndarray, last_offsets: np.ndarray, max_timestamps: np.ndarray) -> None:
        """Batches written back to back from the current end of the log."""
        if not len(sizes):
            return
        offsets, times, *state = _index_entries(
            int64_column(sizes),
            int64_column(last_offsets),
            int64_column(max_timestamps),
            self.index_interval_bytes,
            *self.state,
        )
        self.state = tuple(state)  # type: ignore[assignment]
        if offsets:
            self.offset_parts.append(offsets)
        if times:
            self.time_parts.append(times)

    def entries(self) -> tuple[np.ndarray, np.ndarray]:
        """(offset entries, time entries with the roll entry) as (n, 2) int64 arrays."""
        off = np.frombuffer(b"".join(self.offset_parts), np.int64).reshape(-1, 2)
        tim = np.frombuffer(b"".join(self.time_parts), np.int64).reshape(-1, 2)
        _, _, max_ts, off_of_max, last_time_ts = self.state
        if max_ts > last_time_ts:
            tim = np.concatenate([tim, np.array([[max_ts, off_of_max]], np.int64)])
        return off, tim

    def finish(self) -> tuple[bytes, bytes]:
        """(.index bytes, .timeindex bytes), with the time index's final roll entry."""
        if not self.offset_parts and not self.time_parts:
            # no entry but the roll one, as in every segment under index.interval.bytes: the same bytes as
            # ``time_index.encode`` gives, without its arrays
            _, _, max_ts, off_of_max, last_time_ts = self.state
            if max_ts <= last_time_ts:
                return b"", b""
            relative = off_of_max - self.base_offset
            if 0 <= relative <= _INT32_MAX and -(2**63) <= max_ts <= _INT64_MAX:
                return b"", _TIME_ENTRY.pack(max_ts, relative)
        off, tim = self.entries()
        return (
            offset_index.encode(self.base_offset, off[:, 0], off[:, 1]),
            time_index.encode(self.base_offset, tim[:, 0], tim[:, 1]),
        )
