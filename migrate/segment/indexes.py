"""Building both indexes from the batches of a segment, the way ``LogSegment.recover`` does (K41 line ~478)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from migrate.format.records import NO_TIMESTAMP
from migrate.model import DEFAULT_INDEX_INTERVAL_BYTES
from migrate.segment import offset_index, time_index


@dataclass
class IndexBuilder:
    """Fed each written batch in order (position, size, last offset, max timestamp); yields both index files."""

    base_offset: int
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    valid_bytes: int = 0
    last_index_entry: int = 0
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    offset_entries: list[tuple[int, int]] = field(default_factory=list)
    time_entries: list[tuple[int, int]] = field(default_factory=list)

    def add_batches(self, sizes: np.ndarray, last_offsets: np.ndarray, max_timestamps: np.ndarray) -> None:
        """Batches written back to back from the current end of the log."""
        interval = self.index_interval_bytes
        valid = self.valid_bytes
        last_entry = self.last_index_entry
        max_ts = self.max_timestamp
        off_of_max = self.offset_of_max_timestamp
        offsets = self.offset_entries
        times = self.time_entries
        # Indexed batches are rare (one per ~4 KiB), so the per-batch work is a cumulative sum and a scan for the
        # next batch past the interval, not a Python step per batch.
        ends = valid + np.cumsum(sizes)
        starts = ends - sizes
        running_max = np.maximum.accumulate(max_timestamps) if len(sizes) else max_timestamps
        i = 0
        n = len(sizes)
        while i < n:
            j = int(np.searchsorted(starts, last_entry + interval, side="right"))
            if j >= n:
                break
            # batch j is the first whose start is more than `interval` past the last entry
            max_ts, off_of_max = self._max_through(j, running_max, max_timestamps, last_offsets, max_ts, off_of_max, i)
            offsets.append((int(last_offsets[j]), int(starts[j])))
            if max_ts > (times[-1][0] if times else NO_TIMESTAMP):
                times.append((max_ts, off_of_max))
            last_entry = int(starts[j])
            i = j + 1
        if n:
            max_ts, off_of_max = self._max_through(
                n - 1, running_max, max_timestamps, last_offsets, max_ts, off_of_max, i
            )
            valid = int(ends[-1])
        self.valid_bytes = valid
        self.last_index_entry = last_entry
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = off_of_max

    @staticmethod
    def _max_through(
        j: int,
        running_max: np.ndarray,
        max_timestamps: np.ndarray,
        last_offsets: np.ndarray,
        max_ts: int,
        off_of_max: int,
        since: int,
    ) -> tuple[int, int]:
        """The max timestamp so far after batch j, and the last offset of the first batch that reached it."""
        if j < since:
            return max_ts, off_of_max
        chunk_max = int(running_max[j])
        if chunk_max > max_ts:
            first = since + int(np.argmax(max_timestamps[since : j + 1] == chunk_max))
            return chunk_max, int(last_offsets[first])
        return max_ts, off_of_max

    def finish(self) -> tuple[bytes, bytes]:
        """(.index bytes, .timeindex bytes), with the time index's final roll entry."""
        times = list(self.time_entries)
        last_ts = times[-1][0] if times else NO_TIMESTAMP
        if self.max_timestamp > last_ts:
            times.append((self.max_timestamp, self.offset_of_max_timestamp))
        off = np.array(self.offset_entries, np.int64).reshape(-1, 2)
        tim = np.array(times, np.int64).reshape(-1, 2)
        return (
            offset_index.encode(self.base_offset, off[:, 0], off[:, 1]),
            time_index.encode(self.base_offset, tim[:, 0], tim[:, 1]),
        )
